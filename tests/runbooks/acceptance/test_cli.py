"""`gpuctl acceptance` through Typer: plan from the stack file and a targets file, status and report of a campaign."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.site.acceptance import DEFAULT_DRILLS
from runbooks.acceptance.cli import app
from tests.builders import REPO, copy_project, parse, prod_values
from tests.runbooks.acceptance.test_campaign import KEY, World
from tests.runbooks.acceptance.test_registry import TARGETS, production_faults


def project(tmp_path: Path, targets: dict[str, Any], **acceptance: Any) -> tuple[Path, Path]:
    def declared(config: dict[str, Any]) -> None:
        config["gpu-cluster:acceptance"] = {"peak_source": "declared", **acceptance}

    (tmp_path / "project").mkdir()
    directory = copy_project(tmp_path / "project", declared)
    shutil.copytree(REPO / "docs" / "sop", directory / "docs" / "sop")
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump(targets))
    return directory, tmp_path / "targets.yaml"


def gpuctl(directory: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--project-dir", str(directory), "--state-dir", str(directory / "state"),
                                      "--rollout-state-dir", str(directory / "rollout"), *args])
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


def test_should_plan_the_weeklong_campaign_with_each_drills_deadlines_and_sop(tmp_path: Path) -> None:
    directory, targets = project(tmp_path, TARGETS)
    code, text = gpuctl(directory, "plan", "--targets", str(targets))
    assert code == 0, text
    assert "campaign at time scale 1; peak (declared): 50 requests/s, 120 jobs/h, 2000 MiB/s; shock x3" in text
    assert "drill:network_partition" in text and "SOP docs/sop/network-partition.md" in text
    assert "shock                          3600.0 s  every load at 3x the peak" in text
    # The soak fills what the drills and the shock leave of 168 h.
    assert "soak                         " in text and "until 168 h (scaled)" in text


def test_should_refuse_a_targets_file_without_every_drill(tmp_path: Path) -> None:
    directory, targets = project(tmp_path, {k: v for k, v in TARGETS.items() if k != "storage_jitter"})
    code, text = gpuctl(directory, "plan", "--targets", str(targets))
    assert code == 2 and "targets: storage_jitter: missing (every drill of the spec needs its target)" in text


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param({"network_partition": {"node": "gpu-a800-06", "interface": "eth0; reboot"}},
                 "network_partition.interface: 'eth0; reboot' is not an interface name",
                 id="should refuse an interface a remote shell would read as a command"),
    pytest.param({"node_failure": {"node": "nowhere", "bmc_password_file": "/x"}},
                 "node_failure.node: no node named 'nowhere' in the spec", id="should refuse a node not in the spec"),
    pytest.param({"node_failure": {"node": "gpu-a800-05", "bmc_password_file": "hunter2"}},
                 "node_failure.bmc_password_file: an absolute path to a root-only file is required",
                 id="should refuse a BMC password in place of its file"),
])
def test_should_refuse_a_target_that_names_no_safe_place(tmp_path: Path, change: dict[str, Any],
                                                         expected: str) -> None:
    directory, targets = project(tmp_path, {**TARGETS, **change})
    code, text = gpuctl(directory, "plan", "--targets", str(targets))
    assert code == 2 and expected in " ".join(text.split()), text


EXTRA_DRILL = {"kind": "disk_fill", "sop": "disk-fill", "hold_s": 60, "detect_within_s": 60, "recover_within_s": 60,
               "revert_after_s": 120}


@pytest.mark.parametrize(("drills", "sop_gone", "expected"), [
    pytest.param([*(d.model_dump(mode="json", exclude_none=True) for d in DEFAULT_DRILLS), EXTRA_DRILL], None,
                 "targets: acceptance.drills[4].kind: no drill module named 'disk_fill' in runbooks/acceptance/drills/ "
                 "(there are: model_hot_swap, network_partition, node_failure, storage_jitter)",
                 id="should refuse a drill of the spec that no module implements"),
    pytest.param(None, "storage-jitter.md", "runbooks.acceptance.drills.storage_jitter.DRILL.sop: "
                 "docs/sop/storage-jitter.md does not exist: a drill is one module plus its SOP",
                 id="should refuse a drill module whose SOP is gone"),
])
def test_should_refuse_a_drill_without_its_module_or_its_sop(tmp_path: Path, drills: list[dict[str, Any]] | None,
                                                              sop_gone: str | None, expected: str) -> None:
    directory, targets = project(tmp_path, TARGETS, **({"drills": drills} if drills else {}))
    if sop_gone:
        (directory / "docs" / "sop" / sop_gone).unlink()
    code, text = gpuctl(directory, "plan", "--targets", str(targets))
    assert code == 2 and expected in " ".join(text.split()), text


def test_should_arm_a_timer_on_the_node_before_cutting_its_network() -> None:
    site = parse(prod_values())
    partition = production_faults(Path("/var/lib/gpuctl/switches"))["network_partition"]
    node = next(n for g in site.node_groups for n in g.nodes if n.name == "gpu-a800-06")
    ssh = ("ssh", "-o", "BatchMode=yes", f"{site.ssh_user}@{node.ssh_host}", "--")
    assert partition.inject[1:] == (  # [0] holds the node against the health controller (test_drill_hold.py)
        (*ssh, "systemd-run", "--on-active=1800s", "--unit=gpucluster-drill-network-partition",
         "ip", "link", "set", "dev", "ens1f0", "up"),
        (*ssh, "ip", "link", "set", "dev", "ens1f0", "down"))
    assert partition.undo[-2] == (*ssh, "systemctl", "stop", "gpucluster-drill-network-partition.timer")
    power = production_faults(Path("/var/lib/gpuctl/switches"))["node_failure"]
    assert power.inject[-1][-3:] == ("chassis", "power", "off") and "-f" in power.inject[-1]
    # The node's drain is saved before the power goes and given back after it returns (a lent node stays lent).
    assert power.inject[1][-3:] == ("save", "gpu-a800-05", "/var/lib/gpuctl/switches/gpu-a800-05.slurm-state.json")
    assert power.undo[-2][-3:] == ("restore", "gpu-a800-05", "/var/lib/gpuctl/switches/gpu-a800-05.slurm-state.json")


def test_should_show_status_and_write_the_report_of_a_campaign(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(tmp_path)
    runner, _ = world.runner()
    runner.run("sha256:deployed", "canary")
    monkeypatch.setenv("GPUCTL_AUDIT_KEY", KEY.decode())
    code, text = gpuctl(tmp_path, "status")
    assert code == 0, text
    assert "passed (deployment sha256:deployed, stage canary, time scale 0.0002)" in text
    assert "drill:model_hot_swap: PASSED" in text and "failures logged: 4, 0 without an SOP" in text
    assert "shock inference errors: PASS - measured 0.00 % of " in " ".join(text.split())
    code, text = gpuctl(tmp_path, "report", "--out", str(tmp_path / "out"))
    assert code == 0, text
    assert (tmp_path / "out" / "report.png").stat().st_size > 10_000
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Verdict: **PASSED**" in report
    assert "- soak soak duration: PASS - measured " in report and "objective >= 0.72 s (soak_h 1 x time_scale " \
        "0.0002); source: the monotonic run time" in report
