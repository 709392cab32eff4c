"""Which metrics the stack really produces and scrapes, read from what it deploys: the objects Helm renders and the
program registers, and the files its remote commands install on hosts. Never from what a component declares.

A producer's metrics count only when it is deployed and some Prometheus the stack runs scrapes it; otherwise the
producer stays in the list with the reason, so a reader of a missing metric learns why it is missing.
"""

import base64
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from components.monitoring import health_metrics, lending_metrics
from components.slurm.health_unit import HEALTH_UNIT
from components.slurm.scripts import EXPORTER_UNIT, LENDING_UNIT
from components.supplied import Supplied
from hosts import checkpoint_mover, slurm_exporter

PROMETHEUS_OWN = frozenset({
    # Prometheus docs: "Inspecting alerts during runtime" and "Jobs and instances, automatically generated labels
    # and time series".
    "ALERTS", "ALERTS_FOR_STATE", "up", "scrape_duration_seconds", "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling", "scrape_series_added",
})
KUBE_STATE_METRICS = frozenset({
    # kube-state-metrics v2 docs/metrics/cluster/node-metrics.md and workload/pod-metrics.md (stable families).
    "kube_node_info", "kube_node_labels", "kube_node_annotations", "kube_node_role", "kube_node_spec_taint",
    "kube_node_spec_unschedulable", "kube_node_status_allocatable", "kube_node_status_capacity",
    "kube_node_status_condition", "kube_node_created", "kube_node_status_addresses",
    "kube_pod_info", "kube_pod_labels", "kube_pod_owner", "kube_pod_status_phase", "kube_pod_status_ready",
    "kube_pod_status_scheduled", "kube_pod_container_resource_requests", "kube_pod_container_resource_limits",
    "kube_pod_container_status_restarts_total", "kube_pod_container_status_waiting_reason",
})
LITELLM_METRICS = frozenset({
    # LiteLLM 1.80.5's prometheus callback (litellm/integrations/prometheus.py), as the running proxy serves them
    # (../shared/notes/litellm-offline.md; tests/integration/test_gateway_live.py reads them from the real proxy).
    "litellm_input_tokens_metric_total", "litellm_output_tokens_metric_total", "litellm_total_tokens_metric_total",
    "litellm_spend_metric_total", "litellm_proxy_total_requests_metric_total",
    "litellm_proxy_failed_requests_metric_total", "litellm_llm_api_failed_requests_metric_total",
    "litellm_deployment_success_responses_total", "litellm_deployment_failure_responses_total",
    "litellm_deployment_total_requests_total",
    *(f"litellm_request_total_latency_metric{suffix}" for suffix in ("_bucket", "_sum", "_count")),
})
LITELLM_CALLBACK = "prometheus"
LITELLM_CONFIG_KEY = "config.yaml"
"""The key of the proxy's config in the ConfigMap litellm-helm renders (templates/configmap-litellm.yaml)."""
VLLM_METRICS = frozenset({
    # vLLM's v1 engine metrics (docs/design/metrics.md), label model_name.
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total", "vllm:request_success_total",
    *(f"vllm:{h}{suffix}" for h in ("e2e_request_latency_seconds", "time_to_first_token_seconds",
                                     "time_per_output_token_seconds", "request_queue_time_seconds")
      for suffix in ("_bucket", "_sum", "_count")),
})
NODE_EXPORTER_MOUNTSTATS = frozenset({
    # node_exporter collector/mountstats_linux.go (per NFS mount and operation), served with --collector.mountstats.
    *(f"node_mountstats_nfs_operations_{name}_total" for name in (
        "requests", "request_time_seconds", "response_time_seconds", "queue_time_seconds", "transmissions",
        "major_timeouts")),
})
DCGM_SERVICE_LABELS = {"app": "nvidia-dcgm-exporter"}
DCGM_PORT = "gpu-metrics"
"""The Service the GPU Operator creates for its DCGM exporter at run time (gpu-operator
assets/state-dcgm-exporter/0700_service.yaml): Helm renders no such object, so it is taken from there."""
DCGM_CONFIG_KEY = "dcgm-metrics.csv"
"""The key the operator mounts from dcgmExporter.config.name (gpu-operator's dcgm-exporter transform)."""


