"""Slurm rendering rules, checked on the rendered text and commands (real daemons: test_slurm_real.py)."""

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.monitoring.prometheus import slurm_scrape_config
from components.site.site import Site
from components.site.wellknown import HPC_JOB_MAPPING_DIR
from components.slurm.conf import (
    real_memory_mib,
    render_accounting_commands,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from components.slurm.scripts import (
    EXPORTER_UNIT,
    epilog_path,
    mover_path,
    render_epilog,
    render_exporter_unit,
    render_prolog,
    render_tier_mounts,
    systemd_path_unit,
)
from components.storage.tiers import NFS_MOUNT_OPTIONS, team_shares
from tests.builders import parse, problems, with_changes

GOLDEN = Path(__file__).parent / "golden"
KUBERNETES_NODES = ["gpu-a800-11", "gpu-a800-12", "gpu-4090-01", "gpu-4090-02", "gpu-4090-03", "gpu-4090-04"]


def node_lines(conf: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^NodeName=(\S+) .*$", conf, re.MULTILINE)}


def partition_nodes(conf: str) -> dict[str, list[str]]:
    found = re.finditer(r"^PartitionName=(\S+) Nodes=(\S+)", conf, re.MULTILINE)
    return {m.group(1): m.group(2).split(",") for m in found}


def qos_settings(site: Site) -> dict[str, dict[str, str]]:
    """QoS name -> the settings its `modify qos ... set` command writes."""
    found = {}
    for command in render_accounting_commands(site):
        if command[2:4] == ["modify", "qos"]:
            name = command[command.index("where") + 1].removeprefix("name=")
            found[name] = dict(arg.split("=", 1) for arg in command[command.index("set") + 1:])
    return found


def accounts(site: Site) -> list[str]:
    (names,) = [c[4] for c in render_accounting_commands(site) if c[2:4] == ["add", "account"]]
    return names.split(",")


Render = Callable[[Site], str]


@pytest.mark.parametrize(
    ("file", "render"),
    [
        pytest.param("slurm.conf", render_slurm_conf, id="prod slurm.conf matches its golden copy"),
        pytest.param("gres.conf", render_gres_conf, id="prod gres.conf matches its golden copy"),
        pytest.param("cgroup.conf", lambda _: render_cgroup_conf(), id="cgroup.conf matches its golden copy"),
        pytest.param("slurmdbd.conf", render_slurmdbd_conf, id="prod slurmdbd.conf matches its golden copy"),
        pytest.param("prolog.sh", lambda _: render_prolog(HPC_JOB_MAPPING_DIR),
                     id="prod prolog matches its golden copy"),
        pytest.param("epilog.sh", lambda site: render_epilog(site, HPC_JOB_MAPPING_DIR),
                     id="prod epilog matches its golden copy"),
    ],
)
def test_should_render_prod_files_as_reviewed(prod: dict[str, Any], file: str, render: Render) -> None:
    assert render(parse(prod)) == (GOLDEN / file).read_text()


def test_should_put_slurm_and_flex_pool_nodes_in_partitions_per_gpu_type_and_pool(prod: dict[str, Any]) -> None:
    conf = render_slurm_conf(parse(prod))
    assert partition_nodes(conf) == {
        "a800-train": [f"gpu-a800-{i:02}" for i in range(1, 9)],
        "a800-flex": ["gpu-a800-09", "gpu-a800-10"],
    }
    assert "PartitionName=a800-train Nodes=" in conf and " Default=YES " in conf.split("PartitionName=a800-train")[1]


def partition_allow_qos(conf: str) -> dict[str, str | None]:
    found = re.finditer(r"^PartitionName=(\S+) .*?(?:AllowQos=(\S+))?$", conf, re.MULTILINE)
    return {m.group(1): m.group(2) for m in found}


def test_should_admit_on_the_flex_partition_only_the_qos_a_lend_may_requeue(prod: dict[str, Any]) -> None:
    conf = render_slurm_conf(parse(prod))
    assert partition_allow_qos(conf) == {"a800-train": None, "a800-flex": "train_preemptible"}
    # A job naming only partitions that refuse its QoS is refused at submission, not left pending.
    assert "\nEnforcePartLimits=ANY\n" in conf


@pytest.mark.parametrize(
    ("flex_qos", "expected"),
    [
        pytest.param(["train_preemptible", "train_normal"],
                     ["slurm.flex_qos[1]: train_normal is not a QoS a lend may requeue (those the inference class "
                      "preempts in scheduling.classes: train_preemptible): its jobs on a flex node would hold it "
                      "against inference at a peak"], id="rejects a flex QoS inference does not preempt"),
        pytest.param([], ["slurm.flex_qos: empty, but the flex partitions need a QoS to admit: name one a lend may "
                          "requeue (those the inference class preempts: train_preemptible)"],
                     id="rejects a flex partition that admits nothing"),
    ],
)
def test_should_reject_a_flex_partition_admitting_work_a_lend_may_not_requeue(
        prod: dict[str, Any], flex_qos: list[str], expected: list[str]) -> None:
    assert problems(with_changes(prod, slurm__flex_qos=flex_qos)) == expected


def test_should_not_judge_flex_qos_on_a_site_without_flex_nodes(prod: dict[str, Any]) -> None:
    # No flex partition, nothing to lend; the lending rules want a flex pool's models no more either.
    site = parse(with_changes(prod, node_groups__1__pool="slurm", slurm__flex_qos=["train_normal"],
                              inference__models__0__lent_replicas=0))
    assert "AllowQos" not in render_slurm_conf(site)


@pytest.mark.parametrize("node", KUBERNETES_NODES, ids=lambda n: f"kubernetes-pool node {n} is not in Slurm")
def test_should_leave_kubernetes_pool_nodes_out_of_slurm(prod: dict[str, Any], node: str) -> None:
    site = parse(prod)
    assert node not in render_slurm_conf(site)
    assert node not in render_gres_conf(site)


def test_should_add_a_node_group_moved_to_the_flex_pool_with_its_own_gpu_type(prod: dict[str, Any]) -> None:
    # A lent RTX 4090 must serve a model's replicas, and the A800 model servers must leave the teams some GPUs.
    site = parse(with_changes(prod, node_groups__3__pool="flex", inference__models__0__replicas__max=2,
                              inference__models__1__lent_replicas=8))
    conf = render_slurm_conf(site)
    assert partition_nodes(conf)["rtx4090-flex"] == ["gpu-4090-01", "gpu-4090-02", "gpu-4090-03", "gpu-4090-04"]
    assert "Gres=gpu:rtx4090:8" in node_lines(conf)["gpu-4090-01"]


def test_should_describe_each_node_with_real_cpus_memory_less_reserve_and_gpus(prod: dict[str, Any]) -> None:
    site = parse(prod)
    line = node_lines(render_slurm_conf(site))["gpu-a800-01"]
    # 2048 GiB x 1024 MiB x (1 - 5 % OS reserve) = 1992294.4 MiB, rounded down.
    assert real_memory_mib(site, site.node_groups[0]) == 1992294
    assert line == ("NodeName=gpu-a800-01 NodeAddr=10.20.1.11 CPUs=128 RealMemory=1992294 Gres=gpu:a800:8 "
                    "State=UNKNOWN")


def test_should_bind_every_gpu_to_its_device_file(prod: dict[str, Any]) -> None:
    # The RTX 4090s go to Slurm, so the model they serve goes.
    rtx_to_slurm = with_changes(prod, node_groups__3__pool="slurm", inference__models=prod["inference"]["models"][:1],
                                inference__models__0__replicas__max=2)
    gres = render_gres_conf(parse(rtx_to_slurm))
    assert "Name=gpu Type=rtx4090 File=/dev/nvidia[0-7]" in gres
    assert "AutoDetect=off" in gres


@pytest.mark.parametrize(
    "setting",
    [
        "SelectType=select/cons_tres", "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity",
        "PreemptType=preempt/qos", "PreemptMode=REQUEUE", "PriorityType=priority/multifactor",
        "PriorityWeightFairshare=10000", "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageTRES=gres/gpu", "AccountingStorageEnforce=associations,limits,qos", "GresTypes=gpu",
        "DefMemPerGPU=98304", "Prolog=/etc/slurm/prolog.sh", "Epilog=/etc/slurm/epilog.sh", "PrologFlags=Alloc",
    ],
    ids=lambda s: f"slurm.conf sets {s}",
)
def test_should_set_the_scheduling_contract(prod: dict[str, Any], setting: str) -> None:
    assert setting in render_slurm_conf(parse(prod)).splitlines()


@pytest.mark.parametrize("never", ["inference", "critical"], ids=lambda q: f"no QoS preempts {q}")
def test_should_never_list_inference_or_critical_in_a_preempt_list(prod: dict[str, Any], never: str) -> None:
    settings = qos_settings(parse(prod))
    assert set(settings) == {"train_preemptible", "train_normal", "train_high", "inference", "critical"}
    assert all(never not in s.get("preempt", "").split(",") for s in settings.values())


def test_should_let_higher_training_qos_preempt_lower_ones(prod: dict[str, Any]) -> None:
    settings = qos_settings(parse(prod))
    assert settings["train_high"]["preempt"] == "train_normal,train_preemptible"
    assert settings["train_normal"]["preempt"] == "train_preemptible"
    assert "preempt" not in settings["train_preemptible"]
    priorities = [int(settings[q]["priority"]) for q in ("train_preemptible", "train_normal", "train_high")]
    assert priorities == sorted(priorities) and len(set(priorities)) == 3


@pytest.mark.parametrize(
    ("stage", "teams"),
    [
        pytest.param("platform", [], id="platform, the first stage, makes no team account"),
        pytest.param("canary", ["nlp-foundation", "speech"], id="canary makes accounts for its 2 teams only"),
        pytest.param("half", ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm"],
                     id="half adds the 4 half-stage teams"),
        pytest.param("full", ["nlp-foundation", "speech", "vision", "multimodal", "rl", "code-llm", "safety", "recsys",
                              "bio-ai", "robotics", "agents", "eval"], id="full makes all 12"),
    ],
)
def test_should_make_accounts_only_for_onboarded_teams(prod: dict[str, Any], stage: str, teams: list[str]) -> None:
    # The platform account at every stage: the operators' acceptance jobs need one before any team exists.
    assert accounts(parse(with_changes(prod, stage=stage))) == ["platform", *teams]


def test_should_grant_teams_the_training_qos_only(prod: dict[str, Any]) -> None:
    grants = [c for c in render_accounting_commands(parse(prod)) if c[2:4] == ["modify", "account"]]
    team = dict(arg.split("=", 1) for arg in grants[0][grants[0].index("set") + 1:])
    root = dict(arg.split("=", 1) for arg in grants[-1][grants[-1].index("set") + 1:])
    # inference and critical are the operators' (root's): a team's training cannot take their priority.
    assert team == {"qos": "train_high,train_normal,train_preemptible", "defaultqos": "train_normal"}
    assert "name=root" in grants[-1] and root["qos"].startswith("critical,inference,")


def test_should_set_each_teams_fairshare_from_the_spec(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, stage="half", teams__1__fairshare=3))
    shares = [(c[5], c[-1]) for c in render_accounting_commands(site)
              if c[2:4] == ["modify", "account"] and c[-1].startswith("fairshare=")]
    assert shares == [("name=nlp-foundation,vision,multimodal,rl,code-llm", "fairshare=1"),
                      ("name=speech", "fairshare=3")]


def test_should_render_the_slurm_qos_from_the_one_table_only(prod: dict[str, Any]) -> None:
    # Kubernetes-only classes (production, staging, dev) never become QoS, nor appear in a preempt list.
    settings = qos_settings(parse(prod))
    assert list(settings) == ["train_preemptible", "train_normal", "train_high", "inference", "critical"]
    assert settings["inference"] == {"priority": "50000", "preempt": "train_preemptible"}


def test_should_give_no_grace_to_a_qos_another_preempts_and_kill_after_killwait(prod: dict[str, Any]) -> None:
    site = parse(prod)
    graced = {name for name, settings in qos_settings(site).items() if settings.get("gracetime") == "0"}
    # Every QoS in some preempt list, and only those: inference and critical are never preempted.
    assert graced == {"train_preemptible", "train_normal", "train_high"}
    assert "\nKillWait=5\n" in render_slurm_conf(site)


def run_script(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script)], env={**os.environ, **env}, capture_output=True, text=True, timeout=10)


