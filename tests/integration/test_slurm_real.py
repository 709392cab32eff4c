"""The rendered prod Slurm configuration, judged by real Slurm 22.05 daemons on 127.0.0.1
(tests/harness/slurm_cluster.py)."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from components.scheduling.preemption import slurm_qos, team_qos
from components.slurm.conf import partitions
from components.slurm.install import installed_files
from components.storage.tiers import team_shares
from tests.builders import parse, prod_values
from tests.harness.daemons import wait_for
from tests.harness.slurm_cluster import CLIENT_TIMEOUT_S, Cluster, plan, slurm_marks

pytestmark = slurm_marks()


@pytest.fixture(scope="module")
def prod_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `gpuctl plan --out` writes for the prod stack."""
    return plan(prod_values(), tmp_path_factory.mktemp("prod") / "plan")


@pytest.mark.parametrize(
    ("extra", "accepted"),
    [
        pytest.param("", True, id="accepts the slurm.conf the prod plan wrote"),
        pytest.param("NoSuchOption=1\n", False, id="rejects an unknown key, so the check has teeth"),
    ],
)
def test_should_parse_prod_slurm_conf_in_a_real_client(prod_plan: Path, tmp_path: Path, extra: str,
                                                       accepted: bool) -> None:
    conf = prod_plan / "slurm" / "slurm.conf"
    if extra:  # the negative case: the plan's file with a key Slurm does not know added, beside its gres.conf
        for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
            shutil.copyfile(prod_plan / "slurm" / name, tmp_path / name)
        conf = tmp_path / "slurm.conf"
        conf.write_text(conf.read_text() + extra)
    result = subprocess.run(["scontrol", "show", "hostnames", "gpu-a800-[01-10]"], capture_output=True, text=True,
                            env={**os.environ, "SLURM_CONF": str(conf)}, timeout=CLIENT_TIMEOUT_S)
    assert (result.returncode == 0) is accepted, result.stderr
    if accepted:
        assert result.stdout.split() == [f"gpu-a800-{i:02}" for i in range(1, 11)]


def sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def test_should_run_the_files_gpuctl_plan_wrote_for_the_loopback_stack(slurm: Cluster) -> None:
    plan = slurm.plan_dir
    # slurmctld names the file it read; it and its neighbours are the plan's bytes, as the controller's deploy
    # installs them too.
    shown = dict(re.findall(r"^(\S+)\s+= (.*)$", slurm.run("scontrol", "show", "config").stdout, re.MULTILINE))
    assert Path(shown["SLURM_CONF"]) == slurm.conf_dir / "slurm.conf"
    (controller,) = (plan / "resources").glob("command-remote-Command--*-slurm-controller-config.json")
    installed, _ = installed_files(json.loads(controller.read_text())["inputs"]["create"])
    for name in ("slurm.conf", "gres.conf", "cgroup.conf", "slurmdbd.conf"):
        fed = sha256((slurm.conf_dir / name).read_bytes())
        assert fed == sha256((plan / "slurm" / name).read_bytes()) == sha256(installed[f"/etc/slurm/{name}"]), name
    # The job scripts slurmd runs are the node command's, at the paths the plan's slurm.conf names.
    (node,) = (plan / "resources").glob("command-remote-Command--*-gpu-a800-01-config.json")
    scripts, _ = installed_files(json.loads(node.read_text())["inputs"]["create"])
    for key in ("Prolog", "Epilog"):
        assert sha256(Path(shown[key]).read_bytes()) == sha256(scripts[shown[key]]), key
    # What the loopback stack names, the plan carried into the file: each node's own slurmd port on this host.
    for node_name, port in slurm.stack.slurmd_ports.items():
        described = slurm.run("scontrol", "--oneliner", "show", "node", node_name).stdout
        assert "NodeAddr=127.0.0.1 " in described and f"Port={port} " in described, described


def test_should_schedule_only_slurm_and_flex_pool_nodes(slurm: Cluster) -> None:
    out = slurm.run("sinfo", "--noheader", "--Node", "--format=%N %P %T").stdout
    partitions: dict[str, set[str]] = {}
    for node, partition, state in (line.split() for line in out.splitlines()):
        assert state == "idle", node
        partitions.setdefault(partition.rstrip("*"), set()).add(node)
    assert partitions == {
        "a800-train": {f"gpu-a800-{i:02}" for i in range(1, 9)},
        "a800-flex": {"gpu-a800-09", "gpu-a800-10"},
    }


