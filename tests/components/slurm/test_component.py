"""The Slurm deployment's shell: files land byte for byte with their modes, accounting is idempotent."""

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.facility.admission import Verdict
from components.slurm.conf import accounting_script
from components.slurm.install import (
    CONTROLLER_RESTART,
    admission_command,
    controller_files,
    install_script,
    node_command,
    node_files,
    slurm_facts,
    tier_mounts,
)
from hosts import CHECKPOINT_MOVER, SLURM_EXPORTER
from tests.builders import parse, with_changes


def fake(tmp_path: Path, name: str, script: str) -> None:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def run(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)


def test_should_install_each_file_byte_for_byte_with_its_mode(tmp_path: Path) -> None:
    fake(tmp_path, "systemctl", f'echo "$@" > {tmp_path}/restarted')
    files = {f"{tmp_path}/etc/slurm.conf": ("NodeName=a Gres=gpu:a800:8 # 'quotes' $(not run)\n", 0o644),
             f"{tmp_path}/etc/slurmdbd.conf": ("StorageUser=slurm\n", 0o600)}
    result = run(tmp_path, install_script(files, "systemctl restart slurmdbd slurmctld"))
    assert result.returncode == 0, result.stderr
    for name, (content, mode) in files.items():
        path = Path(name)
        assert path.read_text() == content
        assert stat.S_IMODE(path.stat().st_mode) == mode
    assert (tmp_path / "restarted").read_text() == "restart slurmdbd slurmctld\n"


@pytest.mark.parametrize(
    ("sacctmgr", "succeeds"),
    [
        pytest.param("echo ' Nothing new added.'; exit 1", True, id="should accept an add that finds it all there"),
        pytest.param("echo 'already exists'; exit 1", True, id="should accept an object that already exists"),
        pytest.param("echo 'Database is busy'; exit 1", False, id="should stop on any other failure"),
        pytest.param("echo 'sacctmgr: error: QOS Preemption loop detected'; exit 1", False,
                     id="should stop on a preemption loop"),
        pytest.param("exit 0", True, id="should accept a clean run"),
    ],
)
def test_should_apply_accounting_idempotently(tmp_path: Path, prod: dict[str, Any], sacctmgr: str,
                                              succeeds: bool) -> None:
    fake(tmp_path, "sacctmgr", sacctmgr)
    result = run(tmp_path, accounting_script(parse(prod)))
    assert (result.returncode == 0) is succeeds, result.stderr
    if not succeeds:
        # sacctmgr's own words reach the operator.
        assert result.stderr.strip() and result.stderr.strip() in sacctmgr


def test_should_drain_a_failed_node_with_its_reason() -> None:
    assert admission_command("gpu-a800-03", Verdict(False, "burn-in: GPU 3 reached 91 C")) == (
        "scontrol update nodename=gpu-a800-03 state=drain reason='node check failed: burn-in: GPU 3 reached 91 C'"
    )
    assert admission_command("gpu-a800-03", Verdict(True, "")).startswith("scontrol update nodename=gpu-a800-03 "
                                                                          "state=resume")


def test_should_report_the_qos_table_for_the_policy_pack(prod: dict[str, Any]) -> None:
    facts = slurm_facts(parse(prod))
    qos = {q["name"]: q for q in facts["qos"]}
    assert qos["train_high"]["preempt"] == ["train_normal", "train_preemptible"]
    assert all("inference" not in q["preempt"] and "critical" not in q["preempt"] for q in facts["qos"])
    assert {p["name"] for p in facts["partitions"]} == {"a800-train", "a800-flex"}


def test_should_keep_a_nodes_command_the_same_however_many_nodes(prod: dict[str, Any]) -> None:
    # Configless: nodes fetch the files from slurmctld, so a node's command never carries slurm.conf.
    site = parse(prod)
    fewer = parse(with_changes(prod, node_groups__0__nodes=prod["node_groups"][0]["nodes"][:1]))
    assert node_files(site) == node_files(fewer) and node_command(site) == node_command(fewer)
    server = f"{site.slurm.controller_host}:{site.slurm.slurmctld_port}"
    assert node_files(site)["/etc/default/slurmd"] == (f'SLURMD_OPTIONS="--conf-server {server}"\n', 0o644)
    assert "SlurmctldParameters=enable_configless" in controller_files(site)["/etc/slurm/slurm.conf"][0]


def test_should_install_and_start_the_exporter_on_the_controller(tmp_path: Path, prod: dict[str, Any]) -> None:
    files = controller_files(parse(prod))
    assert files["/usr/local/lib/gpucluster/slurm_exporter.py"] == (SLURM_EXPORTER.read_text(), 0o644)
    unit = files["/etc/systemd/system/gpucluster-slurm-exporter.service"][0]
    assert "--port 9341" in unit
    fake(tmp_path, "systemctl", f'echo "$@" >> {tmp_path}/systemctl')
    fake(tmp_path, "scontrol", "exit 0")
    assert run(tmp_path, CONTROLLER_RESTART).returncode == 0
    assert (tmp_path / "systemctl").read_text().splitlines() == [
        "daemon-reload", "enable gpucluster-slurm-exporter.service",
        "restart slurmdbd slurmctld gpucluster-slurm-exporter.service"]


def test_should_install_the_job_scripts_and_the_mover_on_every_node(prod: dict[str, Any]) -> None:
    files = node_files(parse(prod))
    assert files["/etc/slurm/prolog.sh"][1] == files["/etc/slurm/epilog.sh"][1] == 0o755
    assert files["/usr/local/lib/gpucluster/checkpoint_tiering.py"] == (CHECKPOINT_MOVER.read_text(), 0o644)


def test_should_write_mount_units_despite_backslashes_and_mount_them_before_slurmd(tmp_path: Path,
                                                                                 prod: dict[str, Any]) -> None:
    fake(tmp_path, "systemctl", f'echo "$@" >> {tmp_path}/systemctl')
    fake(tmp_path, "systemd-tmpfiles", f'echo "$@" >> {tmp_path}/tmpfiles')
    site = parse(prod)
    units = {f"{tmp_path}/{unit}": (content, 0o644) for unit, content in tier_mounts(site).items()}
    result = run(tmp_path, install_script(units, node_command(site)))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.mount")) == sorted(tier_mounts(site))
    calls = (tmp_path / "systemctl").read_text().splitlines()
    assert calls[0] == "daemon-reload"
    assert calls[1] == f"enable --now {' '.join(tier_mounts(site))}"
    assert calls[2:] == ["enable slurmd", "restart slurmd"]
    assert (tmp_path / "tmpfiles").read_text() == "--create /etc/tmpfiles.d/enroot.conf\n"  # enroot's directories
