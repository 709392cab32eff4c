"""The monitoring stack, wired before any GPU serves: Prometheus (hot), VictoriaMetrics (cold),
Alertmanager, Grafana, the DCGM scrape, the alert and cost rules, and the dashboards. The values are rendered
in components/monitoring/prometheus.py; why VictoriaMetrics for the cold tier: docs/monitoring.md.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import KUBE_PROMETHEUS_STACK, VICTORIA_METRICS_SINGLE
from components.k8s import custom, fields, release
from components.monitoring.alerts import prometheus_rule_manifest
from components.monitoring.dashboards import dashboard_configmaps
from components.monitoring.prometheus import (
    COLD_RELEASE,
    NAMESPACE,
    PROMETHEUS_RELEASE,
    cold_tier_values,
    dcgm_service_monitor,
    prometheus_values,
)
from components.site.site import Site
from components.site.wellknown import MONITORING_TYPE


class MonitoringStack(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        super().__init__(MONITORING_TYPE, name, None, opts)
        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", metadata={"name": NAMESPACE},
                                          opts=pulumi.ResourceOptions(parent=self))
        cold = release(f"{name}-cold-tier", VICTORIA_METRICS_SINGLE, NAMESPACE, cold_tier_values(site), self, [ns],
                       mirror=site.mirror, release_name=COLD_RELEASE)
        stack = release(f"{name}-prometheus", KUBE_PROMETHEUS_STACK, NAMESPACE, prometheus_values(site), self,
                        [ns, cold], mirror=site.mirror, release_name=PROMETHEUS_RELEASE)
        # The CRDs come with the chart: custom resources wait for it.
        after_stack = pulumi.ResourceOptions(parent=self, depends_on=[stack])
        kubernetes.apiextensions.CustomResource(f"{name}-gpu-rules", **custom(prometheus_rule_manifest(site)),
                                                opts=after_stack)
        kubernetes.apiextensions.CustomResource(f"{name}-dcgm-scrape", **custom(dcgm_service_monitor(site)),
                                                opts=after_stack)
        for manifest in dashboard_configmaps(site):
            kubernetes.core.v1.ConfigMap(f"{name}-{manifest['metadata']['name']}", **fields(manifest), opts=after_stack)
        # The pack judges what this deploys (the rules, the dashboards, the releases' values), not outputs here.
        self.register_outputs({})