@pytest.mark.parametrize("node", ["gpu-a800-01", "gpu-a800-10"], ids=lambda n: f"slurmd -G shows 8 A800 on {n}")
def test_should_give_every_node_eight_gpus(slurm: Cluster, node: str) -> None:
    out = slurm.run("slurmd", "-N", node, "-G").stdout + slurm.run("slurmd", "-N", node, "-G").stderr
    assert re.search(r"Gres Name=gpu Type=a800 Count=8\b", out), out
    described = slurm.run("scontrol", "--oneliner", "show", "node", node).stdout
    assert "Gres=gpu:a800:8" in described and "CfgTRES=cpu=128,mem=1992294M" in described, described


def test_should_apply_accounting_commands_idempotently(slurm: Cluster) -> None:
    def table() -> str:
        return slurm.run("sacctmgr", "--noheader", "--parsable2", "list", "qos", "format=name,priority,preempt").stdout

    before = table()
    # Every `add` now finds its object there (sacctmgr exits 1); the script must still succeed and change nothing.
    slurm.run("bash", "-c", (slurm.plan_dir / "slurm" / "accounting.sh").read_text())
    assert table() == before
    assert "train_high|10000|train_normal,train_preemptible" in before.splitlines()


GPU8 = ("--gres=gpu:a800:8", "--wrap=sleep 300")


def test_should_requeue_a_preemptible_job_for_a_train_high_one(slurm: Cluster) -> None:
    low = slurm.sbatch("-A", "nlp-foundation", "--qos=train_preemptible", "-w", "gpu-a800-01", "-p", "a800-train",
                       *GPU8)
    slurm.wait_state(low, "RUNNING")
    high = slurm.sbatch("-A", "speech", "--qos=train_high", "-w", "gpu-a800-01", "-p", "a800-train", *GPU8)
    slurm.wait_state(high, "RUNNING")
    # Requeued, not lost: back in the queue with a restart counted (it becomes eligible ~2 min later).
    preempted = slurm.wait_state(low, "PENDING")
    assert int(preempted["Restarts"]) >= 1, preempted
    assert preempted["Requeue"] == "1"


def test_should_never_preempt_inference_or_critical_jobs(slurm: Cluster) -> None:
    protected = []
    # The training partition's nodes: the flex partition admits neither class (slurm.flex_qos).
    for index, node in enumerate(partitions(slurm.site)["a800-train"][0].nodes):
        # Both classes are the operators' (scheduling.classes[].for_teams false): a team account may not use them.
        account, qos = ("root", "critical") if index % 2 else ("root", "inference")
        protected.append(slurm.sbatch("-A", account, f"--qos={qos}", "-w", node.name, "-p", "a800-train", *GPU8))
    for job in protected:
        slurm.wait_state(job, "RUNNING")
    high = slurm.sbatch("-A", "speech", "--qos=train_high", "-p", "a800-train", *GPU8)
    # Preemption acts within a scheduling cycle (~3 s here); watch for three times as long.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert slurm.job(high)["JobState"] == "PENDING"
        running = set(slurm.jobs("R"))
        assert running >= set(protected), f"preempted: {set(protected) - running}"
        time.sleep(1)
    assert all(slurm.job(job)["Restarts"] == "0" for job in protected)