def test_should_name_the_job_scripts_where_the_spec_puts_them(prod: dict[str, Any], tmp_path: Path) -> None:
    site = parse(with_changes(prod, slurm__scripts_dir=str(tmp_path / "etc")))
    conf = render_slurm_conf(site).splitlines()
    assert f"Prolog={tmp_path}/etc/prolog.sh" in conf and f"Epilog={tmp_path}/etc/epilog.sh" in conf


def test_should_map_each_gpu_of_the_job_to_its_id_in_the_prolog(tmp_path: Path) -> None:
    prolog = tmp_path / "prolog.sh"
    prolog.write_text(render_prolog(str(tmp_path / "map")))
    prolog.chmod(0o755)
    assert run_script(prolog, SLURM_JOB_ID="41", SLURM_JOB_GPUS="0,3").returncode == 0
    assert {f.name: f.read_text() for f in (tmp_path / "map").iterdir()} == {"0": "41\n", "3": "41\n"}


def test_should_exit_0_and_write_nothing_for_a_job_without_gpus(tmp_path: Path) -> None:
    prolog = tmp_path / "prolog.sh"
    prolog.write_text(render_prolog(str(tmp_path / "map")))
    prolog.chmod(0o755)
    assert run_script(prolog, SLURM_JOB_ID="41", SLURM_JOB_GPUS="").returncode == 0
    assert not (tmp_path / "map").exists()


