"""The node-check program, run as it runs on a node, against fake nvidia-smi and ipmitool on PATH."""

import copy
import hashlib
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hosts import NODE_CHECK

PROGRAM = NODE_CHECK

A800 = "NVIDIA A800-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"

# Answers each query form node_check uses, in nvidia-smi's csv layout (", "-separated, no header), from a
# scenario file. Anything else is refused the way nvidia-smi refuses an unknown field.
FAKE_NVIDIA_SMI = """\
import json, sys
scenario = json.load(open(SCENARIO))
query = next((a for a in sys.argv[1:] if a.startswith("--query")), "")
if "garbage" in scenario:
    print(scenario["garbage"])
elif query.startswith("--query-gpu=index,uuid,name,driver_version,power.limit,ecc.mode.current"):
    for g in scenario["gpus"]:
        print(", ".join([str(g["index"]), g["uuid"], g["name"], scenario["driver"], g["power_limit"],
                         g["ecc_mode"], g["ecc_errors"], str(g["temp"])]))
elif query.startswith(f"--query-gpu=index,temperature.gpu,{scenario.get('reasons', 'clocks_throttle_reasons')}."):
    for g in scenario["gpus"]:
        reasons = g.get("throttle", [])
        print(", ".join([str(g["index"]), str(g["burn_temp"])] + ["Active" if r in reasons else "Not Active"
                        for r in ("hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")]))
elif query == "--query-remapped-rows=gpu_uuid,remapped_rows.failure,remapped_rows.pending":
    for g in scenario["gpus"]:
        print(f'{g["uuid"]}, {g["remap"]}')
else:
    print(f'Field "{query.split("=")[-1]}" is not a valid field to query.')
    sys.exit(2)
"""

FAKE_IPMITOOL = """\
import json, sys
from hosts import NODE_CHECK
assert sys.argv[1:] == ["sdr", "type", "Power Supply"], sys.argv
for name, state in json.load(open(SCENARIO))["psus"]:
    print(f"{name:<16} | 50h | ok  | 10.1 | {state}")
"""


def gpu(index: int, name: str = A800, **fields: Any) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index:08x}-1111-2222-3333-444455556666",
        "name": name,
        "power_limit": "400.00",
        "ecc_mode": "Enabled",
        "ecc_errors": "0",
        "remap": "0, 0",
        "temp": 34,
        "burn_temp": 70 + index,
        **fields,
    }


HEALTHY_A800: dict[str, Any] = {
    "driver": "535.129.03",
    "gpus": [gpu(i) for i in range(8)],
    "psus": [["PS1 Status", "Presence detected"], ["PS2 Status", "Presence detected"]],
}

HEALTHY_RTX4090: dict[str, Any] = {
    "driver": "550.54.15",
    # Consumer cards: no ECC and no row remapper, so nvidia-smi answers "[N/A]".
    "gpus": [
        gpu(i, RTX4090, power_limit="450.00", ecc_mode="[N/A]", ecc_errors="[N/A]", remap="[N/A], [N/A]")
        for i in range(8)
    ],
    "psus": [["PS1 Status", "Presence detected"], ["PS2 Status", "Presence detected"]],
}


