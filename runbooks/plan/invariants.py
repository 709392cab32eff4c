"""Invariants over the whole rendered stack: what only shows across objects, judged on what Helm rendered and what
the program registers, never on facts a component declares. Each is a named check; a violation holds the plan as
a mandatory policy does (exit 3)."""

import base64
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import promql_parser
import yaml

from components.inference.demand import DEMAND_QUERIES, LATENCY_QUERY
from components.monitoring.dashboards import VARIABLE, as_sent, panels, targets
from components.monitoring.gate_queries import gate_queries
from components.monitoring.report_queries import report_queries
from components.site.endpoints import placeholder
from components.site.wellknown import POOL_TAINT, UNVALIDATED_TAINT
from runbooks.plan.admission import pools_exclusive
from runbooks.plan.converge import first_install_converges
from runbooks.plan.engine_ingress import engines_admit_only_the_gateway
from runbooks.plan.images import images_from_mirror
from runbooks.plan.producers import Deployed, producers
from runbooks.plan.promql import selectors
from runbooks.plan.references import references_resolve

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

DASHBOARD_SIDECAR, DATASOURCE_SIDECAR = "grafana-sc-dashboard", "grafana-sc-datasources"
"""The grafana chart's sidecar containers that load dashboards and data sources from labelled objects."""
GRAFANA_BUILTIN_SOURCES = frozenset({"-- Mixed --", "-- Grafana --", "-- Dashboard --", "grafana"})
"""Grafana's built-in data sources (their uids and names): each panel query of a Mixed one names its own."""


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


OPERAND_ASSET_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
"""What the GPU Operator's operand DaemonSets tolerate of themselves (gpu-operator assets/state-*/*daemonset*.yaml,
e.g. state-device-plugin/0500_daemonset.yaml)."""


def operands_reach_gpu_nodes(objects: list[dict[str, Any]]) -> list[str]:
    """The GPU Operator creates its operands (driver, toolkit, device plugin, DCGM and its exporter, feature discovery,
    validator) at run time, so no render holds their DaemonSets: the ClusterPolicy says what they tolerate. The
    operator gives every operand `daemonsets.tolerations` when the list is not empty, else leaves the asset's own
    (controllers/object_controls.go, applyCommonDaemonsetConfig)."""
    missing = []
    for policy in objects:
        if policy.get("kind") != "ClusterPolicy":
            continue
        given = ((policy.get("spec") or {}).get("daemonsets") or {}).get("tolerations") or []
        tolerations = given or OPERAND_ASSET_TOLERATIONS
        untolerated = [key for key, effect in GPU_NODE_TAINTS if not tolerates(tolerations, key, effect)]
        if untolerated:
            which = "spec.daemonsets.tolerations do" if given else (
                "spec.daemonsets.tolerations is empty, so the operands keep the assets' own (nvidia.com/gpu), which do")
            missing.append(f"{_named(policy)}: {which} not tolerate {', '.join(untolerated)}: the driver, device "
                           "plugin and DCGM exporter never run on those nodes")
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


def _sidecar(deployed: Deployed, container: str) -> tuple[str, str] | None:
    """(label, value) a Grafana sidecar loads ConfigMaps and Secrets by, from the rendered Grafana Deployment."""
    for grafana in deployed.of_kind("Deployment"):
        for c in grafana["spec"]["template"]["spec"].get("containers", []):
            if c.get("name") == container:
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                return env.get("LABEL", ""), env.get("LABEL_VALUE", "1")
    return None


def _loaded(deployed: Deployed, container: str, objects: list[dict[str, Any]] | None = None) -> Iterator[str]:
    """The data files of every ConfigMap and Secret (of `objects`, all by default) that the sidecar `container`
    loads into Grafana."""
    label = _sidecar(deployed, container)
    for obj in deployed.objects if objects is None else objects:
        if label and obj.get("kind") in ("ConfigMap", "Secret") and \
                ((obj.get("metadata") or {}).get("labels") or {}).get(label[0]) == label[1]:
            encoded = obj.get("kind") == "Secret"
            for value in (obj.get("data") or {}).values():
                yield base64.b64decode(value).decode() if encoded else value