def epilog_in(tmp_path: Path, prod: dict[str, Any], mover: str) -> tuple[Path, Site]:
    """The epilog of a test stack whose folders are under tmp_path (mapping files in tmp_path/map), its mover a
    stand-in Python script."""
    site = parse(with_changes(
        prod, slurm__scripts_dir=str(tmp_path / "etc"), slurm__programs_dir=str(tmp_path / "lib"),
        slurm__log_dir=str(tmp_path / "log"), storage__nfs_hot__mount_root=str(tmp_path / "hot"),
        storage__ceph_cold__mount_path=str(tmp_path / "cold")))
    for directory in ("etc", "lib", "log", "map", "cold"):
        (tmp_path / directory).mkdir()
    epilog = Path(epilog_path(site))
    epilog.write_text(render_epilog(site, str(tmp_path / "map")))
    epilog.chmod(0o755)
    Path(mover_path(site)).write_text(mover)
    return epilog, site


def test_should_unmap_only_the_ending_jobs_gpus_in_the_epilog(tmp_path: Path, prod: dict[str, Any]) -> None:
    epilog, _ = epilog_in(tmp_path, prod, "")
    for gpu, job in (("0", "41"), ("1", "41"), ("2", "42")):
        (tmp_path / "map" / gpu).write_text(f"{job}\n")
    assert run_script(epilog, SLURM_JOB_ID="41", SLURM_JOB_GPUS="0,1,2", SLURM_JOB_ACCOUNT="root").returncode == 0
    assert sorted(f.name for f in (tmp_path / "map").iterdir()) == ["2"]