def node_check(
    tmp_path: Path,
    scenario: dict[str, Any],
    *,
    expect_name: str = A800,
    power_limit_w: int = 400,
    driver_wait_s: float = 1,
) -> tuple[int, dict[str, Any]]:
    """Run the program with only the fakes (less the scenario's "missing" tools) and `sleep` on PATH; the operator's
    driver is ready unless the scenario says "operator_driver": "absent"."""
    driver_ready = tmp_path / "validations" / "driver-ready"
    driver_ready.parent.mkdir()
    if scenario.get("operator_driver") != "absent":
        driver_ready.touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(json.dumps(scenario))
    for tool, body in {"nvidia-smi": FAKE_NVIDIA_SMI, "ipmitool": FAKE_IPMITOOL}.items():
        if tool not in scenario.get("missing", []):
            script = bin_dir / tool
            script.write_text(f"#!{sys.executable}\nSCENARIO = {str(scenario_file)!r}\n{body}")
            script.chmod(0o755)
    sleep = shutil.which("sleep")
    assert sleep is not None
    (bin_dir / "sleep").symlink_to(sleep)
    env = {"PATH": str(bin_dir)}
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), "--node", "gpu-a800-01", "--expect-name", expect_name, "--expect-count", "8",
         "--min-driver", "535.104.05", "--max-temp-c", "85", "--power-limit-w", str(power_limit_w),
         "--burn-in-s", "1", "--burn-command", "sleep 30", "--sample-s", "0.2",
         "--driver-ready", str(driver_ready), "--driver-wait-s", str(driver_wait_s)],
        capture_output=True, text=True, env=env, timeout=30, check=False,
    )  # fmt: skip
    assert proc.stderr == "", proc.stderr  # never a traceback
    return proc.returncode, json.loads(proc.stdout)


def failed(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in report["checks"] if not c["ok"]}


