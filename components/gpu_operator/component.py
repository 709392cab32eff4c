"""The NVIDIA GPU Operator: the one driver layer for Kubernetes and Slurm alike.

It installs the driver, container toolkit, device plugin, GPU feature discovery and the DCGM
exporter on every GPU node; no node gets a second CUDA or driver install, and Slurm jobs run on
the same driver. Value names follow the chart's values.yaml (NVIDIA/gpu-operator,
deployments/gpu-operator/values.yaml) and the GPU Operator docs ("GPU telemetry").
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import GPU_OPERATOR
from components.gpu_operator.dcgm_counters import render_counters_csv
from components.gpu_operator.values import COUNTERS_CONFIGMAP, operator_values
from components.k8s import release
from components.site.site import Site
from components.site.wellknown import GPU_OPERATOR_TYPE


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
        release(f"{name}-release", GPU_OPERATOR, namespace, operator_values(site), self, [ns, counters],
                mirror=site.mirror)
        self.register_outputs(facts)
