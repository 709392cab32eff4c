"""The monitoring stack, wired before any GPU serves: Prometheus (hot), VictoriaMetrics (cold),
Alertmanager, Grafana, the DCGM scrape, the alert and cost rules, and the dashboards.

Value names follow the charts' values.yaml: kube-prometheus-stack (prometheus.prometheusSpec.*,
alertmanager.config / alertmanagerSpec.*, grafana.sidecar.dashboards.*) and victoria-metrics-single
(server.retentionPeriod, passed to -retentionPeriod). Why VictoriaMetrics for the cold tier:
docs/monitoring.md.
"""

from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import KUBE_PROMETHEUS_STACK, VICTORIA_METRICS_SINGLE
from components.k8s import custom, fields, release
from components.monitoring.alertmanager import ONCALL, render_alertmanager_config
from components.monitoring.alerts import prometheus_rule_manifest, render_rule_groups
from components.monitoring.dashboards import FOLDER_ANNOTATION, SIDECAR_LABEL, dashboard_configmaps, render_dashboards
from components.spec import defaults
from components.spec.site import Site
from components.spec.wellknown import FLEX_LENT_LABEL, MONITORING_TYPE

NAMESPACE = "monitoring"
PROMETHEUS_RELEASE = "kube-prometheus-stack"
COLD_RELEASE = "metrics-cold"
# victoria-metrics-single names its service <release>-victoria-metrics-single-server, port 8428.
COLD_WRITE_URL = f"http://{COLD_RELEASE}-victoria-metrics-single-server.{NAMESPACE}.svc:8428/api/v1/write"
NOTIFY_SECRET = "alertmanager-notify"
"""Created by the platform team (docs/monitoring.md), never by Pulumi: holds slack-api-url and oncall-token."""
DCGM_SCRAPE_INTERVAL = "15s"
SLURM_SCRAPE_JOB = "slurm"


def prometheus_values(site: Site) -> dict[str, Any]:
    monitoring, secrets_dir = site.monitoring, site.alerting.secrets_dir
    return {
        "prometheus": {"prometheusSpec": {
            "retention": f"{monitoring.hot_retention_days}d",
            "remoteWrite": [{"url": COLD_WRITE_URL}],
            # Pick up every PrometheusRule and ServiceMonitor, not only the chart's own.
            "ruleSelectorNilUsesHelmValues": False,
            "serviceMonitorSelectorNilUsesHelmValues": False,
            # The Slurm controller is no Kubernetes node: its exporter is a static target.
            "additionalScrapeConfigs": [slurm_scrape_config(site)],
        }},
        "alertmanager": {
            "config": render_alertmanager_config(site),
            "alertmanagerSpec": {
                "volumes": [{"name": "notify", "secret": {"secretName": NOTIFY_SECRET}}],
                "volumeMounts": [{"name": "notify", "mountPath": secrets_dir, "readOnly": True}],
            },
        },
        # kube_node_labels carries only allowlisted labels (kube-state-metrics chart, metricLabelsAllowlist);
        # SlurmNodesUnavailable reads the flex-lent one to leave lent nodes out.
        "kube-state-metrics": {"metricLabelsAllowlist": [f"nodes=[{FLEX_LENT_LABEL}]"]},
        # The folder annotation is honoured only with foldersFromFilesStructure (grafana chart values).
        "grafana": {"sidecar": {"dashboards": {
            "enabled": True, "label": SIDECAR_LABEL, "folderAnnotation": FOLDER_ANNOTATION,
            "provider": {"foldersFromFilesStructure": True},
        }}},
    }


def slurm_scrape_config(site: Site) -> dict[str, Any]:
    """Prometheus scrape_config for the Slurm exporter on the controller (hosts/slurm_exporter.py)."""
    return {"job_name": SLURM_SCRAPE_JOB, "scrape_interval": f"{defaults.SLURM_EXPORTER_INTERVAL_S}s",
            "static_configs": [{"targets": [f"{site.slurm.controller_host}:{site.slurm.exporter_port}"]}]}


def cold_tier_values(site: Site) -> dict[str, Any]:
    return {"server": {"retentionPeriod": f"{site.monitoring.cold_retention_days}d"}}


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


def stack_facts(site: Site) -> dict[str, Any]:
    """What the policy pack judges (docs/policy.md has the contract)."""
    rules = [r for g in render_rule_groups(site)["groups"] for r in g["rules"] if "alert" in r]
    return {
        "dcgm_exporter": {"enabled": True},
        "prometheus": {"hot_retention_days": site.monitoring.hot_retention_days, "remote_write": True},
        "cold_tier": {"retention_days": site.monitoring.cold_retention_days},
        "alerts": [{"alert": r["alert"], "expr": r["expr"], "for": r.get("for", "0m"),
                    "severity": r["labels"]["severity"]} for r in rules],
        "alertmanager": {"critical_receivers": [ONCALL]},
        "dashboards": list(render_dashboards(site)),
    }


class MonitoringStack(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        facts = stack_facts(site)
        super().__init__(MONITORING_TYPE, name, None, opts)
        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", metadata={"name": NAMESPACE},
                                          opts=pulumi.ResourceOptions(parent=self))
        cold = release(f"{name}-cold-tier", VICTORIA_METRICS_SINGLE, NAMESPACE, cold_tier_values(site), self, [ns],
                       release_name=COLD_RELEASE)
        stack = release(f"{name}-prometheus", KUBE_PROMETHEUS_STACK, NAMESPACE, prometheus_values(site), self,
                        [ns, cold], release_name=PROMETHEUS_RELEASE)
        # The CRDs come with the chart: custom resources wait for it.
        after_stack = pulumi.ResourceOptions(parent=self, depends_on=[stack])
        kubernetes.apiextensions.CustomResource(f"{name}-gpu-rules", **custom(prometheus_rule_manifest(site)),
                                                opts=after_stack)
        kubernetes.apiextensions.CustomResource(f"{name}-dcgm-scrape", **custom(dcgm_service_monitor(site)),
                                                opts=after_stack)
        for manifest in dashboard_configmaps(site):
            kubernetes.core.v1.ConfigMap(f"{name}-{manifest['metadata']['name']}", **fields(manifest), opts=after_stack)
        self.register_outputs(facts)