def changed(base: dict[str, Any], gpu_index: int | None = None, **changes: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(base)
    if gpu_index is None:
        scenario.update(changes)
    else:
        scenario["gpus"][gpu_index].update(changes)
    return scenario


def test_should_pass_a_healthy_a800_node(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, HEALTHY_A800)
    assert (code, report["ok"], failed(report)) == (0, True, {})
    assert [c["name"] for c in report["checks"]] == [
        "driver-ready", "gpu-inventory", "driver", "power-limit", "ecc", "row-remap", "psu-redundancy", "burn-in",
    ]  # fmt: skip
    assert [g["index"] for g in report["gpus"]] == list(range(8))
    assert report["gpus"][0] == {"index": 0, "uuid": HEALTHY_A800["gpus"][0]["uuid"], "name": A800, "max_temp_c": 70}
    assert report["max_temp_c"] == 77.0
    assert report["node"] == "gpu-a800-01"
    assert report["check_version"] == hashlib.sha256(PROGRAM.read_bytes()).hexdigest()[:12]


def test_should_fail_a_node_whose_operator_driver_never_becomes_ready_and_touch_no_gpu(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, {**HEALTHY_A800, "operator_driver": "absent"}, driver_wait_s=0.5)
    assert code == 1
    assert failed(report)["driver-ready"].startswith("the GPU Operator's driver was not ready within 0.5 s (")
    assert {name for name, detail in failed(report).items() if detail == "skipped: driver-ready failed"} == {
        "gpu-inventory", "driver", "power-limit", "ecc", "row-remap", "burn-in"}
    assert report["gpus"] == []


def test_should_wait_for_the_driver_that_arrives_while_the_check_waits(tmp_path: Path) -> None:
    marker = tmp_path / "validations" / "driver-ready"
    arrives = threading.Timer(0.5, lambda: marker.touch())
    arrives.start()
    try:
        code, report = node_check(tmp_path, {**HEALTHY_A800, "operator_driver": "absent"}, driver_wait_s=20)
    finally:
        arrives.cancel()
    assert (code, failed(report)) == (0, {})


def test_should_pass_a_healthy_rtx4090_node_without_ecc_or_row_remapping(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, HEALTHY_RTX4090, expect_name=RTX4090, power_limit_w=450)
    assert (code, report["ok"], failed(report)) == (0, True, {})
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["row-remap"] == "not supported"
    assert details["ecc"] == "ECC enabled on 0 of 8 GPUs, 0 errors"


def test_should_skip_the_psu_check_and_still_pass_when_ipmitool_is_missing(tmp_path: Path) -> None:
    code, report = node_check(tmp_path, changed(HEALTHY_A800, missing=["ipmitool"]))
    assert (code, report["ok"]) == (0, True)
    assert {"name": "psu-redundancy", "ok": True, "detail": "ipmitool not found: skipped"} in report["checks"]


SKIPPED_AFTER_INVENTORY = {"burn-in": "skipped: gpu-inventory failed"}
GARBAGE = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure..."


@pytest.mark.parametrize(
    ("scenario", "expected_failures"),
    [
        pytest.param(
            changed(HEALTHY_A800, gpus=HEALTHY_A800["gpus"][:7]),
            {"gpu-inventory": "7 of 8 GPUs", **SKIPPED_AFTER_INVENTORY},
            id="should fail when a GPU is missing",
        ),
        pytest.param(
            changed(HEALTHY_A800, 3, name="NVIDIA A100-SXM4-80GB"),
            {
                "gpu-inventory": "GPU 3 is 'NVIDIA A100-SXM4-80GB', expected 'NVIDIA A800-SXM4-80GB'",
                **SKIPPED_AFTER_INVENTORY,
            },
            id="should fail when a GPU is the wrong model",
        ),
        pytest.param(
            changed(HEALTHY_A800, 5, burn_temp=91),
            {"burn-in": "GPU 5 reached 91 C (limit 85 C)"},
            id="should fail when a GPU passes the temperature limit under load",
        ),
        pytest.param(
            changed(HEALTHY_A800, 2, throttle=["hw_thermal_slowdown"]),
            {"burn-in": "GPU 2 throttled: hw_thermal_slowdown"},
            id="should fail when a GPU throttles for heat under load",
        ),
        pytest.param(
            changed(changed(HEALTHY_A800, reasons="clocks_event_reasons"), 4, throttle=["hw_power_brake_slowdown"]),
            {"burn-in": "GPU 4 throttled: hw_power_brake_slowdown"},
            id="should read throttle reasons under their newer name when the driver knows only that",
        ),
        pytest.param(
            changed(HEALTHY_A800, psus=[["PS1 Status", "Presence detected"], ["PS2 Status", "Failure detected"]]),
            {"psu-redundancy": "PS2 Status: Failure detected; only 1 healthy PSU(s), redundancy needs 2"},
            id="should fail when a PSU has failed",
        ),
        pytest.param(
            changed(HEALTHY_A800, 6, power_limit="350.00"),
            {"power-limit": "expected 400 W: GPU 6 at 350.00 W"},
            id="should fail when a GPU's power limit is not the planned one",
        ),
        pytest.param(
            changed(HEALTHY_A800, 1, remap="0, 1"),
            {"row-remap": "GPU 1 row remap pending (needs a reset)"},
            id="should fail when a row remap is pending",
        ),
        pytest.param(
            changed(HEALTHY_A800, missing=["nvidia-smi"]),
            {
                "gpu-inventory": "nvidia-smi not found",
                "driver": "skipped: no GPU data",
                "power-limit": "skipped: no GPU data",
                "ecc": "skipped: no GPU data",
                "row-remap": "nvidia-smi not found",
                **SKIPPED_AFTER_INVENTORY,
            },
            id="should fail every GPU check when nvidia-smi is missing",
        ),
        pytest.param(
            changed(HEALTHY_A800, garbage=GARBAGE),
            {
                "gpu-inventory": f"unparseable nvidia-smi output: {GARBAGE[:60]}",
                "driver": "skipped: no GPU data",
                "power-limit": "skipped: no GPU data",
                "ecc": "skipped: no GPU data",
                "row-remap": f"unparseable nvidia-smi output: {GARBAGE[:60]}",
                **SKIPPED_AFTER_INVENTORY,
            },
            id="should fail with the output quoted when nvidia-smi says something unreadable",
        ),
    ],
)
def test_should_fail_the_node_and_name_the_check(
    tmp_path: Path, scenario: dict[str, Any], expected_failures: dict[str, str]
) -> None:
    code, report = node_check(tmp_path, scenario)
    assert (code, report["ok"]) == (1, False)
    assert failed(report) == expected_failures


def test_should_record_each_gpus_hottest_reading_under_load(tmp_path: Path) -> None:
    _, report = node_check(tmp_path, changed(HEALTHY_A800, 5, burn_temp=91))
    assert [g["max_temp_c"] for g in report["gpus"]] == [70, 71, 72, 73, 74, 91, 76, 77]
    assert report["max_temp_c"] == 91
