"""The sweep over loads and seeds: each figure's spread, and the comparisons it is taken over."""

import math
from pathlib import Path

import pytest

from runbooks.simulate.compare import at_stage
from runbooks.simulate.sweep import Spread, sweep
from runbooks.simulate.traces import Trace
from runbooks.simulate.workload import Mapping
from tests.builders import parse, prod_values

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"


def test_a_spread_is_the_mean_lowest_and_highest_of_the_runs_the_figure_applies_to() -> None:
    assert Spread.of([1.0, 4.0, math.nan, 7.0]) == Spread(4.0, 1.0, 7.0)
    assert all(math.isnan(v) for v in vars(Spread.of([math.nan, math.nan])).values())


def test_each_load_is_replayed_once_per_seed_and_the_seeds_differ() -> None:
    """Two days of Gavel at loads 0.5 and 1.0, seeds 3 and 4: four workloads, each offering near its load, and the
    seeds thin the trace differently."""
    site = at_stage(parse(prod_values()), None)
    runs = sweep(site, TRACES, Mapping(Trace.GAVEL, days=2, seed=3), [0.5, 1.0], 2)
    assert list(runs) == [0.5, 1.0] and all(len(c) == 2 for c in runs.values())
    for load, (first, second) in runs.items():
        assert [c.workload.offered_load for c in (first, second)] == pytest.approx([load, load], rel=0.5)
        assert [j.arrival_s for j in first.workload.jobs] != [j.arrival_s for j in second.workload.jobs]
