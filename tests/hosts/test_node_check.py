"""The node-check program, run as it runs on a node, against small fakes of the real tools that answer with recorded
outputs (tests/hosts/records/, each with its source in its header).

The node's tools are fakes on PATH (chroot, crictl, ipmitool); nvidia-smi lives only in the fake driver root, as the
GPU Operator's does, and the fake chroot runs it from there, so a check that ran nvidia-smi from the host's PATH
would find none (or, on the host-driver node, the host's).
"""

import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hosts import NODE_CHECK

RECORDS = Path(__file__).parent / "records"
A800 = "NVIDIA A800-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"
OPERATOR_DRIVER = "535.230.02"
BMC_HOST, BMC_PASSWORD = "10.20.101.11", "bmc-secret"
DCGM_ID = "4f" * 32


def recorded(name: str) -> str:
    """A record's body: what the tool printed, below its "# ---"-terminated header."""
    return RECORDS.joinpath(name).read_text().split("# ---\n", 1)[1]


# A record holds one "## <query>" section per query; the fake answers the section the query starts with, and refuses
# any other query the way nvidia-smi refuses an unknown field.
FAKE_NVIDIA_SMI = """\
import sys
sections = {}
for block in open(RECORD).read().split("# ---\\n", 1)[1].split("## ")[1:]:
    query, _, body = block.partition("\\n")
    sections[query] = body
asked = " ".join(sys.argv[1:])
body = next((b for q, b in sections.items() if asked.startswith(q)), None)
if body is None:
    print(f'Field "{asked.split("=")[-1].split(" ")[0]}" is not a valid field to query.')
    sys.exit(2)
sys.stdout.write(body)
"""

# chroot(8) semantics: the tool is the one inside the new root, never one from the caller's PATH.
FAKE_CHROOT = """\
import os, sys
root, tool, *rest = sys.argv[1:]
assert root == DRIVER_ROOT, root
path = os.path.join(root, "usr/bin", tool)
if not os.path.exists(path):
    print(f"chroot: failed to run command '{tool}': No such file or directory", file=sys.stderr)
    sys.exit(127)
os.execv(path, [tool, *rest])
"""

FAKE_CRICTL = """\
import os, sys, time
args = sys.argv[1:]
assert args[:2] == ["--runtime-endpoint", "unix:///run/containerd/containerd.sock"], args
if args[2] == "ps":
    assert args[3:] == ["--name", "^nvidia-dcgm-ctr$", "--state", "Running", "--quiet"], args
    if SCENARIO.get("dcgm") != "absent":
        print(DCGM_ID)
    sys.exit(0)
assert args[2:7] == ["exec", DCGM_ID, "dcgmi", "diag", "-r"] and args[8] == "-j", args
if SCENARIO.get("diag") == "dcgmi-diag-timeout.txt":
    time.sleep(60)
sys.stdout.write(open(os.path.join(RECORDS, SCENARIO["diag"])).read().split("# ---\\n", 1)[1])
sys.exit(SCENARIO.get("diag_exit", 0))
"""

FAKE_IPMITOOL = """\
import os, sys
args = sys.argv[1:]
assert args[:7] == ["-I", "lanplus", "-H", BMC_HOST, "-U", "ADMIN", "-E"], args
assert args[-3:] == ["sdr", "type", "Power Supply"], args
assert os.environ["IPMI_PASSWORD"] == BMC_PASSWORD and BMC_PASSWORD not in args
if SCENARIO.get("bmc") == "unreachable":
    print("Error: Unable to establish IPMI v2 / RMCP+ session", file=sys.stderr)
    sys.exit(1)
sys.stdout.write(open(RECORDS + "/" + SCENARIO["psu"]).read().split("# ---\\n", 1)[1])
"""

FAKE_CONTAINER_CLI = """\
import sys
assert sys.argv[1:] == ["--root=" + DRIVER_ROOT, "info", "--csv"], sys.argv
sys.stdout.write(open(RECORDS + "/nvidia-container-cli-info.txt").read().split("# ---\\n", 1)[1])
"""

