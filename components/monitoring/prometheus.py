"""Prometheus (hot, kube-prometheus-stack) and VictoriaMetrics (cold) as the monitoring stack deploys them,
rendered from the site spec. Pure: no pulumi.

Value names follow the charts' values.yaml: kube-prometheus-stack (prometheus.prometheusSpec.*,
alertmanager.config / alertmanagerSpec.*, grafana.sidecar.dashboards.*, grafana.additionalDataSources,
prometheus-node-exporter.extraArgs) and victoria-metrics-single (server.retentionPeriod, passed to
-retentionPeriod; server.persistentVolume.*).
"""

import math
from dataclasses import dataclass
from typing import Any

from components.monitoring.alertmanager import render_alertmanager_config
from components.monitoring.dashboards import FOLDER_ANNOTATION, SIDECAR_LABEL
from components.site import defaults
from components.site.site import Site
from components.site.wellknown import ENGINE_COMPONENT_LABEL, FLEX_LENT_LABEL, MONITORING_NAMESPACE, TEXTFILE_DIR

NAMESPACE = MONITORING_NAMESPACE


PROMETHEUS_RELEASE = "kube-prometheus-stack"


COLD_RELEASE = "metrics-cold"


# victoria-metrics-single names its service <release>-victoria-metrics-single-server, port 8428.
COLD_QUERY_URL = f"http://{COLD_RELEASE}-victoria-metrics-single-server.{NAMESPACE}.svc:8428"
"""VictoriaMetrics answers the Prometheus query API at its root (victoria-metrics-single's server Service)."""
COLD_WRITE_URL = f"{COLD_QUERY_URL}/api/v1/write"
COLD_DATASOURCE = "VictoriaMetrics (1 year)"
NODE_EXPORTER_HOST_ROOT = "/host/root"
NODE_EXPORTER_CHART_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|var/lib/docker/.+|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|"
    "fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|"
    "tracefs|erofs)$",
)
"""kube-prometheus-stack 77.5.0's prometheus-node-exporter.extraArgs, as its values.yaml sets them."""


NODE_EXPORTER_MOUNTSTATS = "--collector.mountstats"
"""node_exporter's flag that turns on its mountstats collector (collector/mountstats_linux.go; off by default)."""

NOTIFY_SECRET = "alertmanager-notify"
"""Created by the platform team (docs/monitoring.md), never by Pulumi: holds slack-api-url and oncall-token."""


DCGM_SCRAPE_INTERVAL = f"{defaults.DCGM_SCRAPE_INTERVAL_S}s"


SLURM_SCRAPE_JOB = "slurm"
LENDING_SCRAPE_JOB = "flex-controller"
HEALTH_SCRAPE_JOB = "health-controller"


@dataclass(frozen=True)
class MetricsVolumes:
    samples_per_s: float
    """Estimated ingest: series per GPU, per node and for the cluster, each over its scrape interval."""
    hot_gib: int
    cold_gib: int


def metrics_volumes(site: Site) -> MetricsVolumes:
    """Volumes sized as Prometheus' docs size them: retention x ingest x bytes per sample, with headroom."""
    gpus = sum(g.gpus_per_node * len(g.nodes) for g in site.node_groups)
    nodes = sum(len(g.nodes) for g in site.node_groups)
    samples_per_s = (gpus * defaults.METRIC_SERIES_PER_GPU / defaults.DCGM_SCRAPE_INTERVAL_S
                     + (nodes * defaults.METRIC_SERIES_PER_NODE + defaults.METRIC_SERIES_CLUSTER)
                     / defaults.SCRAPE_INTERVAL_S)

    def gib(days: int, bytes_per_sample: float) -> int:
        return math.ceil(samples_per_s * days * 86_400 * bytes_per_sample * defaults.METRICS_VOLUME_HEADROOM / 2**30)

    monitoring = site.monitoring
    return MetricsVolumes(samples_per_s, gib(monitoring.hot_retention_days, defaults.PROMETHEUS_BYTES_PER_SAMPLE),
                          gib(monitoring.cold_retention_days, defaults.VICTORIAMETRICS_BYTES_PER_SAMPLE))


