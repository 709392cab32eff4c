"""A GpuNode's admission: the node-check stdout decides its labels, taints and Slurm eligibility."""

import json
import shlex
import subprocess
import threading
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from components.facility.admission import CHECK_COPY, CHECK_PROGRAM, check_command
from components.facility.component import GpuNode, NodeAdmission
from components.facility.power import node_loads
from hosts import NODE_CHECK
from tests.builders import parse, prod_values

HEALTHY = json.dumps({"node": "gpu-a800-01", "ok": True, "checks": [{"name": "gpu-inventory", "ok": True,
                                                                     "detail": "8 x NVIDIA A800-SXM4-80GB"}]})
HOT = json.dumps({"node": "gpu-a800-01", "ok": False, "checks": [
    {"name": "gpu-inventory", "ok": True, "detail": "8 x NVIDIA A800-SXM4-80GB"},
    {"name": "burn-in", "ok": False, "detail": "GPU 3 reached 91 C (limit 85 C)"},
]})


class NodeCheckMocks(pulumi.runtime.Mocks):
    """The node check answers with `stdout`; every registration's inputs are kept by type."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.inputs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        with self._lock:
            self.inputs[args.typ] = args.inputs
        outputs = dict(args.inputs)
        if args.typ == "command:remote:Command":
            outputs["stdout"] = self.stdout
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def admit(stdout: str) -> tuple[NodeCheckMocks, bool]:
    """The registrations and the `validated` output of gpu-a800-01 under a node check answering stdout."""
    mocks = NodeCheckMocks(stdout)
    pulumi.runtime.set_mocks(mocks, project="gpu-cluster", stack="prod", preview=False)
    site = parse(prod_values())
    load = node_loads(site)[0]
    validated: list[bool] = []

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        admission = NodeAdmission(site, pulumi.Output.secret("key"), pulumi.Output.secret("bmc-secret"))
        node = GpuNode(load, admission, pulumi.ResourceOptions())
        return node.verdict.apply(lambda v: validated.append(v.validated))

    program()
    return mocks, validated[0]


def test_should_admit_a_node_whose_check_passed() -> None:
    mocks, validated = admit(HEALTHY)
    patch = mocks.inputs["kubernetes:core/v1:NodePatch"]
    assert validated is True
    assert patch["metadata"]["labels"] == {
        "gpucluster.io/validated": "true", "gpucluster.io/gpu-model": "A800-SXM4-80GB",
        "gpucluster.io/rack": "a01", "gpucluster.io/pool": "slurm",
    }
    # Only the pool taint remains: Slurm nodes take Kubernetes pods only when lent.
    assert patch["spec"]["taints"] == [{"key": "gpucluster.io/pool", "value": "slurm", "effect": "NoSchedule"}]
    assert patch["metadata"]["annotations"] == {"gpucluster.io/validation-reason": ""}


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        pytest.param(HOT, "burn-in: GPU 3 reached 91 C (limit 85 C)", id="should taint a node that ran hot"),
        pytest.param("Traceback (most recent call last):",
                     "unreadable node-check output: 'Traceback (most recent call last):'",
                     id="should taint a node whose check printed garbage"),
        pytest.param("", "no node-check result yet", id="should taint a node without a result"),
    ],
)
def test_should_keep_a_failed_node_tainted_with_its_reason(stdout: str, reason: str) -> None:
    mocks, validated = admit(stdout)
    patch = mocks.inputs["kubernetes:core/v1:NodePatch"]
    assert validated is False
    assert patch["metadata"]["labels"]["gpucluster.io/validated"] == "false"
    assert {"key": "gpucluster.io/unvalidated", "value": "true", "effect": "NoSchedule"} in patch["spec"]["taints"]
    assert patch["metadata"]["annotations"] == {"gpucluster.io/validation-reason": reason}


def test_should_check_the_node_on_the_operators_driver_and_pass_the_bmc_password_on_stdin_only() -> None:
    mocks, _ = admit(HEALTHY)
    check = mocks.inputs["command:remote:Command"]
    # Still a secret when it reaches the engine (the secret signature wraps it), and nowhere in the command line.
    assert check["stdin"] == {rpc._special_sig_key: rpc._special_secret_sig, "value": "bmc-secret\n"}
    assert "bmc-secret" not in check["create"]
    argv = shlex.split(check["create"].split("; ")[1])
    assert argv[0] == "PATH=/usr/sbin:/usr/bin:/sbin:/bin"  # never the login's PATH
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert {key: options[key] for key in ("--driver-version", "--driver-root", "--toolkit-cli", "--expect-nvlinks",
                                          "--diag-level", "--cooling", "--bmc-host", "--bmc-user")} == {
        "--driver-version": "535.230.02", "--driver-root": "/run/nvidia/driver",
        "--toolkit-cli": "/usr/local/nvidia/toolkit/nvidia-container-cli", "--expect-nvlinks": "8",
        "--diag-level": "3", "--cooling": "in_row_chilled_water 40 kW", "--bmc-host": "10.20.101.11",
        "--bmc-user": "ADMIN"}


def test_should_run_consumer_gpus_at_the_only_diagnostic_level_dcgm_supports_on_them() -> None:
    site = parse(prod_values())
    rtx = next(load for load in node_loads(site) if load.gpu_model == "RTX-4090")
    argv = shlex.split(check_command(site, rtx).split("; ")[1])
    assert argv[argv.index("--diag-level") + 1] == "1"
    assert argv[argv.index("--expect-nvlinks") + 1] == "0"


def on_a_fresh_node(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`script` as the node's shell runs it, with no /opt/gpucluster yet: a private mount namespace, /opt empty."""
    return subprocess.run(["unshare", "--mount", "--", "sh", "-c", 'mount -t tmpfs tmpfs /opt && exec sh -c "$0"',
                           script], env={"HOME": str(home), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                          capture_output=True, text=True, timeout=30)


def test_should_run_the_check_from_the_copy_in_the_ssh_users_home_and_fail_the_deploy_without_it(
        tmp_path: Path) -> None:
    mocks, _ = admit(HEALTHY)
    # CopyToRemote makes no missing parent directory: a relative remotePath lands in the home SFTP starts in.
    assert mocks.inputs["command:remote:CopyToRemote"]["remotePath"] == CHECK_COPY
    command = mocks.inputs["command:remote:Command"]["create"]
    install, check = command.split("; ")[:2]
    assert f"python3 {CHECK_PROGRAM} " in check
    missing = on_a_fresh_node(command, tmp_path)
    assert missing.returncode == 2, missing.stderr  # not 1, a verdict: the deploy fails before any check runs
    (tmp_path / CHECK_COPY).write_bytes(NODE_CHECK.read_bytes())
    installed = on_a_fresh_node(f"{install} && stat -c %a {CHECK_PROGRAM} && cmp $HOME/{CHECK_COPY} {CHECK_PROGRAM}",
                                tmp_path)
    assert (installed.returncode, installed.stdout) == (0, "755\n"), installed.stderr
