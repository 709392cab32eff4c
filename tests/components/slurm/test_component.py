"""The Slurm deployment's shell: files land byte for byte with their modes, accounting is idempotent."""

import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.facility.admission import Verdict
from components.slurm.conf import accounting_script
from components.slurm.install import (
    MUNGE_KEY,
    answers,
    controller_command,
    controller_files,
    install_script,
    installed_files,
    node_admission,
    node_command,
    node_files,
    restart_daemons,
    slurm_facts,
    slurm_user_step,
    start_node_services,
    tier_mounts,
)
from components.slurm.scripts import mover_path
from hosts import SLURM_EXPORTER
from tests.builders import parse, problems, with_changes


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
    ok = Verdict(True, "")
    assert node_files(site) == node_files(fewer)
    assert node_command(site, "gpu-a800-01", ok) == node_command(fewer, "gpu-a800-01", ok)
    server = f"{site.slurm.controller_host}:{site.slurm.slurmctld_port}"
    assert node_files(site)["/etc/default/slurmd"] == (f'SLURMD_OPTIONS="--conf-server {server}"\n', 0o644)
    assert "SlurmctldParameters=enable_configless" in controller_files(site)["/etc/slurm/slurm.conf"][0]


def test_should_keep_a_nodes_command_a_few_kilobytes(prod: dict[str, Any]) -> None:
    # The mover (44 kB) is copied by reference (components/slurm/component.py), never inside the command.
    site = parse(prod)
    script = install_script(node_files(site), node_command(site, "gpu-a800-01", Verdict(True, "")))
    assert mover_path(site) not in node_files(site)
    assert len(script) < 16_000, len(script)


def test_should_restart_slurmdbd_before_slurmctld_and_wait_for_each(tmp_path: Path, prod: dict[str, Any]) -> None:
    site = parse(prod)
    files = controller_files(site)
    assert files["/usr/local/lib/gpucluster/slurm_exporter.py"] == (SLURM_EXPORTER.read_text(), 0o644)
    assert "--port 9341" in files["/etc/systemd/system/gpucluster-slurm-exporter.service"][0]
    fake(tmp_path, "systemctl", f'echo "systemctl $@" >> {tmp_path}/calls')
    fake(tmp_path, "sacctmgr", f'echo "sacctmgr $*" >> {tmp_path}/calls; echo {site.site_name}')
    fake(tmp_path, "scontrol", f'echo "scontrol $*" >> {tmp_path}/calls; echo "Slurmctld(primary) at x is UP"')
    assert run(tmp_path, restart_daemons(site)).returncode == 0
    assert [" ".join(line.split()[:3]) for line in (tmp_path / "calls").read_text().splitlines()] == [
        "systemctl daemon-reload", "systemctl enable slurmdbd", "systemctl restart slurmdbd",
        "sacctmgr --noheader show", "systemctl restart slurmctld", "scontrol ping",
        "sacctmgr --noheader --parsable2", "scontrol reconfigure"]


def test_should_fail_a_deploy_whose_daemon_never_answers_naming_it(tmp_path: Path) -> None:
    result = run(tmp_path, answers("slurmctld (scontrol ping)", "false", tries=2) + " && echo reached")
    assert result.returncode == 1 and "reached" not in result.stdout
    assert result.stderr.strip() == "slurmctld (scontrol ping) does not answer (2 tries, 1 s apart)"


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        pytest.param(Verdict(True, ""), "update nodename=gpu-a800-03 state=resume",
                     id="should resume a validated node"),
        pytest.param(Verdict(False, "burn-in: GPU 3 reached 91 C"),
                     "update nodename=gpu-a800-03 state=drain reason=node check failed: burn-in: GPU 3 reached 91 C",
                     id="should drain a failed node with its reason"),
    ],
)
def test_should_admit_a_node_only_once_slurmctld_hears_from_it(tmp_path: Path, prod: dict[str, Any],
                                                               verdict: Verdict, expected: str) -> None:
    site = parse(prod)
    # Not responding (`*`) at first, then registered: the admission waits for it.
    fake(tmp_path, "sinfo", f'echo "$SLURM_CONF $*" >> {tmp_path}/sinfo; '
                            f'[ $(wc -l < {tmp_path}/sinfo) -ge 2 ] && echo idle || echo "idle*"')
    fake(tmp_path, "scontrol", f'printf "%s " "$SLURM_CONF" "$@" > {tmp_path}/scontrol')
    result = run(tmp_path, node_admission(site, "gpu-a800-03", verdict))
    assert result.returncode == 0, result.stderr
    conf = "/var/spool/slurmd/conf-cache/slurm.conf"
    assert (tmp_path / "sinfo").read_text().splitlines() == [
        f"{conf} --noheader --nodes=gpu-a800-03 --format=%T"] * 2
    assert (tmp_path / "scontrol").read_text().strip() == f"{conf} {expected}"


