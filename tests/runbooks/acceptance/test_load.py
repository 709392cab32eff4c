import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from components.site.site import Pool
from runbooks.acceptance.load import (
    FLEX_IN_FLIGHT,
    MIB,
    WORKERS,
    Checkpoints,
    FlexTraining,
    NodeTier,
    TrainingJob,
    allocated_gpus,
    intact,
    job_states,
    storage_load,
)
from runbooks.flex.lending import flex_nodes
from tests.builders import parse, prod_values


def run_job(job: TrainingJob, job_id: str = "7") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-s"], input=job.script(), env={**os.environ, "SLURM_JOB_ID": job_id},
                          capture_output=True, text=True, timeout=30, check=False)


def test_should_request_the_training_partitions_gpus_through_gres() -> None:
    site = parse(prod_values())
    job = TrainingJob.for_site(site, 90, Path("/mnt/hot/nfs-a/platform/acceptance"), MIB)
    group = next(g for g in site.node_groups if g.pool.value == "slurm")
    assert job.options() == [f"--partition={job.partition}", f"--gres=gpu:{group.gpus_per_node}", "--time=3"]
    assert job.partition.endswith("-train")


def test_should_keep_each_flex_node_running_preemptible_training_and_the_next_job_waiting(tmp_path: Path) -> None:
    """sbatch and squeue stand-ins: sbatch numbers each job, logs its options and adds it to `live`, the ids squeue
    lists (a job ends when the test takes it out)."""
    site = parse(prod_values())
    nodes = flex_nodes(site)
    job = TrainingJob.for_site(site, 90, Path("/mnt/hot/nfs-a/platform/acceptance"), MIB, Pool.FLEX)
    counter, calls, live = tmp_path / "counter", tmp_path / "calls", tmp_path / "live"
    counter.write_text("0")
    live.write_text("")
    sbatch = ("sh", "-c", 'n=$(( $(cat "$0") + 1 )); echo "$n" > "$0"; echo "$n" >> "$1"; echo "$*" >> "$2"; echo "$n"',
              str(counter), str(live), str(calls))
    load = FlexTraining(sbatch, ("sh", "-c", 'cat "$0"', str(live)), {}, "platform", "train_preemptible", job, nodes,
                        limit=3 * len(nodes), every_s=0.05)

    def run(seconds: float) -> dict[str, list[tuple[float, float]]]:
        load.run(1.0, time.time() + seconds, threading.Event())
        return load.drain()

    # Each look submits until every node has its two, then nothing more while they live.
    first = run(0.3)
    assert {n: len(ids) for n, ids in load.placed.items()} == dict.fromkeys(nodes, FLEX_IN_FLIGHT)
    assert [v for _, v in first["training_error"]] == [0.0] * FLEX_IN_FLIGHT * len(nodes)
    options = calls.read_text().splitlines()
    assert all("--qos=train_preemptible" in line and f"--partition={job.partition}" in line for line in options)
    assert [line.split("--nodelist=")[1].split()[0] for line in options] == [
        n for n in nodes for _ in range(FLEX_IN_FLIGHT)]
    # The first node's running job ended: one more for it, and then the limit holds.
    live.write_text("\n".join(str(n) for n in range(2, 2 * len(nodes) + 1)) + "\n")
    second = run(0.3)
    assert [v for _, v in second["training_job"]] == [2 * len(nodes) + 1.0] and load.placed[nodes[0]][-1] == str(
        2 * len(nodes) + 1)
    live.write_text("")
    run(0.3)
    assert sum(map(len, load.placed.values())) == 3 * len(nodes)
    assert job.partition.endswith("-flex")


def test_should_write_the_checkpoint_burn_until_its_end_and_exit_0(tmp_path: Path) -> None:
    hot = tmp_path / "hot share's $(touch pwned)"  # quoted: the name is never run
    started = time.monotonic()
    done = run_job(TrainingJob("a800-train", 8, 2, hot, 2 * MIB))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    # Its end is read off date +%s: 2 s from a start late in a second is a little over 1 s (measured 1.33 s once).
    assert 1.0 <= took < 6, took
    assert hot.is_dir() and list(hot.iterdir()) == [], "its checkpoint is removed at exit"
    assert not (Path.cwd() / "pwned").exists()