@dataclass(frozen=True)
class Install:
    """A resource of the program that creates or changes Kubernetes objects: a Helm release, a registered object or
    a node patch."""

    urn: str
    objects: list[dict[str, Any]]
    """What it creates (the same dicts as in Deployed.objects), or the labels and taints a node patch sets on a node
    that exists (only here)."""
    wait_s: int | None
    """s a release waits for its workloads to be ready; None when it does not wait."""
    waits_for: frozenset[str]
    """Every resource the engine creates before it (its dependencies, transitively)."""


@dataclass(frozen=True)
class Deployed:
    """What the stack would create: every Kubernetes object (rendered and registered), the ones the program
    registers itself, and per remote command the files it installs and what it runs then."""

    objects: list[dict[str, Any]]
    registered: list[dict[str, Any]]
    hosts: dict[str, tuple[dict[str, str], str]]
    installs: tuple[Install, ...] = ()
    """Which resource creates which objects, in the program's dependency graph (runbooks/plan/converge.py)."""
    supplied: tuple[Supplied, ...] = ()
    """What the site's operators create before `pulumi up` (components/supplied.py)."""
    image_mirror: str | None = None
    """The registry every image must come from (site.mirror.images), if the site has one."""

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]


@dataclass(frozen=True)
class Producer:
    name: str
    metrics: frozenset[str]
    absent: str = ""
    """Why its series never reach Prometheus; empty when it is deployed and scraped."""
    conditional: tuple[str, ...] = ()
    """Label name prefixes that exist only when configured so."""
    labels: frozenset[str] = frozenset()
    """Of those, the labels configured on."""
    labels_of: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Of those, the labels configured on one metric only (kube-state-metrics allowlists node and pod labels apart):
    metric -> labels; a metric named here has these instead of `labels`."""

    def has_label(self, label: str, metric: str) -> bool:
        conditional = bool(self.conditional) and label.startswith(self.conditional)
        return label in self.labels_of.get(metric, self.labels) or not conditional


def producers(deployed: Deployed) -> list[Producer]:
    return [maker(deployed) for maker in (_prometheus, _recording_rules, _dcgm_exporter, _kube_state_metrics,
                                          _textfile, _mountstats, _slurm_exporter, _lending_controller,
                                          _health_controller, _gateway, _model_servers)]


def _meta(obj: dict[str, Any], key: str) -> Any:
    return (obj.get("metadata") or {}).get(key)


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates (metadata and spec) a workload object stamps its pods from."""
    spec = obj.get("spec") or {}
    if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
        return [spec.get("template") or {}]
    if obj.get("kind") == "CronJob":
        return [((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}]
    return []


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Kubernetes label selection; a missing selector selects nothing (as the Prometheus Operator reads it)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    tests: dict[str, Callable[[dict[str, Any]], bool]] = {
        "In": lambda e: labels.get(e["key"]) in e.get("values", []),
        "NotIn": lambda e: labels.get(e["key"]) not in e.get("values", []),
        "Exists": lambda e: e["key"] in labels,
        "DoesNotExist": lambda e: e["key"] not in labels,
    }
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions") or [])


def _prometheus(deployed: Deployed) -> Producer:
    return Producer("Prometheus", PROMETHEUS_OWN, "" if deployed.of_kind("Prometheus") else "no Prometheus deployed")


def _recording_rules(deployed: Deployed) -> Producer:
    evaluated = [r for r in deployed.of_kind("PrometheusRule") if any(
        selects(p["spec"].get("ruleSelector"), _meta(r, "labels") or {}) for p in deployed.of_kind("Prometheus"))]
    records = {rule["record"] for r in evaluated for g in r["spec"].get("groups", []) for rule in g.get("rules", [])
               if "record" in rule}
    return Producer("recording rules", frozenset(records))


def scraped(deployed: Deployed, namespace: str, services: Iterable[dict[str, Any]]) -> str:
    """'' when a ServiceMonitor some Prometheus selects scrapes one of these Services on a port it names."""
    prometheuses = deployed.of_kind("Prometheus")
    for monitor in deployed.of_kind("ServiceMonitor"):
        spec = monitor["spec"]
        if not any(selects(p["spec"].get("serviceMonitorSelector"), _meta(monitor, "labels") or {})
                   for p in prometheuses):
            continue
        where = spec.get("namespaceSelector") or {}
        if not (where.get("any") or namespace in where.get("matchNames", [_meta(monitor, "namespace")])):
            continue
        ports = {e.get("port") for e in spec.get("endpoints", [])}
        for service in services:
            if selects(spec.get("selector"), _meta(service, "labels") or {}) and \
                    ports & {p.get("name") for p in service["spec"].get("ports", [])}:
                return ""
    return "no ServiceMonitor that a Prometheus selects scrapes it"


def _services_for(deployed: Deployed, workload: dict[str, Any]) -> list[dict[str, Any]]:
    pod_labels = workload["spec"]["template"]["metadata"].get("labels") or {}
    return [s for s in deployed.of_kind("Service") if _meta(s, "namespace") == _meta(workload, "namespace")
            and s["spec"].get("selector") and selects({"matchLabels": s["spec"]["selector"]}, pod_labels)]


def _dcgm_exporter(deployed: Deployed) -> Producer:
    name = "dcgm-exporter (GPU Operator)"
    policies = deployed.of_kind("ClusterPolicy")
    if not policies:
        return Producer(name, frozenset(), "no ClusterPolicy: the GPU Operator is not deployed")
    exporter = policies[0]["spec"].get("dcgmExporter") or {}
    namespace = next((_meta(o, "namespace") for o in deployed.objects
                      if o.get("kind") == "Deployment" and "gpu-operator" in (_meta(o, "name") or "")), "")
    config = (exporter.get("config") or {}).get("name")
    counters = next((o for o in deployed.of_kind("ConfigMap")
                     if _meta(o, "name") == config and _meta(o, "namespace") == namespace), None)
    csv = ((counters or {}).get("data") or {}).get(DCGM_CONFIG_KEY)
    if csv is None:
        return Producer(name, frozenset(), f"its counters ConfigMap {config!r} is not deployed with {DCGM_CONFIG_KEY}")
    fields = frozenset(line.split(",")[0].strip() for line in csv.splitlines()
                       if line.strip() and not line.lstrip().startswith("#"))
    mapping = frozenset({"hpc_job"} if (exporter.get("hpcJobMapping") or {}).get("enabled") is True else ())
    if exporter.get("enabled") is False:
        return Producer(name, fields, "the ClusterPolicy disables dcgmExporter")
    service = {"metadata": {"labels": DCGM_SERVICE_LABELS}, "spec": {"ports": [{"name": DCGM_PORT}]}}
    return Producer(name, fields, scraped(deployed, namespace, [service]), ("hpc_job",), mapping)


def _container_args(workload: dict[str, Any]) -> list[str]:
    containers = workload["spec"]["template"]["spec"].get("containers", [])
    return [a for c in containers for a in [*c.get("command", []), *c.get("args", [])]]


def _flag(args: list[str], flag: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return values[-1] if values else None


def _kube_state_metrics(deployed: Deployed) -> Producer:
    name = "kube-state-metrics"
    ksm = [d for d in deployed.of_kind("Deployment") if "kube-state-metrics" in (_meta(d, "name") or "")]
    if not ksm:
        return Producer(name, frozenset(), "no kube-state-metrics Deployment")
    allowlist = _flag(_container_args(ksm[0]), "--metric-labels-allowlist") or ""

    def allowed(resource: str) -> frozenset[str]:
        # nodes=[a,b],pods=[c]: a node's labels become label_<name> on kube_node_labels, a pod's on kube_pod_labels,
        # sanitized to [a-zA-Z0-9_].
        listed = re.search(rf"(?:^|,){resource}=\[([^\]]*)\]", allowlist)
        return frozenset("label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label.strip())
                         for label in (listed.group(1).split(",") if listed else []) if label.strip())

    return Producer(name, KUBE_STATE_METRICS, scraped(deployed, _meta(ksm[0], "namespace"),
                                                      _services_for(deployed, ksm[0])), ("label_",),
                    labels_of={"kube_node_labels": allowed("nodes"), "kube_pod_labels": allowed("pods")})


def _host_path(workload: dict[str, Any], path: str) -> str | None:
    """The host directory a container path lies in, through the pod's hostPath volumes."""
    pod = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes", []) if "hostPath" in v}
    for container in pod.get("containers", []):
        for mount in container.get("volumeMounts", []):
            inside = mount["mountPath"].rstrip("/")
            if mount["name"] in volumes and (path == inside or path.startswith(inside + "/")):
                return (volumes[mount["name"]].rstrip("/") + path[len(inside):]) or "/"
    return None


def _mountstats(deployed: Deployed) -> Producer:
    """node-exporter's NFS client times per mount, when its mountstats collector is on and the exporter is scraped."""
    name = "node-exporter mountstats collector"
    exporters = [d for d in deployed.of_kind("DaemonSet") if "node-exporter" in (_meta(d, "name") or "")]
    if not exporters:
        return Producer(name, NODE_EXPORTER_MOUNTSTATS, "no node-exporter DaemonSet")
    if "--collector.mountstats" not in _container_args(exporters[0]):
        return Producer(name, NODE_EXPORTER_MOUNTSTATS, "node-exporter runs without --collector.mountstats (off by "
                                                        "default)")
    return Producer(name, NODE_EXPORTER_MOUNTSTATS, scraped(deployed, _meta(exporters[0], "namespace"),
                                                            _services_for(deployed, exporters[0])))


def _textfile(deployed: Deployed) -> Producer:
    """The checkpoint mover's metrics, through node-exporter's textfile collector."""
    name = "checkpoint mover via node-exporter's textfile collector"
    metrics = frozenset(checkpoint_mover.METRICS)
    exporters = [d for d in deployed.of_kind("DaemonSet") if "node-exporter" in (_meta(d, "name") or "")]
    if not exporters:
        return Producer(name, metrics, "no node-exporter DaemonSet")
    directory = _flag(_container_args(exporters[0]), "--collector.textfile.directory")
    read = _host_path(exporters[0], directory) if directory else None
    if read is None:
        return Producer(name, metrics, "node-exporter reads no textfile directory on the host")
    movers = [job for job in deployed.of_kind("CronJob") for args in [_container_args(job["spec"]["jobTemplate"])]
              if "--metrics-file" in args]
    written = {_host_path(job["spec"]["jobTemplate"], args[args.index("--metrics-file") + 1].rsplit("/", 1)[0])
               for job in movers for args in [_container_args(job["spec"]["jobTemplate"])]}
    if read not in written:
        return Producer(name, metrics, f"node-exporter reads {read}; the mover CronJobs write to "
                                       f"{', '.join(sorted(map(str, written))) or 'no metrics file'}")
    return Producer(name, metrics, scraped(deployed, _meta(exporters[0], "namespace"),
                                           _services_for(deployed, exporters[0])))


def _slurm_exporter(deployed: Deployed) -> Producer:
    return _controller_service(deployed, "Slurm exporter (hosts/slurm_exporter.py)",
                               frozenset(slurm_exporter.METRICS), EXPORTER_UNIT)


def _lending_controller(deployed: Deployed) -> Producer:
    return _controller_service(deployed, "lending controller (gpuctl flex control)", frozenset(lending_metrics.METRICS),
                               LENDING_UNIT)


def _health_controller(deployed: Deployed) -> Producer:
    return _controller_service(deployed, "node health controller (gpuctl health control)",
                               frozenset(health_metrics.METRICS), HEALTH_UNIT)


def _controller_service(deployed: Deployed, name: str, metrics: frozenset[str], unit_name: str) -> Producer:
    """A systemd service a remote command installs, enables and starts, serving /metrics on its --port, which a
    static scrape target of the stack's Prometheus names."""
    units = [(files[path], then) for files, then in deployed.hosts.values() for path in files
             if path.endswith(f"/{unit_name}")]
    starts = re.compile(rf"systemctl (?:re)?start [^&]*\b{re.escape(unit_name)}\b")
    enables = re.compile(rf"systemctl enable [^&]*\b{re.escape(unit_name)}\b")
    started = [unit for unit, then in units if enables.search(then) and starts.search(then)]
    if not started:
        return Producer(name, metrics, f"no remote command installs, enables and starts {unit_name}")
    exec_start = next(line for line in started[0].splitlines() if line.startswith("ExecStart="))
    args = shlex.split(exec_start.removeprefix("ExecStart="))
    port = args[args.index("--port") + 1] if "--port" in args else None
    targets = [t for s in _scrape_configs(deployed) for c in s.get("static_configs", []) for t in c.get("targets", [])]
    if not any(t.rsplit(":", 1)[-1] == port for t in targets):
        return Producer(name, metrics, f"it listens on port {port}; Prometheus scrapes no static target on that port "
                                       f"({', '.join(targets) or 'none'})")
    return Producer(name, metrics)


def _scrape_configs(deployed: Deployed) -> list[dict[str, Any]]:
    """Each Prometheus' additionalScrapeConfigs, read from the Secret it names."""
    found: list[dict[str, Any]] = []
    for prometheus in deployed.of_kind("Prometheus"):
        ref = prometheus["spec"].get("additionalScrapeConfigs")
        if not ref:
            continue
        for secret in deployed.of_kind("Secret"):
            if _meta(secret, "name") == ref["name"] and _meta(secret, "namespace") == _meta(prometheus, "namespace"):
                encoded = (secret.get("data") or {}).get(ref["key"])
                text = base64.b64decode(encoded).decode() if encoded else (secret.get("stringData") or {}).get(
                    ref["key"], "")
                found += yaml.safe_load(text) or []
    return found


def _images(workload: dict[str, Any]) -> list[str]:
    return [c.get("image", "") for c in workload["spec"]["template"]["spec"].get("containers", [])]


def _gateway(deployed: Deployed) -> Producer:
    """The LiteLLM proxy: its metrics exist only with the prometheus callback in the config it mounts."""
    name = "LLM gateway (LiteLLM proxy)"
    proxies = [d for d in deployed.of_kind("Deployment") if any("litellm" in i for i in _images(d))]
    if not proxies:
        return Producer(name, LITELLM_METRICS, "no LiteLLM proxy Deployment")
    pod = proxies[0]["spec"]["template"]["spec"]
    mounted = {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
    configs = [yaml.safe_load(((c.get("data") or {}).get(LITELLM_CONFIG_KEY)) or "") or {}
               for c in deployed.of_kind("ConfigMap")
               if _meta(c, "name") in mounted and _meta(c, "namespace") == _meta(proxies[0], "namespace")]
    callbacks = {cb for config in configs for cb in (config.get("litellm_settings") or {}).get("callbacks") or []}
    if LITELLM_CALLBACK not in callbacks:
        return Producer(name, LITELLM_METRICS, f"the proxy's mounted config enables no {LITELLM_CALLBACK!r} callback")
    return Producer(name, LITELLM_METRICS, scraped(deployed, _meta(proxies[0], "namespace"),
                                                   _services_for(deployed, proxies[0])))


def _model_servers(deployed: Deployed) -> Producer:
    """vLLM engines (`vllm serve`), every one of them scraped."""
    name = "model servers (vLLM)"
    engines = [d for d in deployed.of_kind("Deployment") if _container_args(d)[:2] == ["vllm", "serve"]]
    if not engines:
        return Producer(name, VLLM_METRICS, "no vLLM engine Deployment")
    unscraped = [f"{_meta(e, 'name')}: {why}" for e in engines
                 for why in [scraped(deployed, _meta(e, "namespace"), _services_for(deployed, e))] if why]
    return Producer(name, VLLM_METRICS, "; ".join(unscraped))