def dashboards(deployed: Deployed, objects: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [json.loads(text) for text in _loaded(deployed, DASHBOARD_SIDECAR, objects)]


def datasources(deployed: Deployed) -> list[dict[str, Any]]:
    return [d for text in _loaded(deployed, DATASOURCE_SIDECAR) for d in (yaml.safe_load(text) or {}).get(
        "datasources", [])]


def metric_reads(deployed: Deployed) -> Iterator[tuple[str, str]]:
    """(reader, PromQL) of every query the stack's own rules, its dashboards, the rollout's gates, the lending
    controller and gpuctl report run. The charts' bundled rules and dashboards read Kubernetes' own components and
    ship with their producers' scrape jobs."""
    for rule_object in deployed.registered:
        if rule_object.get("kind") == "PrometheusRule":
            for group in rule_object["spec"].get("groups", []):
                for rule in group.get("rules", []):
                    yield f"rule {rule.get('alert') or rule.get('record')}", rule["expr"]
    for board in dashboards(deployed, deployed.registered):
        for panel, target in targets(board):
            yield f"dashboard {board.get('uid')} panel {panel.get('title')!r}", as_sent(target["expr"], board)
    for gate, query in gate_queries(60).items():
        yield f"rollout gate {gate}", query
    for signal, query in {**DEMAND_QUERIES, "ttft_p95_s": LATENCY_QUERY}.items():
        yield f"lending controller {signal}", query
    for figure, query in report_queries(step_s=300, window_s=7 * 86_400).items():
        yield f"gpuctl report {figure}", query


def metrics_have_producers(deployed: Deployed) -> list[str]:
    """Every series a rule, a dashboard or a gate reads is produced by something deployed and scraped, with the
    labels it selects on; one violation per metric, naming who reads it."""
    made = producers(deployed)
    by_metric = {m: p for p in made if not p.absent for m in p.metrics}
    unproduced: dict[str, list[str]] = {}
    unlabelled: dict[tuple[str, str], list[str]] = {}
    violations = []
    for reader, expr in metric_reads(deployed):
        for selector in selectors(expr):
            matchers = selector.matchers.matchers
            names = [selector.name] if selector.name else []
            for m in matchers:
                if m.name == "__name__":
                    names = [m.value] if m.op == promql_parser.MatchOp.Equal else sorted(
                        n for n in by_metric if re.fullmatch(m.value, n))
            if not names:
                violations.append(f"{reader} reads {selector.prettify()}: no produced metric matches")
            for name in names:
                producer = by_metric.get(name)
                if producer is None:
                    unproduced.setdefault(name, []).append(reader)
                    continue
                for m in matchers:
                    if m.name != "__name__" and not producer.has_label(m.name, name):
                        unlabelled.setdefault((name, m.name), []).append(reader)
    for name, readers in sorted(unproduced.items()):
        read = f"{name} (read by {', '.join(sorted(set(readers)))})"
        why = "; ".join(f"{p.name}: {p.absent}" for p in made if p.absent and name in p.metrics)
        violations.append(f"{read} has no producer the stack deploys and scrapes" + (f" ({why})" if why else ""))
    violations += [f"{name} (read by {', '.join(sorted(set(readers)))}) is selected on label {label}, which "
                   f"{by_metric[name].name} does not produce as deployed"
                   for (name, label), readers in sorted(unlabelled.items())]
    return violations


def _service_at(deployed: Deployed, url: str) -> bool:
    """Whether a URL's host:port is a Service the stack deploys (name.namespace[.svc...])."""
    parts = urlsplit(url)
    host = (parts.hostname or "").split(".")
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return len(host) >= 2 and any(
        (s.get("metadata") or {}).get("name") == host[0] and (s.get("metadata") or {}).get("namespace") == host[1]
        and port in {p.get("port") for p in s["spec"].get("ports", [])} for s in deployed.of_kind("Service"))


def dashboards_have_datasources(deployed: Deployed) -> list[str]:
    """Every data source a panel names is provisioned and reaches a Service; the tier each Prometheus remote-writes
    to (the cold tier) is one of them, so the year of history can be read."""
    sources = datasources(deployed)
    problems = [f"data source {d.get('name')!r} points at {d.get('url')}, which is no Service the stack deploys"
                for d in sources if d.get("url") and not _service_at(deployed, d["url"])]
    types = {d.get("type") for d in sources}
    for board in dashboards(deployed):
        variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
        for panel in panels(board):
            for ref in [panel.get("datasource"), *(t.get("datasource") for t in panel.get("targets", []))]:
                if not ref:
                    continue
                # A string is the legacy form: a data source's name, or a variable.
                uid = str(ref.get("uid", "") if isinstance(ref, dict) else ref)
                variable = VARIABLE.fullmatch(uid)
                if variable:
                    chosen = variables.get(variable.group(1) or variable.group(2)) or {}
                    if chosen.get("type") != "datasource" or chosen.get("query") not in types:
                        problems.append(f"dashboard {board.get('uid')} panel {panel.get('title')!r}: data source "
                                        f"{uid} offers no provisioned data source of type {chosen.get('query')!r}")
                elif uid not in GRAFANA_BUILTIN_SOURCES | {d.get("uid") for d in sources} | {d.get("name")
                                                                                           for d in sources}:
                    problems.append(f"dashboard {board.get('uid')} panel {panel.get('title')!r}: no data source "
                                    f"with uid {uid!r}")
    readable = {urlsplit(d["url"]).netloc for d in sources if d.get("url")}
    for prometheus in deployed.of_kind("Prometheus"):
        for remote in prometheus["spec"].get("remoteWrite", []):
            if urlsplit(remote["url"]).netloc not in readable:
                problems.append(f"{_named(prometheus)} writes to {remote['url']}, which no Grafana data source reads")
    return sorted(set(problems))


IN_CLUSTER_SUFFIXES = (".svc", ".svc.cluster.local")
"""How a URL names a Service inside the cluster (Kubernetes DNS for Services: <service>.<namespace>.svc[.<zone>])."""
CONFIG_KEY = "alertmanager.yaml"
"""The key of the Alertmanager config in its Secret, which the Prometheus operator reads (prometheus-operator
Documentation/api.md, AlertmanagerSpec.configSecret; default Secret `alertmanager-<name>`)."""


def _severities(route: dict[str, Any]) -> str:
    return " ".join(m for m in route.get("matchers") or [] if m.replace(" ", "").startswith("severity"))


def alerts_reach_a_human(deployed: Deployed) -> list[str]:
    """Every Alertmanager's rendered config delivers each receiver's notifications to a Service the stack deploys or
    to a host that is no placeholder, and sends critical alerts (and whatever no route takes) to receivers that
    deliver somewhere."""
    problems = []
    alertmanagers = deployed.of_kind("Alertmanager")
    if not alertmanagers:
        problems.append("no Alertmanager: no alert reaches anyone")
    for alertmanager in alertmanagers:
        metadata = alertmanager.get("metadata") or {}
        name = (alertmanager.get("spec") or {}).get("configSecret") or f"alertmanager-{metadata.get('name')}"
        secrets = [s for s in deployed.of_kind("Secret") if (s.get("metadata") or {}).get("name") == name
                   and (s.get("metadata") or {}).get("namespace") == metadata.get("namespace")]
        texts = [base64.b64decode(s["data"][CONFIG_KEY]).decode() if CONFIG_KEY in (s.get("data") or {}) else
                 (s.get("stringData") or {}).get(CONFIG_KEY) for s in secrets]
        if not texts or not texts[0]:
            problems.append(f"{_named(alertmanager)}: its config, key {CONFIG_KEY} of Secret {name}, is not rendered")
            continue
        config = yaml.safe_load(texts[0]) or {}
        delivers: dict[str, bool] = {}
        for receiver in config.get("receivers") or []:
            where = f"{_named(alertmanager)} receiver {receiver.get('name')}"
            targets = [(f"{kind} {key}", entry[key]) for kind, entries in receiver.items() if kind.endswith("_configs")
                       for entry in entries or [] for key in ("url", "api_url") if entry.get(key)]
            delivers[receiver.get("name", "")] = any(k.endswith("_configs") and v for k, v in receiver.items())
            for how, url in targets:
                host = urlsplit(url).hostname or ""
                reason = placeholder(url)
                if reason:
                    problems.append(f"{where}: {how} {url} is a placeholder: {reason}")
                elif (host.endswith(IN_CLUSTER_SUFFIXES) or "." not in host) and not _service_at(deployed, url):
                    problems.append(f"{where}: {how} {url} names no Service the stack deploys")
        root = config.get("route") or {}
        todo = [(root, "the default route")]
        while todo:
            route, which = todo.pop()
            severities = _severities(route)
            if (route is root or "critical" in severities) and not delivers.get(route.get("receiver", ""), False):
                problems.append(f"{_named(alertmanager)}: {which} ({severities or 'every alert no route takes'}) "
                                f"goes to receiver {route.get('receiver')}, which delivers to no one")
            todo += [(child, f"route to {child.get('receiver')}") for child in route.get("routes") or []]
    return problems


Judge = Callable[[Deployed], list[str]]


def _objects_only(judge: Callable[[list[dict[str, Any]]], list[str]]) -> Judge:
    return lambda deployed: judge(deployed.objects)


CHECKS: tuple[tuple[str, str, Judge], ...] = (
    ("gpu-daemonsets-tolerate-taints", "Every DaemonSet tolerates the taints on GPU nodes.",
     _objects_only(daemonsets_reach_gpu_nodes)),
    ("gpu-operands-tolerate-taints", "The GPU Operator's ClusterPolicy gives its operands the GPU nodes' tolerations.",
     _objects_only(operands_reach_gpu_nodes)),
    ("pools-exclusive", "The admission policies refuse a team's GPU pod that could reach Slurm's or unlent flex "
     "GPUs, and admit every pod the stack creates.", pools_exclusive),
    ("storage-classes-provisionable", "Every StorageClass carries what its provisioner needs.",
     _objects_only(storage_classes_provision)),
    ("metrics-tiers-persist", "The hot and cold metrics tiers keep their data on volumes.",
     _objects_only(metrics_tiers_persist)),
    ("metrics-have-producers", "Every series a rule, dashboard or rollout gate reads is produced and scraped.",
     metrics_have_producers),
    ("dashboards-have-datasources", "Every dashboard's data source exists and reaches a Service, the cold tier's too.",
     dashboards_have_datasources),
    ("references-resolve", "Every in-cluster address in any object names a Service of that namespace with that port.",
     references_resolve),
    ("alerts-reach-a-human", "Every Alertmanager receiver is a Service the stack deploys or a host that is no "
     "placeholder, and critical alerts go to receivers that deliver.", alerts_reach_a_human),
    ("first-install-converges", "On an empty cluster every release becomes ready in one `pulumi up`: each object's "
     "namespace, claim's StorageClass, custom resource's CRD and mounted Secret comes from what it waits for, and "
     "each release waits as long as its workloads' probes allow them to start and for the node admission they "
     "need.", first_install_converges),
    ("engines-admit-only-the-gateway", "Every model server admits the gateway's pods and its scraping Prometheus's, "
     "and no other pod the stack deploys or a team could create.", engines_admit_only_the_gateway),
    ("images-from-mirror", "Every image the stack pulls is pinned by a tag or digest and, with mirror.images set, "
     "comes from that registry.", images_from_mirror),
)


def check_invariants(deployed: Deployed) -> list[Invariant]:
    """Every invariant, judged on everything the stack would create: rendered by Helm and registered directly."""
    return [Invariant(name, description, judge(deployed)) for name, description, judge in CHECKS]
