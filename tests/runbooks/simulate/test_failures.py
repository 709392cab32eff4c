"""GPU failure replay: the study's rate from its own figures, one fault of each kind worked by hand in both worlds,
the controller's decisions being the live `decide` under the spec's health settings, a controller made ineffective
showing no gain, and the replay seeded and bounded."""

import random
import re
from dataclasses import replace

import pytest

import components.scheduling.health_decision as health_decision
from components.site.health import Health
from components.site.site import Site
from runbooks.simulate import failures
from runbooks.simulate.engine import Policy
from runbooks.simulate.failures import (
    DIAG_RUN_S,
    FAIL_AFTER_S,
    LLAMA3,
    PLACE_S,
    FailureModel,
    Fault,
    Replay,
    Tally,
    replay,
)
from tests.builders import parse, prod_values

NODE = "gpu-a800-01"
GPUS = 8
CHECKPOINT_S = 1800.0
RESPONSE_S = 900.0
DAY_S = 86_400.0


@pytest.fixture(scope="module")
def site() -> Site:
    return parse(prod_values())


def model(**changes: object) -> FailureModel:
    base = FailureModel(LLAMA3.rate_per_gpu_hour, 0.5, RESPONSE_S, CHECKPOINT_S, 1, (DAY_S,))
    return replace(base, **changes)  # type: ignore[arg-type]


def one(site: Site, regime: Policy, fault: Fault, health: Health | None = None) -> Tally:
    return Replay(site, model(), regime, random.Random(0), health).run([fault])


def test_should_take_the_rate_from_the_llama_3_papers_own_figures() -> None:
    # 419 unexpected interruptions, 58.7 % of them GPU issues, up to 16,384 GPUs, 54 days.
    assert LLAMA3.rate_per_gpu_hour == pytest.approx(419 * 0.587 / (16_384 * 54 * 24))
    assert f"{LLAMA3.rate_per_gpu_hour:.3g}" == "1.16e-05"


def test_should_let_a_broken_node_fail_job_after_job_until_the_human_acts_in_the_static_world(site: Site) -> None:
    tally = one(site, Policy.STATIC, Fault(NODE, 1000.0, 3, True, 600.0))
    # The job running fails (600 s since its checkpoint); one starts 30 s later and fails 300 s in, twice; the third
    # (started at 1690) is running when the human drains the node at 1900: 210 s of it are lost too.
    assert (PLACE_S, FAIL_AFTER_S) == (30.0, 300.0)
    assert tally.jobs_failed == 4 and tally.human_actions == 1 and tally.held_gpu_s == 0
    assert tally.work_lost_gpu_s == pytest.approx(GPUS * (600 + 300 + 300 + 210))


def test_should_drain_diagnose_twice_and_hand_off_a_broken_node_under_the_controller(site: Site) -> None:
    tally = one(site, Policy.STACK, Fault(NODE, 1000.0, 3, True, 600.0))
    # Steps every 60 s: drained at 1020 (before the next job at 1030), diagnosed at 1080 for 900 s (level 3), failed
    # at 1980 and diagnosed again, failed at 2880: handed off; the human acts 900 s later, at 3780.
    assert DIAG_RUN_S[3] == 900.0 and site.health.failures_before_handoff == 2
    assert tally.actions == {"drain": 1, "diagnose": 2, "hand-off": 1} and tally.human_actions == 1
    assert tally.jobs_failed == 1 and tally.work_lost_gpu_s == pytest.approx(GPUS * 600)
    assert tally.held_gpu_s == pytest.approx(GPUS * (3780 - 1020))


def test_should_return_a_node_whose_fault_passed_without_a_human(site: Site) -> None:
    fault = Fault(NODE, 1000.0, 3, False, 600.0)
    stack, static = one(site, Policy.STACK, fault), one(site, Policy.STATIC, fault)
    # Diagnosed 1080-1980; the XID aged out of health.window_s (600 s) by then: returned at 1980.
    assert stack.actions == {"drain": 1, "diagnose": 1, "return": 1} and stack.human_actions == 0
    assert stack.held_gpu_s == pytest.approx(GPUS * (1980 - 1020))
    # Static loses the one job and holds nothing: the GPU serves again; the human still acts on the page.
    assert (static.jobs_failed, static.held_gpu_s, static.human_actions) == (1, 0, 1)