def test_should_install_the_job_scripts_on_every_node(prod: dict[str, Any]) -> None:
    files = node_files(parse(prod))
    assert files["/etc/slurm/prolog.sh"][1] == files["/etc/slurm/epilog.sh"][1] == 0o755
    assert files["/etc/apt/sources.list.d/gpucluster-slurm.list"][0].startswith("deb [signed-by=")


def test_should_write_mount_units_despite_backslashes_and_mount_them_before_slurmd(tmp_path: Path,
                                                                                 prod: dict[str, Any]) -> None:
    fake(tmp_path, "systemctl", f'echo "$@" >> {tmp_path}/systemctl')
    fake(tmp_path, "systemd-tmpfiles", f'echo "$@" >> {tmp_path}/tmpfiles')
    site = parse(prod)
    units = {f"{tmp_path}/{unit}": (content, 0o644) for unit, content in tier_mounts(site).items()}
    result = run(tmp_path, install_script(units, start_node_services(site)))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.mount")) == sorted(tier_mounts(site))
    calls = (tmp_path / "systemctl").read_text().splitlines()
    assert calls[0] == "daemon-reload"
    assert calls[1] == f"enable --now {' '.join(tier_mounts(site))}"
    assert calls[2:] == ["enable slurmd", "restart slurmd"]
    assert (tmp_path / "tmpfiles").read_text() == "--create /etc/tmpfiles.d/enroot.conf\n"  # enroot's directories


def test_should_read_the_munge_key_from_stdin_never_from_the_script(prod: dict[str, Any]) -> None:
    site = parse(prod)
    for script in (install_script(controller_files(site), ""), node_command(site, "gpu-a800-01", Verdict(True, ""))):
        assert MUNGE_KEY not in installed_files(script)[0]
    assert f"base64 -d > {MUNGE_KEY}.new" in node_command(site, "gpu-a800-01", Verdict(True, ""))


@pytest.mark.parametrize("version", ["22.05.8-4+deb12u3", "23.11.4-1.2ubuntu5"])
def test_should_accept_slurm_22_05_and_newer(prod: dict[str, Any], version: str) -> None:
    assert parse(with_changes(prod, slurm__package_version=version)).slurm.package_version == version


@pytest.mark.parametrize("version", ["21.08.8-2", "20.11.9-1"])
def test_should_refuse_slurm_below_22_05(prod: dict[str, Any], version: str) -> None:
    assert problems(with_changes(prod, slurm__package_version=version)) == [
        f"slurm.package_version: {version} is older than Slurm 22.05, the oldest release the site runs"]


def test_should_install_scripts_programs_and_the_database_user_where_the_spec_says(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, slurm__scripts_dir="/opt/slurm/etc", slurm__programs_dir="/opt/gpucluster",
                              slurm__slurm_user="slurmadm"))
    assert {"/opt/slurm/etc/prolog.sh", "/opt/slurm/etc/epilog.sh"} <= set(node_files(site))
    assert "/opt/gpucluster/slurm_exporter.py" in controller_files(site)
    assert "install -D -m 0644 \"$HOME/gpucluster-checkpoint_tiering.py\" /opt/gpucluster/checkpoint_tiering.py" in \
        node_command(site, "gpu-a800-01", Verdict(True, ""))
    command = controller_command(site)
    # slurmdbd logs in as the user it runs as (unix_socket), who owns its file and slurmctld's state.
    assert any("CREATE USER IF NOT EXISTS 'slurmadm'@'localhost' IDENTIFIED VIA unix_socket" in word
               for word in shlex.split(command))
    assert "chown slurmadm:slurmadm /etc/slurm/slurmdbd.conf && install -d -o slurmadm -g slurmadm" in command


@pytest.mark.parametrize(("known", "made"), [pytest.param("exit 1", True, id="should make a SlurmUser the host lacks"),
                                             pytest.param("exit 0", False, id="should leave a SlurmUser that exists")])
def test_should_make_slurm_user_a_system_user_only_when_missing(tmp_path: Path, prod: dict[str, Any], known: str,
                                                                made: bool) -> None:
    site = parse(with_changes(prod, slurm__slurm_user="slurmadm"))
    fake(tmp_path, "id", f'echo "$@" >> {tmp_path}/id; {known}')
    fake(tmp_path, "useradd", f'echo "$@" >> {tmp_path}/useradd')
    result = run(tmp_path, slurm_user_step(site))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "id").read_text() == "-u slurmadm\n"
    assert (tmp_path / "useradd").exists() is made
    if made:
        assert (tmp_path / "useradd").read_text() == \
            "--system --user-group --no-create-home --shell /usr/sbin/nologin slurmadm\n"


def test_should_make_slurm_user_before_anything_reads_or_chowns_to_it(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, slurm__slurm_user="slurmadm"))
    step = slurm_user_step(site)
    controller, node = controller_command(site), node_command(site, "gpu-a800-01", Verdict(True, ""))
    assert controller.index(step) < controller.index("chown slurmadm:slurmadm")
    # slurmd and the node's sinfo/scontrol read SlurmUser from slurm.conf and stop when the host lacks it.
    assert node.index(step) < node.index("systemctl restart slurmd") < node.index("sinfo")
