"""What a node-check result means: the node's Kubernetes labels and taints, and whether it joins Slurm.

Pure. The node-check program (`hosts/node_check.py`) runs on the node and prints one JSON
object; anything short of a readable result that says ok (no output, garbage, a failed check)
leaves the node unvalidated: tainted NoSchedule, out of Slurm, with the reason recorded.
"""

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

from components.facility.power import NodeLoad
from components.spec.site import Site
from components.spec.wellknown import (
    GPU_MODEL_LABEL,
    POOL_LABEL,
    POOL_TAINT,
    RACK_LABEL,
    UNVALIDATED_TAINT,
    VALIDATED_LABEL,
)
from hosts import NODE_CHECK

REMOTE_PATH = "/opt/gpucluster/node_check.py"
CHECK_VERSION = hashlib.sha256(NODE_CHECK.read_bytes()).hexdigest()[:12]
"""Changes with the program's bytes; a new version re-validates every node (the program reports the same)."""
# The GPU Operator's containerized driver puts nvidia-smi here on the host (gpu-operator docs,
# "driver container": /run/nvidia/driver); a host-installed driver is found on the usual PATH.
DRIVER_PATH = "/run/nvidia/driver/usr/bin"


@dataclass(frozen=True)
class Verdict:
    validated: bool
    reason: str
    """Empty when validated; otherwise every failed check with its detail."""


def parse_result(stdout: str | None) -> Verdict:
    if not stdout or not stdout.strip():
        return Verdict(False, "no node-check result yet")
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except json.JSONDecodeError:
        return Verdict(False, f"unreadable node-check output: {stdout.strip()[:60]!r}")
    if not isinstance(result, dict):
        return Verdict(False, f"unreadable node-check output: {stdout.strip()[:60]!r}")
    failed = [c for c in result.get("checks", []) if isinstance(c, dict) and c.get("ok") is not True]
    if result.get("ok") is True and not failed:
        return Verdict(True, "")
    reasons = "; ".join(f"{c.get('name', '?')}: {c.get('detail', '')}" for c in failed)
    return Verdict(False, reasons or "node check reported failure")


def check_command(site: Site, load: NodeLoad) -> str:
    """The node check's command line, with every expectation taken from the spec."""
    gpu, settings = site.gpu_catalog[load.gpu_model], site.node_check
    args = [
        "python3", REMOTE_PATH, "--node", load.name,
        "--expect-name", gpu.smi_name, "--expect-count", str(load.gpus),
        "--min-driver", settings.min_driver_version,
        "--max-temp-c", f"{site.monitoring.gpu_temp_incident_c:g}", "--power-limit-w", f"{gpu.tdp_w:g}",
        "--burn-in-s", str(settings.burn_in_s), "--burn-command", settings.burn_command,
        "--driver-wait-s", str(settings.driver_wait_s),
    ]
    # Exit 1 means "checked, and a check failed": recorded as a verdict, not a failed deploy.
    # Anything else (no python3, a crash) fails the resource so the operator looks at it.
    return f"PATH={DRIVER_PATH}:$PATH {shlex.join(args)}; rc=$?; [ $rc -le 1 ]"


def node_labels(load: NodeLoad, verdict: Verdict) -> dict[str, str]:
    return {
        VALIDATED_LABEL: str(verdict.validated).lower(),
        GPU_MODEL_LABEL: load.gpu_model,
        RACK_LABEL: load.rack,
        POOL_LABEL: load.pool,
    }


def node_taints(load: NodeLoad, verdict: Verdict) -> list[dict[str, Any]]:
    """Unvalidated nodes take no pods; Slurm and flex nodes take only pods that tolerate their pool."""
    taints = []
    if not verdict.validated:
        taints.append({"key": UNVALIDATED_TAINT, "value": "true", "effect": "NoSchedule"})
    if load.pool != "kubernetes":
        taints.append({"key": POOL_TAINT, "value": load.pool, "effect": "NoSchedule"})
    return taints