def descendants(pid: int) -> list[int]:
    """The processes below `pid`, from /proc's parent links."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since
        if stat:
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def niced_loop(pid: int) -> bool:
    """Whether `pid` is the job's busy loop, once niced (nice exec'd it as the loop)."""
    try:
        return b"while :" in Path(f"/proc/{pid}/cmdline").read_bytes() and os.getpriority(os.PRIO_PROCESS, pid) > 0
    except (FileNotFoundError, ProcessLookupError):
        return False  # ended since it was listed


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroup")
def test_should_burn_at_nice_19_in_an_autogroup_of_its_own() -> None:
    """Where a job's nice 19 would count only within its session's autogroup (slurmstepd gives each job one), the busy
    loop's own autogroup is niced: the caller's stays as it was."""
    ours = Path("/proc/self/autogroup").read_text()
    job = subprocess.Popen(["sh", "-s"], stdin=subprocess.PIPE, env={**os.environ, "SLURM_JOB_ID": "8"}, text=True)
    try:
        assert job.stdin is not None
        job.stdin.write(TrainingJob("a800-train", 8, 4, Path("/tmp"), MIB).script())
        job.stdin.close()
        deadline, loops = time.monotonic() + 10, list[int]()
        while not loops and time.monotonic() < deadline:
            time.sleep(0.1)
            loops = [p for p in descendants(job.pid) if niced_loop(p)]
        assert loops, "the busy loop never ran at a nice value"
        (loop,) = loops
        assert os.getpriority(os.PRIO_PROCESS, loop) == 19
        assert os.getsid(loop) == loop != os.getsid(0)
        assert Path(f"/proc/{loop}/autogroup").read_text().split()[-2:] == ["nice", "19"]
        assert Path("/proc/self/autogroup").read_text() == ours
    finally:
        job.kill()
        job.wait(timeout=10)


def test_should_fail_the_job_when_its_checkpoint_name_is_a_planted_link(tmp_path: Path) -> None:
    hot, target = tmp_path / "hot", tmp_path / "elsewhere"
    hot.mkdir()
    target.write_text("kept")
    (hot / "training-7.ckpt").symlink_to(target)
    done = run_job(TrainingJob("a800-train", 8, 1, hot, MIB))
    assert done.returncode != 0
    assert target.read_text() == "kept"


def test_should_count_only_the_gpus_slurm_allocated() -> None:
    assert allocated_gpus("billing=8,cpu=2,gres/gpu:a800=8,gres/gpu=8,mem=1G,node=1") == 8
    assert allocated_gpus("billing=1,cpu=2,mem=1G,node=1") == 0
    assert allocated_gpus("") == 0


def test_should_read_gpu_seconds_and_requeues_from_sacct_allocation_records(tmp_path: Path) -> None:
    # sacct -X -D: job 15's first run was preempted on flex-09 and requeued; its runs' GPU-seconds add up.
    answer = tmp_path / "sacct.out"
    answer.write_text("12|COMPLETED|cpu=2,gres/gpu=8,node=1|10|2026-12-03T18:00:10|cpu=2,gres/gpu=8,node=1|gpu-01\n"
                      "13|CANCELLED by 0|cpu=2,node=1|30|2026-12-03T18:00:30|cpu=2,gres/gpu=8,node=1|gpu-02\n"
                      "14|PENDING||0|Unknown|gres/gpu=16,node=2|None assigned\n"
                      "15|PREEMPTED|gres/gpu=8,node=1|4|2026-12-03T18:00:04|gres/gpu=8,node=1|flex-09\n"
                      "15|COMPLETED|gres/gpu=8,node=1|10|2026-12-03T18:02:14|gres/gpu=8,node=1|gpu-01\n")
    states = job_states(("sh", "-c", 'cat "$0"', str(answer)), {})(["12", "13", "14", "15"])
    assert {j: (r.state, r.gpu_s, r.requested_gpus, r.requeues) for j, r in states.items()} == {
        "12": ("COMPLETED", 80.0, 8, ()), "13": ("CANCELLED", 0.0, 8, ()), "14": ("PENDING", 0.0, 16, ()),
        "15": ("COMPLETED", 112.0, 8, ((datetime.fromisoformat("2026-12-03T18:00:04").timestamp(), "PREEMPTED",
                                                       "flex-09"),))}


def test_should_write_each_chunk_fsynced_on_the_node_and_read_it_back(tmp_path: Path) -> None:
    # `sh -c` stands for `ssh user@node --`: both hand one command line to the node's shell.
    hot = tmp_path / "hot share's $(touch pwned)"
    tier = NodeTier.shell(("sh", "-c"), hot)
    body = os.urandom(3 * MIB + 5)
    tier.put("ckpt-000001", body)
    assert (hot / "ckpt-000001").read_bytes() == body and tier.get("ckpt-000001") == body
    assert not (Path.cwd() / "pwned").exists()


def test_should_refuse_a_chunk_whose_name_is_a_planted_link(tmp_path: Path) -> None:
    hot, target = tmp_path / "hot", tmp_path / "elsewhere"
    hot.mkdir()
    target.write_text("kept")
    (hot / "ckpt-000001").symlink_to(target)
    tier = NodeTier.shell(("sh", "-c"), hot)
    with pytest.raises(OSError, match="exited 1"):
        tier.put("ckpt-000001", b"x")
    with pytest.raises(OSError):
        tier.get("ckpt-000001")
    assert target.read_text() == "kept"


@dataclass
class CountingTier:
    """A NodeTier (`sh -c` for ssh) that counts the commands it runs, and answers some reads damaged or refused."""

    tier: NodeTier
    commands: int = 0
    reads: list[str] = field(default_factory=list)
    damaged: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)

    def put(self, name: str, data: bytes, drop: Sequence[str] = ()) -> None:
        self.commands += 1
        self.tier.put(name, data, drop)

    def get(self, name: str) -> bytes:
        self.commands += 1
        self.reads.append(name)
        if name in self.refused:
            self.refused.discard(name)  # once: the next read gets through
            raise OSError(f"{name}: connection reset")
        return b"x" + self.tier.get(name) if name in self.damaged else self.tier.get(name)


def test_should_keep_a_window_of_chunks_on_the_tier_each_read_back_once(tmp_path: Path) -> None:
    hot = tmp_path / "hot"
    tier = CountingTier(NodeTier.shell(("sh", "-c"), hot))
    checkpoints = Checkpoints(window=3)
    load = storage_load(tier, 64 << 10, 4.0, 4.0, checkpoints)  # 64 chunks/s
    load.run(1.0, time.time() + 1.0, threading.Event())
    written = [f"ckpt-{v:06d}" for v in range(1, len(load.drain()["storage_error"]) + 1)]
    assert len(written) > 2 * WORKERS, len(written)
    # The tier holds the window and what was verified after the last write; each chunk was read once, and deleting
    # the older ones cost no command of its own.
    assert 3 <= len(list(hot.iterdir())) <= 3 + WORKERS and sorted(tier.reads) == written
    assert tier.commands == 2 * len(written)
    assert intact(tier, checkpoints) == (len(written), 0, []) and tier.commands == 2 * len(written)


def test_should_count_a_chunk_damaged_or_gone_and_read_a_failed_read_back_once_more(tmp_path: Path) -> None:
    tier = CountingTier(NodeTier.shell(("sh", "-c"), tmp_path / "hot"), damaged={"ckpt-000002"},
                        refused={"ckpt-000003", "ckpt-000004"})
    checkpoints = Checkpoints(window=10)
    load = storage_load(tier, 1024, 1.0, 1.0, checkpoints)
    assert load.request(1) == (True, {}) and load.request(2) == (False, {})
    for number in (3, 4):
        with pytest.raises(OSError, match="connection reset"):
            load.request(number)
    (tmp_path / "hot" / "ckpt-000004").unlink()  # gone before its second read
    assert intact(tier, checkpoints) == (4, 2, ["ckpt-000002", "ckpt-000004"])
    assert tier.reads == ["ckpt-000001", "ckpt-000002", "ckpt-000003", "ckpt-000004", "ckpt-000003", "ckpt-000004"]
    assert intact(tier, checkpoints) == (4, 2, ["ckpt-000002", "ckpt-000004"]) and len(tier.reads) == 6


def test_should_drop_a_planted_link_and_not_what_it_points_to(tmp_path: Path) -> None:
    hot, target = tmp_path / "hot", tmp_path / "elsewhere"
    hot.mkdir()
    target.write_text("kept")
    (hot / "ckpt-000001").symlink_to(target)
    NodeTier.shell(("sh", "-c"), hot).put("ckpt-000002", b"x", ["ckpt-000001"])
    assert [p.name for p in hot.iterdir()] == ["ckpt-000002"] and target.read_text() == "kept"


def test_should_drop_with_a_later_write_the_chunks_a_failed_write_did_not(tmp_path: Path) -> None:
    hot = tmp_path / "hot"
    tier = NodeTier.shell(("sh", "-c"), hot)
    checkpoints = Checkpoints(window=1)
    load = storage_load(tier, 1024, 1.0, 1.0, checkpoints)
    load.request(1)
    load.request(2)
    failing = storage_load(NodeTier(lambda name, drop: ("false",), tier.read), 1024, 1.0, 1.0, checkpoints)
    with pytest.raises(OSError, match="exited 1"):
        failing.request(3)
    load.request(4)
    assert sorted(p.name for p in hot.iterdir()) == ["ckpt-000002", "ckpt-000004"]
    load.request(5)
    assert sorted(p.name for p in hot.iterdir()) == ["ckpt-000004", "ckpt-000005"]
