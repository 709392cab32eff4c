"""Sizing lending from demand, on the hand-worked lend of test_engine: what the peaks need past the pool, and what
each delay serves, lends in vain, moves and costs training; and the same figures failing when no node can be lent."""

import math
from dataclasses import replace

import pytest

from runbooks.simulate.site_model import StaticSlices
from runbooks.simulate.sizing import FlexNeed, flex_need, lending_options
from tests.runbooks.simulate.test_engine import FLEX_SITE, HOUR, LEND_WORKLOAD, LENDING, job, small_site

SITE = small_site(FLEX_SITE, 8)
NO_SLICES = StaticSlices({}, {}, {})


def test_the_peak_needs_one_replica_past_the_pool_on_one_flex_node() -> None:
    """2.4 replicas' worth for 1800 s needs 3 replicas at 5/6 busy, one past replicas.max 2: 4 GPUs, one node."""
    assert flex_need(SITE, LEND_WORKLOAD, LENDING) == [FlexNeed("m", "A800", 0.5, 1, 4, 1, 1)]


def test_a_delay_is_judged_on_the_peak_it_serves_the_gpus_it_lends_in_vain_and_what_training_loses() -> None:
    """Lent at 1260 s (peak_s 60 after the peak at 1200 s), reclaimed at 3600 s (trough_s 600 after 3000 s): the
    third replica serves 1740 of the 1800 s past the pool on 4 of the 8 lent GPUs. Lending nothing, the preemptible
    job on f1 would have run all 4200 s; lent, it keeps its 1200 s checkpoint and runs again from 3600 s."""
    (option,) = lending_options(SITE, LEND_WORKLOAD, LENDING, 600, NO_SLICES, delays=[(60, 600)])
    assert option.peaks_covered_pct == pytest.approx(100 * 1740 / 1800)
    assert option.peaks_unlendable_pct == 0
    assert option.lent_gpu_h == pytest.approx(8 * 2340 / HOUR)
    assert option.lent_serving_pct == pytest.approx(100 * 4 * 1740 / (8 * 2340))
    assert (option.moves, option.most_moves_in_window) == (2, 2)  # 2340 s apart: both within one 1-h window
    assert option.training_cost_gpu_h == pytest.approx(8 * (4200 - 1200 - 600) / HOUR)


def test_a_flex_node_running_protected_work_serves_no_peak() -> None:
    """f1 runs train_normal all along, which no lend may requeue: nothing is lent, the peak is never served in full,
    and all of it is reported as having no lendable node."""
    workload = replace(
        LEND_WORKLOAD, jobs=[job(0, "a", 0, 8, 10, "train_preemptible"), job(1, "a", 0, 8, 10, "train_normal")]
    )
    (option,) = lending_options(SITE, workload, LENDING, 600, NO_SLICES, delays=[(60, 600)])
    assert (option.peaks_covered_pct, option.peaks_unlendable_pct, option.moves) == (0, 100, 0)
    assert option.lent_gpu_h == 0 and math.isnan(option.lent_serving_pct)
    assert option.training_cost_gpu_h == 0
