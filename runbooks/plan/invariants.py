"""Invariants over the whole rendered stack: what only shows across objects, judged on what Helm rendered and what
the program registers, never on facts a component declares. Each is a named check; a violation holds the plan as
a mandatory policy does (exit 3)."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from components.spec.wellknown import POOL_TAINT, UNVALIDATED_TAINT

GPU_NODE_TAINTS = ((UNVALIDATED_TAINT, "NoSchedule"), (POOL_TAINT, "NoSchedule"))
"""Taints the stack puts on GPU nodes (components/facility/admission.py): unvalidated until the node check passes,
and the pool of every slurm and flex node."""

CEPHFS_SECRETS = tuple(f"csi.storage.k8s.io/{stage}-secret-{part}" for stage in
                       ("provisioner", "controller-expand", "node-stage") for part in ("name", "namespace"))
PROVISIONER_PARAMETERS: dict[str, tuple[str, ...]] = {
    # csi-driver-nfs docs, "Storage Class Usage": server and share are required.
    "nfs.csi.k8s.io": ("server", "share"),
    # ceph-csi cephfs docs: clusterID and fsName, and the secrets it provisions, expands and mounts with.
    "rook-ceph.cephfs.csi.ceph.com": ("clusterID", "fsName", *CEPHFS_SECRETS),
    # Local volumes are created by the static provisioner, not on demand: no parameters.
    "kubernetes.io/no-provisioner": (),
}
"""What each provisioner the stack uses needs in a StorageClass before it can provision a volume."""


@dataclass
class Invariant:
    name: str
    description: str
    violations: list[str] = field(default_factory=list)


def _named(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind')} {where}{metadata.get('name')}"


def tolerates(tolerations: Iterable[dict[str, Any]], key: str, effect: str) -> bool:
    """Kubernetes' matching: an empty key with Exists tolerates every taint; an empty effect, every effect."""
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", effect):
            continue
        operator = toleration.get("operator", "Equal")
        if (operator == "Exists" and toleration.get("key") in (None, "", key)) or \
                (operator == "Equal" and toleration.get("key") == key):
            return True
    return False


def daemonsets_reach_gpu_nodes(objects: list[dict[str, Any]]) -> list[str]:
    """A node agent (metrics, storage, device discovery) must run on the GPU nodes, which are all tainted."""
    missing = []
    for obj in objects:
        if obj.get("kind") != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        untolerated = [key for key, effect in GPU_NODE_TAINTS if not tolerates(pod.get("tolerations") or [], key,
                                                                               effect)]
        if untolerated:
            missing.append(f"{_named(obj)} does not tolerate {', '.join(untolerated)}: it never runs on those nodes")
    return missing


def storage_classes_provision(objects: list[dict[str, Any]]) -> list[str]:
    problems = []
    for obj in objects:
        if obj.get("kind") != "StorageClass":
            continue
        provisioner = obj.get("provisioner", "")
        needed = PROVISIONER_PARAMETERS.get(provisioner)
        if needed is None:
            problems.append(f"{_named(obj)}: provisioner {provisioner!r} is none the stack deploys")
            continue
        lacking = [p for p in needed if not (obj.get("parameters") or {}).get(p)]
        if lacking:
            problems.append(f"{_named(obj)} ({provisioner}) lacks {', '.join(lacking)}: no volume can be provisioned")
    return problems


def metrics_tiers_persist(objects: list[dict[str, Any]]) -> list[str]:
    """The hot tier (the Prometheus resource) and any StatefulSet (the cold tier) keep their data on a volume."""
    problems = []
    for obj in objects:
        if obj.get("kind") == "Prometheus" and not ((obj.get("spec") or {}).get("storage") or {}).get(
                "volumeClaimTemplate"):
            problems.append(f"{_named(obj)} has no spec.storage.volumeClaimTemplate: its data dies with the pod")
        if obj.get("kind") == "StatefulSet" and not obj["spec"].get("volumeClaimTemplates"):
            problems.append(f"{_named(obj)} claims no volume: its data dies with the pod")
    return problems


CHECKS: tuple[tuple[str, str, Callable[[list[dict[str, Any]]], list[str]]], ...] = (
    ("gpu-daemonsets-tolerate-taints", "Every DaemonSet tolerates the taints on GPU nodes.",
     daemonsets_reach_gpu_nodes),
    ("storage-classes-provisionable", "Every StorageClass carries what its provisioner needs.",
     storage_classes_provision),
    ("metrics-tiers-persist", "The hot and cold metrics tiers keep their data on volumes.", metrics_tiers_persist),
)


def check_invariants(objects: list[dict[str, Any]]) -> list[Invariant]:
    """Every invariant, judged on every object the stack would create: rendered by Helm and registered directly."""
    return [Invariant(name, description, judge(objects)) for name, description, judge in CHECKS]