def test_should_return_at_once_while_the_teams_mover_runs_detached(tmp_path: Path, prod: dict[str, Any]) -> None:
    prod = with_changes(prod, stage="canary")  # speech onboarded
    gate, done = tmp_path / "gate", tmp_path / "mover-args"
    # The stand-in mover blocks until the test opens the gate, as a long copy would.
    epilog, site = epilog_in(tmp_path, prod, (
        f"import os, sys, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
        f"open({str(done)!r}, 'w').write(' '.join(sys.argv[1:]))\n"))
    (server,) = [s.server for s in team_shares(site) if s.team == "speech"]
    ((tmp_path / "hot") / server / "speech").mkdir(parents=True)
    started = time.monotonic()
    assert run_script(epilog, SLURM_JOB_ID="41", SLURM_JOB_ACCOUNT="speech").returncode == 0
    assert time.monotonic() - started < 3
    gate.touch()
    deadline = time.monotonic() + 10
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.read_text() == (f"--hot {tmp_path}/hot/{server} --cold {tmp_path}/cold --keep 3 "
                                "--archive-after-days 7 --max-checkpoint-gib 2048 --max-run-gib 8192 --deadline-s 7200")


def test_should_keep_the_mover_alive_when_slurmd_kills_the_epilogs_process_group(
        tmp_path: Path, prod: dict[str, Any]) -> None:
    prod = with_changes(prod, stage="canary")  # speech onboarded
    done = tmp_path / "mover-ran"
    # Slow to start, as python3 is on a loaded node: the kill below lands before the mover would have got going.
    epilog, site = epilog_in(tmp_path, prod, f"import time\ntime.sleep(0.5)\nopen({str(done)!r}, 'w').close()\n")
    (server,) = [s.server for s in team_shares(site) if s.team == "speech"]
    ((tmp_path / "hot") / server / "speech").mkdir(parents=True)
    for _ in range(20):
        done.unlink(missing_ok=True)
        # As slurmd runs an epilog (run_command.c): in a process group of its own, killed whole once it exits.
        env = {**os.environ, "SLURM_JOB_ID": "41", "SLURM_JOB_ACCOUNT": "speech"}
        script = subprocess.Popen([str(epilog)], env=env, process_group=0)
        assert script.wait(timeout=15) == 0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.exists(), (tmp_path / "log" / "checkpoint-mover.log").read_text()


