import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from runbooks.acceptance.load import MIB, NodeTier, TrainingJob, allocated_gpus, job_states
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
    # sacct -X -D: job 15's first run was preempted and requeued; its runs' GPU-seconds add up.
    answer = tmp_path / "sacct.out"
    answer.write_text("12|COMPLETED|cpu=2,gres/gpu=8,node=1|10|2026-12-03T18:00:10|cpu=2,gres/gpu=8,node=1\n"
                      "13|CANCELLED by 0|cpu=2,node=1|30|2026-12-03T18:00:30|cpu=2,gres/gpu=8,node=1\n"
                      "14|PENDING||0|Unknown|gres/gpu=16,node=2\n"
                      "15|PREEMPTED|gres/gpu=8,node=1|4|2026-12-03T18:00:04|gres/gpu=8,node=1\n"
                      "15|COMPLETED|gres/gpu=8,node=1|10|2026-12-03T18:02:14|gres/gpu=8,node=1\n")
    states = job_states(("sh", "-c", 'cat "$0"', str(answer)), {})(["12", "13", "14", "15"])
    assert {j: (r.state, r.gpu_s, r.requested_gpus, r.requeues) for j, r in states.items()} == {
        "12": ("COMPLETED", 80.0, 8, ()), "13": ("CANCELLED", 0.0, 8, ()), "14": ("PENDING", 0.0, 16, ()),
        "15": ("COMPLETED", 112.0, 8, ((datetime.fromisoformat("2026-12-03T18:00:04").timestamp(), "PREEMPTED"),))}


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