def test_should_start_a_two_node_job_only_when_both_nodes_are_free(slurm: Cluster) -> None:
    blocker = slurm.sbatch("-A", "speech", "--qos=train_preemptible", "-w", "gpu-a800-09", "-p", "a800-flex", *GPU8)
    slurm.wait_state(blocker, "RUNNING")
    gang = slurm.sbatch("-A", "nlp-foundation", "--qos=train_preemptible", "-N", "2", "-p", "a800-flex", *GPU8)
    time.sleep(3)
    waiting = slurm.job(gang)
    assert (waiting["JobState"], waiting["Reason"]) == ("PENDING", "Resources"), waiting
    slurm.run("scancel", blocker)
    started = slurm.wait_state(gang, "RUNNING")
    assert started["NodeList"] == "gpu-a800-[09-10]"


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        pytest.param(("-A", "speech", "--qos=no_such_qos"), "Invalid qos", id="refuses an unknown QoS"),
        pytest.param(("-A", "no-such-team"), "Invalid account", id="refuses an unknown account"),
        pytest.param(("-A", "vision"), "Invalid account", id="refuses a team not onboarded at this stage"),
        pytest.param(("-A", "speech", "--qos=critical"), "Invalid qos", id="refuses critical from a team account"),
    ],
)
def test_should_refuse_at_submit(slurm: Cluster, args: tuple[str, ...], refusal: str) -> None:
    result = slurm.run("sbatch", *args, f"--chdir={slurm.stack.root}", "--gres=gpu:a800:1", "--wrap=true",
                       check=False)
    assert result.returncode != 0 and refusal in result.stderr, result


@pytest.mark.parametrize(
    ("qos", "admitted"),
    [
        pytest.param("train_preemptible", True, id="admits on flex the QoS a lend may requeue"),
        pytest.param("train_normal", False, id="refuses train_normal on flex at submit"),
        pytest.param("train_high", False, id="refuses train_high on flex at submit"),
        pytest.param("critical", False, id="refuses the operators' critical on flex at submit"),
    ],
)
def test_should_admit_on_the_flex_partition_only_work_a_lend_may_requeue(slurm: Cluster, qos: str,
                                                                         admitted: bool) -> None:
    account = "root" if qos == "critical" else "speech"
    result = slurm.run("sbatch", "-A", account, f"--qos={qos}", "-p", "a800-flex", f"--chdir={slurm.stack.root}",
                       "--gres=gpu:a800:1", "--wrap=true", check=False)
    assert (result.returncode == 0) is admitted, result
    if not admitted:
        assert "Invalid qos specification" in result.stderr, result


def test_should_run_a_job_naming_both_partitions_where_its_qos_is_admitted(slurm: Cluster) -> None:
    # EnforcePartLimits=ANY: the flex partition refuses train_normal, the training one takes it.
    job = slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-flex,a800-train", *GPU8)
    started = slurm.wait_state(job, "RUNNING")
    assert started["Partition"] == "a800-train", started


@pytest.mark.slow
def test_should_order_equal_qos_jobs_by_fairshare(slurm: Cluster) -> None:
    heavy = slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-train", "-N", "8", *GPU8)
    slurm.wait_state(heavy, "RUNNING")
    speech = slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-train", "-N", "8", *GPU8)
    nlp = slurm.sbatch("-A", "nlp-foundation", "--qos=train_normal", "-p", "a800-train", "-N", "8", *GPU8)

    def priority(job: str) -> int:
        return int(slurm.job(job)["Priority"])

    # Usage decays into fairshare once per PriorityCalcPeriod (1 min, the minimum).
    slurm.wait(f"speech's usage to lower its priority below nlp-foundation's ({speech}, {nlp})",
               lambda: priority(nlp) > priority(speech), timeout_s=150)


PROD_QOS = [q.name for q in slurm_qos(parse(prod_values()))]


@pytest.mark.parametrize("qos", PROD_QOS, ids=lambda q: f"a team account submits with {q} only if the table opens it")
def test_should_let_a_team_submit_only_with_its_allowed_qos(slurm: Cluster, qos: str) -> None:
    allowed = qos in team_qos(slurm.site)
    result = slurm.run("sbatch", "--parsable", "--hold", "-A", "speech", f"--qos={qos}",
                       f"--chdir={slurm.stack.root}", "--gres=gpu:a800:1", "--wrap=true", check=False)
    assert (result.returncode == 0) is allowed, result
    if allowed:
        assert slurm.job(result.stdout.strip().split(";")[0])["QOS"] == qos
    else:
        assert "Invalid qos specification" in result.stderr, result


def test_should_give_a_team_job_the_tables_default_qos(slurm: Cluster) -> None:
    job = slurm.sbatch("--hold", "-A", "nlp-foundation", "--gres=gpu:a800:1", "--wrap=true")
    assert slurm.job(job)["QOS"] == slurm.site.scheduling.team_default_class == "train_normal"


