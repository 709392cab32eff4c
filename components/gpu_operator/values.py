"""The GPU Operator's chart values, rendered from the site spec. Pure: no pulumi."""

from typing import Any

from components.spec.site import Site
from components.spec.wellknown import HPC_JOB_MAPPING_DIR, POOL_TAINT, UNVALIDATED_TAINT

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
