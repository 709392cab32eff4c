"""`gpuctl acceptance` through Typer: plan from the stack file and a targets file, status and report of a campaign."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.site.acceptance import DrillKind
from runbooks.acceptance.cli import app
from runbooks.acceptance.targets import placed
from tests.builders import REPO, copy_project, parse, prod_values
from tests.runbooks.acceptance.test_campaign import KEY, World

TARGETS: dict[str, Any] = {
    "node_failure": {"node": "gpu-a800-05", "bmc_password_file": "/etc/gpucluster/bmc-password",
                     "exporter": "http://gpu-a800-05:9400/metrics"},
    "network_partition": {"node": "gpu-a800-06", "interface": "ens1f0", "exporter": "http://gpu-a800-06:9400/metrics"},
    "storage_jitter": {"node": "gpu-a800-06", "interface": "ens2f0"},
    "model_hot_swap": {"model": "qwen2-5-72b", "new_version": 2,
                       "to_new": ["kubectl", "-n", "inference", "set", "image", "deploy/qwen2-5-72b", "vllm=new"],
                       "to_old": ["kubectl", "-n", "inference", "rollout", "undo", "deploy/qwen2-5-72b"]},
    "loads": {"gateway_url": "https://llm.example.internal", "model": "qwen2-5-72b", "hot_dir": "/mnt/hot/acceptance"},
}


def project(tmp_path: Path, targets: dict[str, Any]) -> tuple[Path, Path]:
    def declared(config: dict[str, Any]) -> None:
        config["gpu-cluster:acceptance"] = {"peak_source": "declared"}

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


def test_should_arm_a_timer_on_the_node_before_cutting_its_network() -> None:
    site = parse(prod_values())
    partition = placed(site, TARGETS, Path("/var/lib/gpuctl/switches"))[DrillKind.NETWORK_PARTITION].fault
    node = next(n for g in site.node_groups for n in g.nodes if n.name == "gpu-a800-06")
    ssh = ("ssh", "-o", "BatchMode=yes", f"{site.ssh_user}@{node.ssh_host}", "--")
    assert partition.inject[1:] == (  # [0] holds the node against the health controller (test_drill_hold.py)
        (*ssh, "systemd-run", "--on-active=1800s", "--unit=gpucluster-drill-network-partition",
         "ip", "link", "set", "dev", "ens1f0", "up"),
        (*ssh, "ip", "link", "set", "dev", "ens1f0", "down"))
    assert partition.undo[-2] == (*ssh, "systemctl", "stop", "gpucluster-drill-network-partition.timer")
    power = placed(site, TARGETS, Path("/var/lib/gpuctl/switches"))[DrillKind.NODE_FAILURE].fault
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