def test_should_bound_the_mover_and_never_give_it_a_metrics_file(prod: dict[str, Any]) -> None:
    epilog = render_epilog(parse(prod), HPC_JOB_MAPPING_DIR)
    # Stopped 10 minutes past the spec's mover deadline (120 minutes by default).
    assert "setsid -f timeout --kill-after=60 7800 sh -c" in epilog
    assert "--max-checkpoint-gib 2048 --max-run-gib 8192 --deadline-s 7200" in epilog
    assert "--metrics-file" not in epilog


def test_should_mount_each_nfs_export_root_under_the_hot_mount_root_as_pods_do(prod: dict[str, Any]) -> None:
    units = render_tier_mounts(parse(prod), NFS_MOUNT_OPTIONS, "ckpt-cold")
    unit = units["mnt-ckpt\\x2dhot-nfs\\x2dhot\\x2d02.dc1.internal.mount"].splitlines()
    assert {"What=nfs-hot-02.dc1.internal:/exports", "Where=/mnt/ckpt-hot/nfs-hot-02.dc1.internal", "Type=nfs",
            f"Options=_netdev,{','.join(NFS_MOUNT_OPTIONS)}"} <= set(unit)
    assert len(units) == 3


def test_should_mount_the_cold_cephfs_by_name_with_no_address_or_secret(prod: dict[str, Any]) -> None:
    unit = render_tier_mounts(parse(prod), NFS_MOUNT_OPTIONS, "ckpt-cold")["mnt-ckpt\\x2dcold.mount"]
    assert {"What=:/", "Where=/mnt/ckpt-cold", "Type=ceph", "Options=_netdev,name=slurm-nodes,fs=ckpt-cold,noatime"} \
        <= set(unit.splitlines())
    assert "secret" not in unit


def test_should_follow_moved_mount_points_in_the_spec(prod: dict[str, Any]) -> None:
    moved = with_changes(prod, storage__nfs_hot__mount_root="/ckpt/hot", storage__ceph_cold__mount_path="/ckpt/cold")
    site = parse(moved)
    assert set(render_tier_mounts(site, NFS_MOUNT_OPTIONS, "ckpt-cold")) == {
        "ckpt-hot-nfs\\x2dhot\\x2d01.dc1.internal.mount", "ckpt-hot-nfs\\x2dhot\\x2d02.dc1.internal.mount",
        "ckpt-cold.mount"}
    assert 'hot_root=/ckpt/hot cold_root=/ckpt/cold' in render_epilog(site, HPC_JOB_MAPPING_DIR)


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze: apt-get install systemd")
def test_should_write_units_systemd_accepts(prod: dict[str, Any], tmp_path: Path) -> None:
    # systemd's own parser: unknown keys, bad values, a mount unit named other than its Where=, a missing ExecStart
    # binary all fail verify.
    site = parse(prod)
    units = {**render_tier_mounts(site, NFS_MOUNT_OPTIONS, "ckpt-cold"), EXPORTER_UNIT: render_exporter_unit(site)}
    for name, content in units.items():
        (tmp_path / name).write_text(content)
    assert SYSTEMD_ANALYZE is not None
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", *(str(tmp_path / name) for name in units)],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_should_run_the_exporter_unprivileged_on_the_spec_address_and_port(prod: dict[str, Any]) -> None:
    unit = render_exporter_unit(parse(with_changes(prod, slurm__exporter_port=9400)))
    assert ("ExecStart=/usr/bin/python3 /usr/local/lib/gpucluster/slurm_exporter.py --listen 10.20.1.2 --port 9400 "
            "--interval 30") in unit
    unit = render_exporter_unit(parse(with_changes(prod, slurm__exporter_address="10.20.0.5")))
    assert "slurm_exporter.py --listen 10.20.0.5 --port" in unit
    assert "DynamicUser=yes" in unit and "ProtectSystem=strict" in unit


