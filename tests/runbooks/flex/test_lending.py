"""What `Flex.pool` hands the lending decision, from squeue's and scontrol's output as Slurm prints it, and the mark a
lend keeps in a job's AdminComment."""

from collections.abc import Sequence

import pytest

from runbooks.flex.lending import CommandError, Flex, flex_nodes, kept_comment, lend_mark, stopped_by_lend
from runbooks.flex.slurm_read import JobRecord
from tests.builders import parse, prod_values
from tests.harness.kubectl import FakeKubectl


@pytest.mark.parametrize(("used", "loses_s"), [
    ("4:05", 245.0),  # 4 minutes 5 seconds since it started: all of it is lost
    ("29:59", 1799.0),
    ("1:30:00", 1800.0),  # ran longer than the 30-minute interval: it has saved a checkpoint within the last 30
    ("2-03:00:00", 1800.0),
    ("INVALID", 1800.0),  # squeue cannot tell: the most a job keeping the interval can lose
])
def test_should_charge_a_requeue_at_most_the_sites_checkpoint_interval(used: str, loses_s: float) -> None:
    site = parse(prod_values())
    assert site.storage.nfs_hot.checkpoint_interval_minutes == 30
    node = flex_nodes(site)[0]

    def slurm(args: Sequence[str], timeout_s: float = 30) -> str:
        if args[0] == "scontrol":
            return f"NodeName={args[-1]} State=MIXED Reason="
        return f"101|train_preemptible|{used}\n" if f"--nodelist={node}" in args else ""

    pool = Flex(site, slurm, FakeKubectl(), progress=lambda line: None).pool()
    jobs = {n.name: n.jobs for n in pool}[node]
    assert [(j.id, j.qos, j.preemptible, j.since_checkpoint_s) for j in jobs] == [
        ("101", "train_preemptible", True, loses_s)]


MARK = "gpuctl-flex-requeue-at-restart-"


@pytest.mark.parametrize(("comment", "restarts", "mark", "kept"), [
    pytest.param("", 0, f"{MARK}0", "", id="should mark a job with no comment by its restart count alone"),
    pytest.param("ticket 4411; see ops", 2, f"{MARK}2; over: ticket 4411; see ops", "ticket 4411; see ops",
                 id="should keep an administrator's comment after the mark"),
    pytest.param(f"{MARK}0; over: ticket 4411", 1, f"{MARK}1; over: ticket 4411", "ticket 4411",
                 id="should replace a stale mark and keep what it kept"),
    pytest.param(f"{MARK}0", 1, f"{MARK}1", "", id="should replace a stale mark that kept nothing"),
])
def test_should_mark_a_job_over_the_comment_it_had(comment: str, restarts: int, mark: str, kept: str) -> None:
    assert lend_mark(JobRecord("101", comment, restarts, True, False)) == mark
    assert kept_comment(mark) == kept_comment(comment) == kept
    assert stopped_by_lend(JobRecord("101", mark, restarts, True, False))


@pytest.mark.parametrize(("comment", "restarts"), [
    pytest.param(f"{MARK}1", 10, id="should not take a mark for restart 1 as one for restart 10"),
    pytest.param(f"{MARK}10", 1, id="should not take a mark for restart 10 as one for restart 1"),
    pytest.param(f"{MARK}0; over: x", 1, id="should not take a mark Slurm has requeued since"),
    pytest.param("ticket 4411", 0, id="should not take an administrator's comment for a mark"),
    pytest.param(f"note {MARK}0", 0, id="should not take a mark that does not lead the comment"),
])
def test_should_know_a_job_a_lend_did_not_stop(comment: str, restarts: int) -> None:
    assert not stopped_by_lend(JobRecord("101", comment, restarts, True, False))


@pytest.mark.parametrize("out", ["squeue: unrecognized option '--json'", '{"errors": []}', '{"jobs": [{"name": "x"}]}'])
def test_should_refuse_a_squeue_that_gives_no_job_records(out: str) -> None:
    flex = Flex(parse(prod_values()), lambda args, timeout_s=30: out, FakeKubectl(), progress=lambda line: None)
    with pytest.raises(CommandError, match=r"^squeue --json gave no job list \(.+\): the lend reads the fields of "
                                           r"Slurm 22\.05 \(openapi v0\.0\.38\)$"):
        flex.job_records()


def test_should_set_a_replica_floor_on_the_scaledobject_the_chart_names_after_the_model() -> None:
    kubectl = FakeKubectl()
    Flex(parse(prod_values()), lambda args, timeout_s=30: "", kubectl, progress=lambda line: None).set_replica_floor(
        "qwen2-5-72b", 6)
    # vllm-stack's templates/scaledobject-vllm.yaml: "{{ .Release.Name }}-{{$modelSpec.name}}-scaledobject".
    assert kubectl.calls == [["kubectl", "patch", "scaledobject", "vllm-qwen2-5-72b-scaledobject", "--namespace",
                              "inference", "--type", "merge", "--patch", '{"spec": {"minReplicaCount": 6}}']]