def test_should_load_the_tables_qos_set_and_fairshare(slurm: Cluster) -> None:
    qos = slurm.run("sacctmgr", "--noheader", "--parsable2", "list", "qos", "format=name,priority,preempt").stdout
    loaded = {line.split("|")[0]: line.split("|")[1:] for line in qos.splitlines()}
    expected = {q.name: [str(q.priority), ",".join(sorted(q.preempts))] for q in slurm_qos(slurm.site)}
    assert {name: [prio, ",".join(sorted(filter(None, pre.split(","))))] for name, (prio, pre) in loaded.items()
            if name in expected} == expected
    shares = slurm.run("sacctmgr", "--noheader", "--parsable2", "list", "association", "where", "user=",
                       "format=account,fairshare,qos").stdout
    teams = {line.split("|")[0]: line.split("|")[1:] for line in shares.splitlines()}
    assert teams["speech"] == ["1", ",".join(sorted(team_qos(slurm.site)))]


def gpu_indices(slurm: Cluster, job_id: str) -> list[str]:
    """The node-local GPU indices of a one-node job (`scontrol -d show job`: GRES=gpu:a800:2(IDX:0-1))."""
    detail = slurm.run("scontrol", "--details", "--oneliner", "show", "job", job_id).stdout
    match = re.search(r"\bGRES=gpu:\w+:\d+\(IDX:([-\d,]+)\)", detail)
    assert match, detail
    indices = []
    for part in match.group(1).split(","):
        first, _, last = part.partition("-")
        indices += [str(i) for i in range(int(first), int(last or first) + 1)]
    return indices


def mapped(slurm: Cluster) -> dict[str, str]:
    """GPU index -> the job id its DCGM mapping file holds (one emulated node's GPUs per test)."""
    directory = slurm.stack.mapping_dir
    return {f.name: f.read_text().strip() for f in directory.iterdir() if not f.name.startswith(".")} \
        if directory.exists() else {}


def test_should_map_each_gpu_to_its_running_job_for_dcgm_and_unmap_it_when_the_job_ends(slurm: Cluster) -> None:
    job = slurm.sbatch("-A", "speech", "-w", "gpu-a800-01", "-p", "a800-train", "--gres=gpu:a800:2",
                       "--wrap=sleep 300")
    slurm.wait_state(job, "RUNNING")
    indices = gpu_indices(slurm, job)
    assert len(indices) == 2
    wait_for("the prolog's mapping files", lambda: all(mapped(slurm).get(i) == job for i in indices), timeout_s=10)
    slurm.run("scancel", job)
    wait_for("the epilog to remove the mapping", lambda: not set(mapped(slurm).items()) & {(i, job) for i in indices},
             timeout_s=20)


DAY_S = 86_400


def test_should_move_the_teams_old_checkpoints_to_cold_when_its_job_ends(slurm: Cluster) -> None:
    site, stack = slurm.site, slurm.stack
    (server,) = [s.server for s in team_shares(site) if s.team == "speech"]
    checkpoint = stack.hot_root / server / "speech" / "run-1" / "step-000100"
    checkpoint.mkdir(parents=True)
    (checkpoint / "shard-0.bin").write_bytes(b"weights" * 1000)
    (checkpoint / "COMPLETE").touch()
    # Older than archive_after_days: it leaves hot though it is the run's newest.
    old = time.time() - (site.storage.ceph_cold.archive_after_days + 1) * DAY_S
    for path in (checkpoint / "shard-0.bin", checkpoint / "COMPLETE", checkpoint):
        os.utime(path, (old, old))
    archived = stack.cold_root / "speech" / "run-1" / "step-000100" / "shard-0.bin"
    job = slurm.sbatch("-A", "speech", "-p", "a800-train", "--gres=gpu:a800:1", "--wrap=true")
    slurm.wait_state(job, "COMPLETED")
    log = stack.log_dir / "checkpoint-mover.log"
    try:
        wait_for("the epilog's mover to archive the checkpoint", lambda: archived.exists() and not checkpoint.exists(),
                 timeout_s=30)
    except TimeoutError as err:
        raise AssertionError(log.read_text() if log.exists() else "the epilog started no mover") from err
    assert archived.read_bytes() == b"weights" * 1000