def prometheus_values(site: Site) -> dict[str, Any]:
    monitoring, secrets_dir, volumes = site.monitoring, site.alerting.secrets_dir, metrics_volumes(site)
    return {
        "prometheus": {"prometheusSpec": {
            "retention": f"{monitoring.hot_retention_days}d",
            # Without a volume the hot tier lives in an emptyDir and dies with the pod. Prometheus also stops at
            # 90 % of the volume, whatever the days, rather than fill it.
            "storageSpec": {"volumeClaimTemplate": {"spec": {
                "storageClassName": monitoring.storage_class, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": f"{volumes.hot_gib}Gi"}},
            }}},
            "retentionSize": f"{math.floor(volumes.hot_gib * 0.9)}GB",
            "remoteWrite": [{"url": COLD_WRITE_URL}],
            # Pick up every PrometheusRule and ServiceMonitor, not only the chart's own.
            "ruleSelectorNilUsesHelmValues": False,
            "serviceMonitorSelectorNilUsesHelmValues": False,
            # The Slurm controller is no Kubernetes node: its exporter is a static target.
            "additionalScrapeConfigs": [slurm_scrape_config(site), lending_scrape_config(site),
                                        health_scrape_config(site)],
        }},
        "alertmanager": {
            "config": render_alertmanager_config(site),
            "alertmanagerSpec": {
                "volumes": [{"name": "notify", "secret": {"secretName": NOTIFY_SECRET}}],
                "volumeMounts": [{"name": "notify", "mountPath": secrets_dir, "readOnly": True}],
            },
        },
        # kube_node_labels and kube_pod_labels carry only allowlisted labels (kube-state-metrics chart,
        # metricLabelsAllowlist): SlurmNodesUnavailable reads the flex-lent one to leave lent nodes out, the lending
        # controller the model servers' component to count only their pending pods (components/inference/demand.py).
        "kube-state-metrics": {"metricLabelsAllowlist": [f"nodes=[{FLEX_LENT_LABEL}]",
                                                         f"pods=[{ENGINE_COMPONENT_LABEL}]"]},
        # The checkpoint mover's gpucluster_checkpoint_* files reach Prometheus only through the textfile
        # collector. The host's root is mounted at /host/root (prometheus-node-exporter hostRootFsMount); extraArgs
        # replaces the list, so kube-prometheus-stack 77.5.0's two filesystem excludes are repeated. The mountstats
        # collector (off by default) gives each node's NFS client times, which StorageJitter reads: it reads the
        # exporter's own /proc/self/mountstats, where the host's NFS mounts appear under /host/root (the chart's
        # prometheus-node-exporter values.yaml: hostRootFsMount enabled, mountPropagation HostToContainer).
        # Its series carry the node's name as `Hostname`, as dcgm-exporter's do (instance is only the node's IP on
        # the host network): StorageJitter names the node, and the storage-jitter drill finds its alert by it.
        "prometheus-node-exporter": {"extraArgs": [
            *NODE_EXPORTER_CHART_ARGS, f"--collector.textfile.directory={NODE_EXPORTER_HOST_ROOT}{TEXTFILE_DIR}",
            NODE_EXPORTER_MOUNTSTATS,
        ], "prometheus": {"monitor": {"relabelings": [
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "Hostname", "action": "replace"}]}}},
        # The folder annotation is honoured only with foldersFromFilesStructure (grafana chart values).
        "grafana": {
            "sidecar": {"dashboards": {
                "enabled": True, "label": SIDECAR_LABEL, "folderAnnotation": FOLDER_ANNOTATION,
                "provider": {"foldersFromFilesStructure": True},
            }},
            # The year of history lives in the cold tier; Prometheus (the default datasource) holds the hot days.
            "additionalDataSources": [{"name": COLD_DATASOURCE, "type": "prometheus", "access": "proxy",
                                       "url": COLD_QUERY_URL, "isDefault": False}],
        },
    }


def slurm_scrape_config(site: Site) -> dict[str, Any]:
    """Prometheus scrape_config for the Slurm exporter on the controller (hosts/slurm_exporter.py)."""
    return {"job_name": SLURM_SCRAPE_JOB, "scrape_interval": f"{site.slurm.exporter_interval_s}s",
            "static_configs": [{"targets": [f"{site.slurm.controller_host}:{site.slurm.exporter_port}"]}]}


def lending_scrape_config(site: Site) -> dict[str, Any]:
    """Prometheus scrape_config for the lending controller on the Slurm controller (runbooks/flex/controller.py)."""
    return {"job_name": LENDING_SCRAPE_JOB, "scrape_interval": f"{site.lending.interval_s}s",
            "static_configs": [{"targets": [f"{site.slurm.controller_host}:{site.lending.metrics_port}"]}]}


def cold_tier_values(site: Site) -> dict[str, Any]:
    monitoring = site.monitoring
    return {"server": {
        "retentionPeriod": f"{monitoring.cold_retention_days}d",
        # The chart's 16Gi would hold about a month of this ingest, not the year.
        "persistentVolume": {"enabled": True, "storageClassName": monitoring.storage_class,
                             "size": f"{metrics_volumes(site).cold_gib}Gi"},
    }}


def dcgm_service_monitor(site: Site) -> dict[str, Any]:
    """Scrapes the exporter the GPU Operator runs (service label app=nvidia-dcgm-exporter, port gpu-metrics)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "dcgm-exporter", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            "namespaceSelector": {"matchNames": [site.gpu_operator.namespace]},
            "endpoints": [{"port": "gpu-metrics", "interval": DCGM_SCRAPE_INTERVAL, "honorLabels": True}],
        },
    }


def health_scrape_config(site: Site) -> dict[str, Any]:
    """Prometheus scrape_config for the node health controller on the Slurm controller (runbooks/health)."""
    return {"job_name": HEALTH_SCRAPE_JOB, "scrape_interval": f"{site.health.interval_s}s",
            "static_configs": [{"targets": [f"{site.slurm.controller_host}:{site.health.metrics_port}"]}]}
