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
from components.site.catalog import GpuClass
from components.site.derived import nodes_by_name
from components.site.site import GpuModel, Site
from components.site.wellknown import (
    CRI_ENDPOINT,
    DCGM_CONTAINER,
    DRIVER_ROOT,
    GPU_MODEL_LABEL,
    POOL_LABEL,
    POOL_TAINT,
    RACK_LABEL,
    TOOLKIT_CLI,
    UNVALIDATED_TAINT,
    VALIDATED_LABEL,
)
from hosts import NODE_CHECK

CHECK_COPY = "gpucluster-node_check.py"
"""Where the program's copy lands on a node: in ssh_user's home, which SFTP starts in and only that user writes.
CopyToRemote makes no missing parent directory (pulumi-command's remotePath), so the check's command installs it
at CHECK_PROGRAM."""
CHECK_PROGRAM = "/opt/gpucluster/node_check.py"
RECORD_DIR = "/var/lib/gpucluster/node-check"
"""Where each node keeps every report of its check, evidence included (the verdict's stdout also stays in the state)."""
CHECK_VERSION = hashlib.sha256(NODE_CHECK.read_bytes()).hexdigest()[:12]
"""Changes with the program's bytes; a new version re-validates every node (the program reports the same)."""
CHECK_SEARCH_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""The check's tools (chroot, crictl, ipmitool, python3) come from the system's directories, never from the login's
PATH; nvidia-smi it runs inside the operator's driver root."""


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


def diag_level(site: Site, gpu: GpuModel) -> int:
    """DCGM runs only level 1 on non-datacenter GPUs (dcgmi diag reference: "Non-datacenter GPUs support level 1")."""
    return 1 if gpu.gpu_class is GpuClass.CONSUMER else site.node_check.diag_level


def check_command(site: Site, load: NodeLoad) -> str:
    """The node check's command line, with every expectation taken from the spec. The BMC password is not in it:
    the check reads it from stdin."""
    gpu, settings = site.gpu_catalog[load.gpu_model], site.node_check
    rack = next(r for r in site.racks if r.name == load.rack)
    node = nodes_by_name(site)[load.name]
    args = [
        "python3", CHECK_PROGRAM, "--node", load.name, "--rack", rack.name,
        "--cooling", f"{rack.cooling.type.value} {rack.cooling.capacity_kw:g} kW",
        "--expect-name", gpu.smi_name, "--expect-count", str(load.gpus), "--expect-nvlinks", str(gpu.nvlinks),
        "--driver-version", site.gpu_operator.driver_version,
        "--driver-root", DRIVER_ROOT, "--toolkit-cli", TOOLKIT_CLI,
        "--max-temp-c", f"{site.monitoring.gpu_temp_incident_c:g}", "--power-limit-w", f"{gpu.tdp_w:g}",
        "--diag-level", str(diag_level(site, gpu)), "--diag-timeout-s", str(settings.diag_timeout_s),
        "--dcgm-container", DCGM_CONTAINER, "--cri-endpoint", CRI_ENDPOINT,
        "--bmc-host", node.bmc_host, "--bmc-user", site.bmc_user, "--record-dir", RECORD_DIR,
        "--driver-wait-s", str(settings.driver_wait_s),
    ]
    # Exit 1 means "checked, and a check failed": recorded as a verdict, not a failed deploy.
    # Anything else (no copy to install, no python3, a crash) fails the resource so the operator looks at it.
    install = f'install -D -m 0755 "$HOME/{CHECK_COPY}" {CHECK_PROGRAM} || exit 2'
    return f"{install}; PATH={CHECK_SEARCH_PATH} {shlex.join(args)}; rc=$?; [ $rc -le 1 ]"


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
