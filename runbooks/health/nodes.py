"""Slurm's and Kubernetes' view of every GPU node for the health decision, and the health controller's moves on them.

Slurm is read with one `scontrol --oneliner show node` (every node, one line each), Kubernetes with one
`kubectl get nodes -o json` and one `kubectl get pods -o json` of the running pods. Slurm's fields are untrusted as in
runbooks/flex/slurm_read.py: a State that is not Slurm's reads as UNREADABLE (a node Slurm has out, never touched);
a Reason is only ever compared with the controller's own. Kubernetes' answer is JSON whose every field is checked for
its type; a node or pod that does not read is skipped, and a node not listed is not a Kubernetes node.

Moves are idempotent and ordered so a crash between two commands leaves a state the next decision finishes: a drain
marks Slurm first (the Reason is what says the node is the controller's), then cordons and annotates; a return
uncordons first and resumes Slurm last.
"""

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from components.scheduling.health_decision import (
    HANDED_REASON,
    REASON_CHARS,
    SUSPECT_REASON,
    KubeView,
    Phase,
    SlurmView,
)
from components.site.site import Site
from components.site.wellknown import FLEX_LENT_LABEL, HEALTH_ANNOTATION, HOLD_LABEL
from components.slurm.conf import slurm_nodes
from runbooks.flex import slurm_read
from runbooks.flex.lending import LIVE, REQUEUE_MARK, Runner
from runbooks.flex.slurm_read import JOB_LINE_FORMAT, JobRecord

MAX_REASON_READ = 1024
"""A Reason longer than this is no one's we know: read only as far (it is only compared)."""


def slurm_views(text: str) -> dict[str, SlurmView]:
    """`scontrol --oneliner show node` -> node -> its view; lines without a NodeName are skipped."""
    views = {}
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for pair in line.split():
            key, _, value = pair.partition("=")
            fields.setdefault(key, value)
        name = fields.get("NodeName", "")
        if not name:
            continue
        # Reason may hold spaces; scontrol prints it last, then ` [user@time]`.
        reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0].strip() if " Reason=" in line else ""
        views[name] = SlurmView(slurm_read.node_state(fields.get("State", "")), reason[:MAX_REASON_READ])
    return views


def _gpu_request(pod: dict[str, Any]) -> bool:
    containers = pod.get("spec", {}).get("containers", [])
    for container in containers if isinstance(containers, list) else []:
        resources = container.get("resources", {}) if isinstance(container, dict) else {}
        for kind in ("limits", "requests"):
            asked = resources.get(kind, {}) if isinstance(resources, dict) else {}
            if isinstance(asked, dict) and str(asked.get("nvidia.com/gpu", "0")) not in ("0", ""):
                return True
    return False


def kube_views(nodes_json: str, pods_json: str) -> dict[str, KubeView]:
    """`kubectl get nodes -o json` and `kubectl get pods -A -o json` (running pods) -> node -> its view."""
    gpu_pods: Counter[str] = Counter()
    for pod in _items(pods_json, "pods"):
        node = pod.get("spec", {}).get("nodeName") if isinstance(pod.get("spec"), dict) else None
        if isinstance(node, str) and _gpu_request(pod):
            gpu_pods[node] += 1
    views = {}
    for item in _items(nodes_json, "nodes"):
        meta, spec = item.get("metadata"), item.get("spec", {})
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not isinstance(spec, dict):
            continue
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        notes = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        assert isinstance(labels, dict) and isinstance(notes, dict)
        mark = notes.get(HEALTH_ANNOTATION, "")
        views[meta["name"]] = KubeView(
            cordoned=spec.get("unschedulable") is True, mark=mark if mark in (Phase.SUSPECT, Phase.HANDED) else "",
            lent=labels.get(FLEX_LENT_LABEL) == "true", held_by=str(labels.get(HOLD_LABEL, ""))[:63],
            gpu_pods=gpu_pods[meta["name"]])
    return views


def _items(text: str, what: str) -> list[dict[str, Any]]:
    try:
        items = json.loads(text)["items"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"kubectl get {what} -o json: no item list ({type(error).__name__})") from None
    if not isinstance(items, list):
        raise ValueError(f"kubectl get {what} -o json: items is not a list")
    return [item for item in items if isinstance(item, dict)]


def slurm_node_names(site: Site) -> set[str]:
    return {n.name for n in slurm_nodes(site)}


@dataclass
class Nodes:
    site: Site
    slurm: Runner
    kubectl: Runner
    progress: Callable[[str], None]

    def read(self) -> tuple[dict[str, SlurmView], dict[str, KubeView]]:
        """Slurm's view of the site's Slurm nodes and Kubernetes' of its nodes; raises CommandError or ValueError."""
        ours = slurm_node_names(self.site)
        slurm = {name: view for name, view in slurm_views(
            self.slurm(["scontrol", "--oneliner", "show", "node"])).items() if name in ours}
        kube = kube_views(self.kubectl(["kubectl", "get", "nodes", "--output", "json"]),
                          self.kubectl(["kubectl", "get", "pods", "--all-namespaces", "--field-selector",
                                        "status.phase=Running", "--output", "json"]))
        return slurm, kube

    def drain(self, node: str, detail: str, in_slurm: bool, in_kube: bool, phase: Phase = Phase.SUSPECT,
              reason_now: str = "") -> None:
        """Drains the node in Slurm with the phase's reason (unless it already has it), then cordons and marks it."""
        prefix = HANDED_REASON if phase == Phase.HANDED else SUSPECT_REASON
        if in_slurm and not reason_now.startswith(prefix):
            reason = f"{prefix}: {detail}"[:REASON_CHARS]
            self.slurm(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        if in_kube:
            self.kubectl(["kubectl", "cordon", node])
            self.kubectl(["kubectl", "annotate", "node", node, f"{HEALTH_ANNOTATION}={phase.value}", "--overwrite"])
        self.progress(f"{node}: {'handed to a human' if phase == Phase.HANDED else 'drained'}: {detail}")

    def requeue(self, node: str) -> list[str]:
        """Requeues the jobs running on the node that Slurm may requeue (squeue --json's typed fields: a batch job,
        requeue allowed, not part of a heterogeneous job, not marked by a lend, whose own requeue it is); returns
        their ids. Raises CommandError, or ValueError when squeue --json gives no job list."""
        running = [j.id for j in slurm_read.job_lines(self.slurm(
            ["squeue", "--noheader", f"--nodelist={node}", f"--states={LIVE}", JOB_LINE_FORMAT])) if j.readable]
        if not running:
            return []
        records = slurm_read.job_records(self.slurm(["squeue", "--json"]))
        requeued = []
        for job in running:
            record = records.get(job)
            if (isinstance(record, JobRecord) and record.requeueable and not record.heterogeneous
                    and not record.admin_comment.startswith(REQUEUE_MARK)):
                self.slurm(["scontrol", "requeue", job])
                requeued.append(job)
        self.progress(f"{node}: requeued {', '.join(requeued) or 'no job'} of {', '.join(running)}")
        return requeued

    def give_back(self, node: str, reason_now: str, in_kube: bool) -> None:
        """Uncordons and unmarks the node, then resumes it in Slurm: only from the controller's own drain."""
        if in_kube:
            self.kubectl(["kubectl", "uncordon", node])
            self.kubectl(["kubectl", "annotate", "node", node, f"{HEALTH_ANNOTATION}-"])
        if reason_now.startswith(SUSPECT_REASON):
            self.slurm(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        self.progress(f"{node}: returned to service")