def test_should_poll_slurm_as_often_as_prometheus_scrapes_the_exporter(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, slurm__exporter_interval_s=7))
    assert shlex.split(render_exporter_unit(site).split("ExecStart=")[1].splitlines()[0])[-2:] == ["--interval", "7"]
    assert slurm_scrape_config(site)["scrape_interval"] == "7s"


@pytest.mark.parametrize(
    ("path", "unit"),
    [
        pytest.param("/mnt/ckpt-cold", "mnt-ckpt\\x2dcold.mount", id="escapes a dash"),
        pytest.param("/mnt/.x/a b", "mnt-.x-a\\x20b.mount", id="keeps an inner dot and escapes a space"),
        pytest.param("/.a/\u00fc", "\\x2ea-\\xc3\\xbc.mount", id="escapes a leading dot and each utf-8 byte"),
    ],
)
def test_should_name_a_mount_unit_as_systemd_escape_does(path: str, unit: str) -> None:
    assert systemd_path_unit(path, "mount") == unit


def on_one_host(prod: dict[str, Any], ports: list[int | None]) -> dict[str, Any]:
    """The first len(ports) Slurm nodes (gpu-a800-01, ...) on one host, each with the given slurmd port."""
    changes = {f"node_groups__0__nodes__{i}__ssh_host": "10.20.1.99" for i in range(len(ports))}
    changes |= {f"node_groups__0__nodes__{i}__slurmd_port": port for i, port in enumerate(ports)}
    return with_changes(prod, **changes)


def test_should_give_each_slurmd_on_a_shared_host_its_port_spool_pid_and_log(prod: dict[str, Any]) -> None:
    # Slurm's multiple-slurmd mode (slurm.conf(5) NodeName Port=, %n): what the loopback test stack names.
    conf = render_slurm_conf(parse(on_one_host(prod, [27001, 27002])))
    assert node_lines(conf)["gpu-a800-01"].startswith("NodeName=gpu-a800-01 NodeAddr=10.20.1.99 Port=27001 CPUs=")
    assert node_lines(conf)["gpu-a800-02"].startswith("NodeName=gpu-a800-02 NodeAddr=10.20.1.99 Port=27002 CPUs=")
    assert {"SlurmdSpoolDir=/var/spool/slurmd/%n", "SlurmdPidFile=/run/slurmd-%n.pid",
            "SlurmdLogFile=/var/log/slurm/slurmd-%n.log"} <= set(conf.splitlines())
    # One slurmd per host, as prod has it: the packages' own paths, and no Port= on any node.
    prod_conf = render_slurm_conf(parse(prod))
    assert "SlurmdPidFile=/run/slurmd.pid" in prod_conf.splitlines() and " Port=" not in prod_conf


@pytest.mark.parametrize("ports", [
    pytest.param([None, None], id="rejects two slurmd on one host on the default port"),
    pytest.param([27001, 27001], id="rejects two slurmd on one host on one port"),
    pytest.param([None, 6818], id="rejects a node port equal to another's default"),
])
def test_should_refuse_two_slurmd_on_one_host_and_port(prod: dict[str, Any], ports: list[int | None]) -> None:
    port = ports[1] or 6818
    assert problems(on_one_host(prod, ports)) == [
        f"node_groups[0].nodes[1].slurmd_port: gpu-a800-02's slurmd would listen on 10.20.1.99:{port}, as "
        "gpu-a800-01's does: give each Slurm node on one host a port of its own"]


def test_should_name_the_sites_slurm_user_munge_socket_and_pid_folder_in_both_daemons_files(
        prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, slurm__slurm_user="slurmadm", slurm__munge_socket="/var/run/munge/m.sock",
                              slurm__run_dir="/var/run/slurm"))
    conf, dbd = render_slurm_conf(site).splitlines(), render_slurmdbd_conf(site).splitlines()
    assert {"SlurmUser=slurmadm", "AuthInfo=socket=/var/run/munge/m.sock",
            "AccountingStoragePass=/var/run/munge/m.sock", "SlurmctldPidFile=/var/run/slurm/slurmctld.pid"} <= set(conf)
    # slurmdbd logs in to MariaDB as the user it runs as, over the socket: no password in the file.
    assert {"SlurmUser=slurmadm", "StorageUser=slurmadm", "AuthInfo=socket=/var/run/munge/m.sock",
            "PidFile=/var/run/slurm/slurmdbd.pid", "StorageHost=localhost"} <= set(dbd)
    assert not any(line.startswith(("StoragePass", "StoragePort")) for line in dbd)