def test_should_decide_with_the_live_decide_under_the_specs_health_settings(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []

    def spy(world: health_decision.World, settings: Health, timeout: float) -> health_decision.Decision:
        calls.append(world.at)
        return health_decision.decide(world, settings, timeout)

    monkeypatch.setattr(failures, "decide", spy)
    # 1000 s is a Thursday (1 January 1970): a Saturday window holds the diagnosis back two days.
    weekend = site.health.model_copy(update={"diag_windows": ("Sat 00:00-01:00",)})
    tally = one(site, Policy.STACK, Fault(NODE, 1000.0, 3, False, 600.0), weekend)
    assert calls and tally.actions == {"drain": 1, "diagnose": 1, "return": 1}
    assert tally.held_gpu_s == pytest.approx(GPUS * (2 * DAY_S + DIAG_RUN_S[3] - 1020))


def test_should_show_no_gain_from_a_controller_that_never_drains(site: Site) -> None:
    never = site.health.model_copy(update={"max_drained_pct": 0.0})
    faults = failures.draw_faults(site, model(rate_per_gpu_hour=1e-4), 60 * DAY_S, random.Random(7))
    assert len(faults) > 10
    static = Replay(site, model(), Policy.STATIC, random.Random(1)).run(faults)
    idle = Replay(site, model(), Policy.STACK, random.Random(1), never).run(faults)
    working = Replay(site, model(), Policy.STACK, random.Random(1)).run(faults)
    assert (idle.jobs_failed, idle.held_gpu_s, idle.human_actions) == (static.jobs_failed, 0, static.human_actions)
    assert idle.work_lost_gpu_s == pytest.approx(static.work_lost_gpu_s)
    assert idle.actions == {} and idle.budget_waits > 0
    # The controller that may drain fails fewer jobs on the same faults: the figure that the one above cannot show.
    assert working.jobs_failed < static.jobs_failed and working.actions.get("drain", 0) > 0


def test_should_replay_the_same_faults_for_the_same_seed_and_other_faults_for_another(site: Site) -> None:
    first, again, other = (replay(site, model(rate_per_gpu_hour=1e-4), 30, seed) for seed in (3, 3, 4))
    assert first == again and (first.faults, first.tallies) != (other.faults, other.tallies)
    assert first.tallies[Policy.STATIC].faults == first.tallies[Policy.STACK].faults <= first.faults


@pytest.mark.parametrize(("changes", "says"), [
    pytest.param({"rate_per_gpu_hour": 0.0}, "failure rate 0 per GPU-hour is outside (0, 1]", id="rejects no rate"),
    pytest.param({"persistent_share": 1.5}, "persistent share 1.5 is outside [0, 1]", id="rejects a share over 1"),
    pytest.param({"response_s": -1.0}, "response -1 s is outside 0..30 days", id="rejects a negative response"),
])
def test_should_reject_a_model_out_of_bounds(changes: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        model(**changes)


def test_should_refuse_more_faults_than_it_replays(site: Site) -> None:
    with pytest.raises(ValueError, match="more than 100,000 faults"):
        failures.draw_faults(site, model(rate_per_gpu_hour=1.0), 1000 * DAY_S, random.Random(0))


def test_should_hold_no_more_than_the_drain_budget_at_once(site: Site) -> None:
    """Two nodes broken together: the budget (10 % of 16 nodes: 1) drains one; the other runs on, failing jobs, until
    the page's human takes it."""
    faults = [Fault(NODE, 1000.0, 0, True, 60.0), Fault("gpu-a800-02", 1001.0, 0, True, 60.0)]
    tally = Replay(site, model(), Policy.STACK, random.Random(0)).run(faults)
    assert tally.actions["drain"] == 1 and tally.budget_waits > 0 and tally.human_actions == 2
    # gpu-a800-02: its job (60 s), two that fail 300 s in, and 210 s of the one running when the human acts at 1901.
    assert tally.jobs_failed == 5 and tally.work_lost_gpu_s == pytest.approx(GPUS * (60 + 60 + 300 + 300 + 210))
    assert tally.held_gpu_s == pytest.approx(GPUS * (3780 - 1020))
