"""What `Flex.pool` hands the lending decision, from squeue's and scontrol's output as Slurm prints it."""

from collections.abc import Sequence

import pytest

from runbooks.flex.lending import Flex, flex_nodes
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
        return f"101 train_preemptible {used}\n" if f"--nodelist={node}" in args else ""

    pool = Flex(site, slurm, FakeKubectl(), progress=lambda line: None).pool()
    jobs = {n.name: n.jobs for n in pool}[node]
    assert [(j.id, j.qos, j.preemptible, j.since_checkpoint_s) for j in jobs] == [
        ("101", "train_preemptible", True, loses_s)]
