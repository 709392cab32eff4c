"""The node failure's Slurm reactions read from squeue and scontrol as they print them (Slurm 22.05 formats), through
stand-in commands: the node marked down, its jobs requeued, and a job gone from the queue named as lost."""

from pathlib import Path

from runbooks.acceptance.probes import SlurmNodeProbe, jobs_on

SQUEUE = """#!/bin/sh
case "$*" in
  *--nodelist=gpu-a800-05*) printf '101\\n102\\n' ;;
  *--jobs*) cat "{queue}" ;;
esac
"""
SCONTROL = """#!/bin/sh
echo "NodeName=gpu-a800-05 Arch=x86_64 CoresPerSocket=32 State=$(cat {state}) ThreadsPerCore=1"
"""


def probe(tmp_path: Path, state: str, queue: str) -> SlurmNodeProbe:
    (tmp_path / "state").write_text(state)
    (tmp_path / "queue").write_text(queue)
    for name, script in (("squeue", SQUEUE.format(queue=tmp_path / "queue")),
                         ("scontrol", SCONTROL.format(state=tmp_path / "state"))):
        (tmp_path / name).write_text(script)
        (tmp_path / name).chmod(0o755)
    squeue = (str(tmp_path / "squeue"),)
    return SlurmNodeProbe("gpu-a800-05", squeue, (str(tmp_path / "scontrol"),), {},
                          lambda: jobs_on("gpu-a800-05", squeue))


def test_should_see_the_node_down_and_every_job_requeued(tmp_path: Path) -> None:
    node = probe(tmp_path, "DOWN*+NOT_RESPONDING", "101 PENDING BeginTime\n102 RUNNING None\n")
    assert node.detected() and node.seen == ["101", "102"]
    assert not node.recovered()
    marked, requeued = node.reactions()
    assert marked.ok and marked.detail == "Slurm showed gpu-a800-05 DOWN*+NOT_RESPONDING"
    assert requeued.ok and requeued.detail == "2 of 2 jobs on gpu-a800-05 requeued or running"
    (tmp_path / "state").write_text("IDLE")
    assert node.recovered()


def test_should_name_a_job_lost_with_the_node(tmp_path: Path) -> None:
    node = probe(tmp_path, "DOWN*", "101 PENDING BeginTime\n")
    assert node.detected()
    _, reaction = node.reactions()
    assert not reaction.ok and reaction.detail.endswith("1 of 2 jobs on gpu-a800-05 requeued or running; lost: 102")


def test_should_fail_the_reaction_when_no_training_ran_on_the_node(tmp_path: Path) -> None:
    node = probe(tmp_path, "IDLE", "")
    node.jobs_on_node = lambda: []
    assert not node.detected()
    marked, requeued = node.reactions()
    assert not requeued.ok and "no training job ran on gpu-a800-05" in requeued.detail
    assert not marked.ok and marked.detail == "Slurm never showed gpu-a800-05 DOWN while the fault held"


def test_should_not_count_a_node_only_not_responding_as_marked_down(tmp_path: Path) -> None:
    node = probe(tmp_path, "ALLOCATED+NOT_RESPONDING", "101 RUNNING None\n102 RUNNING None\n")
    assert node.detected()
    marked, _ = node.reactions()
    assert not marked.ok
