"""The NVIDIA GPU Operator: the one driver layer for Kubernetes and Slurm alike.

It installs the driver, container toolkit, device plugin, GPU feature discovery and the DCGM
exporter on every GPU node; no node gets a second CUDA or driver install, and Slurm jobs run on
the same driver. Value names follow the chart's values.yaml (NVIDIA/gpu-operator,
deployments/gpu-operator/values.yaml) and the GPU Operator docs ("GPU telemetry").
"""

from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import GPU_OPERATOR
from components.gpu_operator.dcgm_counters import render_counters_csv
from components.k8s import release
from components.spec.site import Site
from components.spec.wellknown import GPU_OPERATOR_TYPE, HPC_JOB_MAPPING_DIR, POOL_TAINT, UNVALIDATED_TAINT

COUNTERS_CONFIGMAP = "dcgm-exporter-counters"
COUNTERS_PATH = "/etc/dcgm-exporter/dcgm-metrics.csv"


def operator_values(site: Site) -> dict[str, Any]:
    """The chart values, from the spec. Pure, so the plan can show and test them."""
    # Operands run on every GPU node, validated or not: the node check needs the driver, and the
    # unvalidated taint already keeps workload pods away. Slurm and flex nodes need them too.
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": UNVALIDATED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]
    return {
        "driver": {"enabled": True, "version": site.gpu_operator.driver_version},
        "toolkit": {"enabled": True},
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": True},
        "migManager": {"enabled": False},  # MIG off: whole GPUs for training and for inference
        "daemonsets": {"tolerations": tolerations},
        "dcgmExporter": {
            "enabled": True,
            # Scraped by the monitoring stack's own ServiceMonitor, which exists before any GPU serves.
            "serviceMonitor": {"enabled": False},
            "config": {"name": COUNTERS_CONFIGMAP},
            "env": [
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": COUNTERS_PATH},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                {"name": "DCGM_HPC_JOB_MAPPING_DIR", "value": HPC_JOB_MAPPING_DIR},
            ],
        },
    }


class GpuOperator(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        facts = {"chart": GPU_OPERATOR.name, "version": GPU_OPERATOR.version,
                 "driver_version": site.gpu_operator.driver_version}
        super().__init__(GPU_OPERATOR_TYPE, name, facts, opts)
        namespace = site.gpu_operator.namespace
        ns = kubernetes.core.v1.Namespace(
            f"{name}-namespace",
            # The driver and toolkit containers are privileged (GPU Operator docs, "Pod Security").
            metadata={"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        counters = kubernetes.core.v1.ConfigMap(
            f"{name}-dcgm-counters",
            metadata={"name": COUNTERS_CONFIGMAP, "namespace": namespace},
            data={"dcgm-metrics.csv": render_counters_csv()},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
        )
        release(f"{name}-release", GPU_OPERATOR, namespace, operator_values(site), self, [ns, counters])
        self.register_outputs(facts)
