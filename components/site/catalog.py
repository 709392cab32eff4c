"""The GPU catalog: power, memory and class of the GPUs a site may hold, with each figure's source."""

import re
from enum import StrEnum
from typing import Final


class GpuClass(StrEnum):
    """How a GPU must be housed."""

    DENSE = "dense"
    """SXM/HGX boards (A800, A100, H-class): ~6.5 kW per 8-GPU node; liquid or in-row cooled racks."""
    DATACENTER = "datacenter"
    """Passively cooled PCIe data-centre cards (L40S)."""
    CONSUMER = "consumer"
    """Actively cooled desktop cards (RTX 4090)."""


# Keys are the names node groups use; values are plain dicts so the spec can parse and override them.
# smi_name is what `nvidia-smi --query-gpu=name --format=csv,noheader` prints for the board; nvlinks how many NVLinks
# each GPU has up (`nvidia-smi nvlink --status`), from the datasheet's NVLink bandwidth.
GPU_CATALOG: Final[dict[str, dict[str, object]]] = {
    "A800-SXM4-80GB": {
        "tdp_w": 400,
        "memory_gb": 80,
        "gpu_class": GpuClass.DENSE,
        "source": ("NVIDIA A800 Tensor Core GPU datasheet (2022): SXM max TDP 400 W, 80 GB HBM2e;"
                   " NVLink 400 GB/s, 8 third-generation links of 50 GB/s"),
        "smi_name": "NVIDIA A800-SXM4-80GB",
        "nvlinks": 8,
    },
    "A100-SXM4-80GB": {
        "tdp_w": 400,
        "memory_gb": 80,
        "gpu_class": GpuClass.DENSE,
        "source": ("NVIDIA A100 Tensor Core GPU datasheet (2021): SXM max TDP 400 W, 80 GB HBM2e;"
                   " NVLink 600 GB/s, 12 third-generation links of 50 GB/s"),
        "smi_name": "NVIDIA A100-SXM4-80GB",
        "nvlinks": 12,
    },
    "H100-SXM5-80GB": {
        "tdp_w": 700,
        "memory_gb": 80,
        "gpu_class": GpuClass.DENSE,
        "source": ("NVIDIA H100 Tensor Core GPU datasheet (2023): SXM max TDP up to 700 W, 80 GB HBM3;"
                   " NVLink 900 GB/s, 18 fourth-generation links of 50 GB/s"),
        "smi_name": "NVIDIA H100 80GB HBM3",
        "nvlinks": 18,
    },
    "L40S": {
        "tdp_w": 350,
        "memory_gb": 48,
        "gpu_class": GpuClass.DATACENTER,
        "source": "NVIDIA L40S datasheet (2023): max power 350 W, 48 GB GDDR6; no NVLink",
        "smi_name": "NVIDIA L40S",
        "nvlinks": 0,
    },
    "RTX-4090": {
        "tdp_w": 450,
        "memory_gb": 24,
        "gpu_class": GpuClass.CONSUMER,
        "source": "NVIDIA GeForce RTX 4090 specifications: total graphics power 450 W, 24 GB GDDR6X; no NVLink",
        "smi_name": "NVIDIA GeForce RTX 4090",
        "nvlinks": 0,
    },
}


_GPU_MODEL_QUALIFIERS = re.compile(r"^(SXM\d*|PCIE|NVL|\d+GB)$", re.IGNORECASE)


def gres_type(gpu_model: str) -> str:
    """The GRES type of a GPU model: its name without form factor and memory (`A800-SXM4-80GB` -> `a800`)."""
    parts = [p for p in gpu_model.split("-") if not _GPU_MODEL_QUALIFIERS.match(p)]
    return "".join(parts).lower()