HEALTHY_A800: dict[str, Any] = {
    "smi": "nvidia-smi-a800-healthy.txt",
    "diag": "dcgmi-diag-r3-pass-dcgm4.json",
    "psu": "ipmitool-sdr-psu-healthy.txt",
}
HEALTHY_RTX4090: dict[str, Any] = {**HEALTHY_A800, "smi": "nvidia-smi-rtx4090-healthy.txt"}


class Node:
    """A fake node under tmp_path: tools on PATH, the operator's driver root and toolkit, a host root."""

    def __init__(self, tmp_path: Path, scenario: dict[str, Any]) -> None:
        self.tmp = tmp_path
        self.driver_root = tmp_path / "run" / "nvidia" / "driver"
        self.host_root = tmp_path / "host"
        self.records = tmp_path / "records"
        self.driver_ready = tmp_path / "validations" / "driver-ready"
        self.driver_ready.parent.mkdir()
        if scenario.get("operator_driver") != "absent":
            self.driver_ready.touch()
        self.host_root.mkdir()
        constants = (f"DRIVER_ROOT = {str(self.driver_root)!r}\nRECORDS = {str(RECORDS)!r}\n"
                     f"SCENARIO = {scenario!r}\nDCGM_ID = {DCGM_ID!r}\nBMC_HOST = {BMC_HOST!r}\n"
                     f"BMC_PASSWORD = {BMC_PASSWORD!r}\nRECORD = {str(RECORDS / scenario['smi'])!r}\n")
        bin_dir = tmp_path / "bin"
        tools = {bin_dir / "chroot": FAKE_CHROOT, bin_dir / "crictl": FAKE_CRICTL, bin_dir / "ipmitool": FAKE_IPMITOOL,
                 self.driver_root / "usr" / "bin" / "nvidia-smi": FAKE_NVIDIA_SMI,
                 tmp_path / "toolkit" / "nvidia-container-cli": FAKE_CONTAINER_CLI}
        for path, body in tools.items():
            if path.name not in scenario.get("missing", []):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"#!{sys.executable}\n{constants}{body}")
                path.chmod(0o755)
        self.path = str(bin_dir)
        self.toolkit_cli = tmp_path / "toolkit" / "nvidia-container-cli"

    def check(self, *, expect_name: str = A800, nvlinks: int = 8, power_limit_w: int = 400, diag_timeout_s: float = 20,
              driver_wait_s: float = 1, bmc_password: str | None = BMC_PASSWORD) -> tuple[int, dict[str, Any]]:
        """bmc_password None: stdin stays open and says nothing, as an interactive ssh session's may."""
        proc = subprocess.Popen(
            [sys.executable, str(NODE_CHECK), "--node", "gpu-a800-01", "--rack", "a01",
             "--cooling", "in_row_chilled_water 45 kW", "--expect-name", expect_name, "--expect-count", "8",
             "--expect-nvlinks", str(nvlinks), "--driver-version", OPERATOR_DRIVER,
             "--driver-root", str(self.driver_root), "--toolkit-cli", str(self.toolkit_cli),
             "--host-root", str(self.host_root), "--max-temp-c", "85", "--power-limit-w", str(power_limit_w),
             "--diag-level", "3", "--diag-timeout-s", str(diag_timeout_s),
             "--dcgm-container", "nvidia-dcgm-ctr", "--cri-endpoint", "unix:///run/containerd/containerd.sock",
             "--sample-s", "0.2", "--bmc-host", BMC_HOST, "--bmc-user", "ADMIN", "--record-dir", str(self.records),
             "--driver-ready", str(self.driver_ready), "--driver-wait-s", str(driver_wait_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": self.path},
        )  # fmt: skip
        if bmc_password is not None:
            stdout, stderr = proc.communicate(f"{bmc_password}\n", timeout=60)
        else:  # the report (some 20 KiB) fits the pipe while the check runs
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            proc.wait(timeout=60)
            stdout, stderr = proc.stdout.read(), proc.stderr.read()
            proc.stdin.close()
        assert stderr == "", stderr  # never a traceback
        return proc.returncode, json.loads(stdout)


def node_check(tmp_path: Path, scenario: dict[str, Any], **options: Any) -> tuple[int, dict[str, Any]]:
    return Node(tmp_path, scenario).check(**options)


def failed(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}


def evidence(report: dict[str, Any], check: str) -> dict[str, Any]:
    return next(c["evidence"] for c in report["checks"] if c["name"] == check)


ALL_CHECKS = ["driver-ready", "host-driver", "gpu-inventory", "driver", "container-toolkit", "power-limit", "ecc",
              "row-remap", "nvlink", "psu-redundancy", "dcgm-diag", "burn-in"]


def test_should_pass_a_healthy_a800_node_and_record_the_evidence(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, HEALTHY_A800)
    assert (code, report["ok"], failed(report)) == (0, True, {})
    assert [c["name"] for c in report["checks"]] == ALL_CHECKS
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["dcgm-diag"] == ("dcgmi diag -r 3: 7 tests passed (diagnostic, memory, memory_bandwidth, pcie, "
                                    "software, targeted_power, targeted_stress)")
    assert details["driver"] == "driver 535.230.02, the GPU Operator's"
    assert details["container-toolkit"].startswith("containers get driver 535.230.02 (CUDA 12.2) from ")
    assert details["nvlink"] == "8 NVLinks up on each GPU"
    assert evidence(report, "burn-in")["hottest_c"]["5"] == 75
    assert evidence(report, "burn-in")["slowest_sm_mhz"]["0"] == 1410
    assert report["max_temp_c"] == 75
    assert report["check_version"] == hashlib.sha256(NODE_CHECK.read_bytes()).hexdigest()[:12]
    # The verdict stays on the node with its evidence, exactly as printed.
    kept = json.loads(Path(report["record"]).read_text())
    assert {k: v for k, v in report.items() if k != "record"} == kept


def test_should_read_the_dcgm3_document_dcgm_printed_with_a_banner_and_nulls(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, {**HEALTHY_A800, "diag": "dcgmi-diag-pass-dcgm3.json"})
    assert (code, failed(report)) == (0, {})
    assert evidence(report, "dcgm-diag")["results"] == 17  # 9 deployment tests for all GPUs, software per GPU


def test_should_pass_a_healthy_rtx4090_node_without_ecc_row_remapping_or_nvlink(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, HEALTHY_RTX4090, expect_name=RTX4090, nvlinks=0, power_limit_w=450)
    assert (code, report["ok"], failed(report)) == (0, True, {})
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["row-remap"] == "not supported"
    assert details["nvlink"] == "NVIDIA GeForce RTX 4090 has no NVLink"
    assert details["ecc"] == "ECC enabled on 0 of 8 GPUs, 0 errors"


def test_should_fail_the_node_on_the_diagnostics_per_test_verdict(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, {**HEALTHY_A800, "diag": "dcgmi-diag-r3-fail-dcgm4.json", "diag_exit": 226})
    assert (code, failed(report)) == (1, {"dcgm-diag": (
        'dcgmi diag -r 3: software on GPU 3: Fail: Persistence Mode: Persistence mode for GPU 3 is disabled. Enable '
        'persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.')})
    assert evidence(report, "dcgm-diag")["exit_code"] == 226


def test_should_not_admit_a_node_on_a_diagnostic_that_skipped_every_test(tmp_path: Path) -> None:
    skipped = tmp_path / "skipped.json"
    # The passing record with every status turned to Skip: a run that loaded and judged nothing.
    skipped.write_text("# ---\n" + recorded("dcgmi-diag-r3-pass-dcgm4.json").replace('"Pass"', '"Skip"'))
    code, report = node_check(tmp_path, {**HEALTHY_A800, "diag": str(skipped)})
    assert (code, failed(report)) == (1, {"dcgm-diag": "dcgmi diag -r 3: no test passed (every one skipped)"})


def test_should_stop_a_diagnostic_that_outlives_its_timeout_and_fail_the_node(tmp_path: Path) -> None:
    started = time.monotonic()
    code, report = node_check(tmp_path, {**HEALTHY_A800, "diag": "dcgmi-diag-timeout.txt"}, diag_timeout_s=1)
    assert time.monotonic() - started < 15  # the fake dcgmi sleeps 60 s: the check stopped it
    assert (code, failed(report)) == (1, {"dcgm-diag": "dcgmi diag -r 3 did not finish within 1 s and was stopped"})
    assert evidence(report, "burn-in")["samples"] >= 2  # the GPUs were read while it ran


def test_should_fail_a_node_whose_rack_lets_a_gpu_overheat_and_throttle_under_the_diagnostic(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, {**HEALTHY_A800, "smi": "nvidia-smi-a800-throttling.txt"})
    assert (code, failed(report)) == (1, {"burn-in": (
        "under dcgmi diag -r 3 in rack a01 (in_row_chilled_water 45 kW): GPU 5 reached 89 C (limit 85 C); "
        "GPU 5 throttled: hw_thermal_slowdown")})
    assert evidence(report, "burn-in")["slowest_sm_mhz"]["5"] == 1005
    assert [g["max_temp_c"] for g in report["gpus"]] == [78, 80, 79, 82, 81, 89, 83, 80]


def test_should_fail_a_node_with_a_second_driver_installed_on_the_host(tmp_path: Path) -> None:
    node = Node(tmp_path, {**HEALTHY_A800, "smi": "nvidia-smi-a800-host-driver.txt"})
    for leftover in ("usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "usr/bin/nvidia-smi"):
        (node.host_root / leftover).parent.mkdir(parents=True, exist_ok=True)
        (node.host_root / leftover).touch()
    code, report = node.check()
    problems = failed(report)
    assert code == 1 and set(problems) == {"host-driver", "driver", "dcgm-diag", "burn-in"}
    assert problems["host-driver"] == (
        f"a driver is installed on the host besides the operator's: {node.host_root}/usr/bin/nvidia-smi, "
        f"{node.host_root}/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15")
    assert problems["driver"] == ("driver 550.54.15 is loaded; the GPU Operator installs 535.230.02: the node runs a "
                                  "driver other than the operator's")
    assert problems["dcgm-diag"] == "skipped: gpu-inventory or driver failed"


def test_should_fail_a_node_whose_operator_driver_never_becomes_ready_and_touch_no_gpu(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, {**HEALTHY_A800, "operator_driver": "absent"}, driver_wait_s=0.5)
    assert code == 1
    assert failed(report)["driver-ready"].startswith("the GPU Operator's driver was not ready within 0.5 s (")
    assert {name for name, detail in failed(report).items() if detail == "skipped: driver-ready failed"} == set(
        ALL_CHECKS) - {"driver-ready", "host-driver", "psu-redundancy"}
    assert report["gpus"] == []


def test_should_wait_for_the_driver_that_arrives_while_the_check_waits(tmp_path: Path) -> None:
    node = Node(tmp_path, {**HEALTHY_A800, "operator_driver": "absent"})
    arrives = threading.Timer(0.5, node.driver_ready.touch)
    arrives.start()
    try:
        code, report = node.check(driver_wait_s=20)
    finally:
        arrives.cancel()
    assert (code, failed(report)) == (0, {})


UNPROVEN = "PSU redundancy unproven"


@pytest.mark.parametrize(
    ("scenario", "options", "expected_failures"),
    [
        pytest.param({**HEALTHY_A800, "psu": "ipmitool-sdr-psu-failed.txt"}, {},
                     {"psu-redundancy": "PSU2 Status: Presence detected, Failure detected; only 1 healthy PSU(s), "
                                        "redundancy needs 2"},
                     id="should fail when a PSU has failed"),
        pytest.param({**HEALTHY_A800, "missing": ["ipmitool"]}, {},
                     {"psu-redundancy": f"BMC {BMC_HOST}: ipmitool not found: {UNPROVEN}"},
                     id="should fail, never skip, when ipmitool is missing"),
        pytest.param({**HEALTHY_A800, "bmc": "unreachable"}, {},
                     {"psu-redundancy": f"BMC {BMC_HOST}: ipmitool exited 1: Error: Unable to establish IPMI v2 / "
                                        f"RMCP+ session: {UNPROVEN}"},
                     id="should fail when the BMC cannot be reached"),
        pytest.param(HEALTHY_A800, {"bmc_password": ""}, {"psu-redundancy": f"no BMC password on stdin: {UNPROVEN}"},
                     id="should fail without the BMC password"),
        pytest.param(HEALTHY_A800, {"bmc_password": None},
                     {"psu-redundancy": f"no BMC password on stdin: {UNPROVEN}"},
                     id="should not wait forever on a stdin that stays open and silent"),
        pytest.param({**HEALTHY_A800, "dcgm": "absent"}, {},
                     {"dcgm-diag": "no running nvidia-dcgm-ctr container: is the operator's DCGM deployed on this "
                                   "node?", "burn-in": "skipped: no diagnostic to load the GPUs"},
                     id="should fail when the operator's DCGM does not run on the node"),
        pytest.param({**HEALTHY_A800, "missing": ["nvidia-container-cli"]}, {},
                     {"container-toolkit": "the operator's container toolkit cannot reach its driver: "
                                           "{tmp}/toolkit/nvidia-container-cli not found"},
                     id="should fail when the operator's container toolkit is not installed"),
        pytest.param(HEALTHY_A800, {"nvlinks": 12},
                     {"nvlink": "; ".join(f"GPU {i}: 8 of 12 NVLinks up" for i in range(8))},
                     id="should fail when a GPU has fewer NVLinks up than its model"),
        pytest.param(HEALTHY_A800, {"power_limit_w": 350},
                     {"power-limit": "expected 350 W: " + "; ".join(f"GPU {i} at 400.00 W" for i in range(8))},
                     id="should fail when the power limit is not the planned one"),
        pytest.param(HEALTHY_A800, {"expect_name": "NVIDIA A100-SXM4-80GB"},
                     {"gpu-inventory": "; ".join(f"GPU {i} is 'NVIDIA A800-SXM4-80GB', expected 'NVIDIA A100-SXM4-80GB'"
                                                 for i in range(8)),
                      "dcgm-diag": "skipped: gpu-inventory or driver failed",
                      "burn-in": "skipped: gpu-inventory or driver failed"},
                     id="should fail when the GPUs are the wrong model and load none"),
        pytest.param({**HEALTHY_A800, "missing": ["nvidia-smi"]}, {},
                     {"gpu-inventory": "chroot exited 127: chroot: failed to run command 'nvidia-smi': No such file or "
                                       "directory",
                      **dict.fromkeys(("driver", "container-toolkit", "power-limit", "ecc"), "skipped: no GPU data"),
                      "row-remap": "chroot exited 127: chroot: failed to run command 'nvidia-smi': No such file or "
                                   "directory",
                      "nvlink": "chroot exited 127: chroot: failed to run command 'nvidia-smi': No such file or "
                                "directory",
                      "dcgm-diag": "skipped: gpu-inventory or driver failed",
                      "burn-in": "skipped: gpu-inventory or driver failed"},
                     id="should fail every GPU check when the driver root holds no nvidia-smi"),
    ],
)
def test_should_fail_the_node_and_name_the_check(tmp_path: Path, scenario: dict[str, Any], options: dict[str, Any],
                                                  expected_failures: dict[str, str]) -> None:
    code, report = node_check(tmp_path, scenario, **options)
    assert (code, report["ok"]) == (1, False)
    assert failed(report) == {k: v.replace("{tmp}", str(tmp_path)) for k, v in expected_failures.items()}


def test_should_report_an_unwritable_record_dir_as_a_failed_check(tmp_path: Path) -> None:
    node = Node(tmp_path, HEALTHY_A800)
    node.records.write_text("a file where the directory should be")
    code, report = node.check()
    assert code == 1 and failed(report)["record"].startswith("report not recorded: ")

