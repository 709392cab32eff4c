"""The GPU Operator's chart values, rendered from the site spec. Pure: no pulumi."""

from typing import Any

from components.site.site import Site
from components.site.wellknown import DRIVER_ROOT, POOL_TAINT, TOOLKIT_DIR, UNVALIDATED_TAINT

COUNTERS_CONFIGMAP = "dcgm-exporter-counters"
COUNTERS_PATH = "/etc/dcgm-exporter/dcgm-metrics.csv"


NFD_WORKER_CHART_TOLERATIONS = (
    {"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
)


def operator_values(site: Site) -> dict[str, Any]:
    """The chart values, from the spec. Pure, so the plan can show and test them."""
    # Operands run on every GPU node, validated or not: the node check needs the driver, and the
    # unvalidated taint already keeps workload pods away. Slurm and flex nodes need them too.
    ours = [
        {"key": UNVALIDATED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, *ours]
    return {
        # Slurm's container hook and the node check reach the driver and toolkit at these host paths: set here, not
        # left to the chart's defaults, so a chart upgrade cannot move them unseen (docs/gpu-driver.md).
        "hostPaths": {"driverInstallDir": DRIVER_ROOT},
        "driver": {"enabled": True, "version": site.gpu_operator.driver_version},
        "toolkit": {"enabled": True, "installDir": TOOLKIT_DIR},
        # A standalone nv-hostengine (DaemonSet nvidia-dcgm) instead of the exporter's embedded one: the node check
        # runs `dcgmi diag` in its container, where DCGM and its diagnostic plugins are; the exporter connects to it.
        "dcgm": {"enabled": True},
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": True},
        "migManager": {"enabled": False},  # MIG off: whole GPUs for training and for inference
        "daemonsets": {"tolerations": tolerations},
        # The operator deploys operands only where node-feature-discovery has labelled a node as holding an
        # NVIDIA PCI device, so its worker must reach our tainted nodes too; the list replaces the chart's
        # (gpu-operator v25.10.1 values.yaml: control-plane and nvidia.com/gpu), which is repeated.
        "node-feature-discovery": {"worker": {"tolerations": [*NFD_WORKER_CHART_TOLERATIONS, *tolerations]}},
        "dcgmExporter": {
            "enabled": True,
            # Scraped by the monitoring stack's own ServiceMonitor, which exists before any GPU serves.
            "serviceMonitor": {"enabled": False},
            "config": {"name": COUNTERS_CONFIGMAP},
            "env": [
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": COUNTERS_PATH},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            ],
            # The Slurm prolog's GPU-to-job files: the operator mounts the host directory read-only and points
            # DCGM_HPC_JOB_MAPPING_DIR at it, so Slurm jobs' GPU metrics carry `hpc_job`.
            "hpcJobMapping": {"enabled": True, "directory": site.gpu_operator.hpc_job_mapping_dir},
        },
    }
