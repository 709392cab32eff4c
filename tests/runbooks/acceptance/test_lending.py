"""The shock's `lending controller` criterion over recorded looks: the campaign's sampler reads what the real
renderer (runbooks/flex/metrics.py) serves, as a controller's steps change it, on a clock the test sets, and the
verdict judges the looks that fell in the shock. Each way the controller fails the peak fails the criterion, named."""

from collections.abc import Callable

import pytest

from components.scheduling.lending_decision import Owner
from components.site.acceptance import Acceptance
from runbooks.acceptance.lending import ControllerSampler, UnreadableError, parse
from runbooks.acceptance.verdict import Criterion, Measurements, judge
from runbooks.flex.metrics import Metrics

SPEC = Acceptance(peak_source="declared")
SHOCK = (1000.0, 1060.0)
"""The shock step's start and end (time.time())."""
STALE_S = 300.0


class Controller:
    """The lending controller's metrics as its steps leave them (decide, move, lend done), read by the sampler at the
    times the test gives."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.now = 0.0
        self.sampler = ControllerSampler("http://127.0.0.1:9465/metrics", STALE_S, self.metrics.render,
                                         clock=lambda: self.now)

    def decide(self, at: float, action: str = "hold", reason: str = "steady") -> None:
        self.metrics.decisions[(action, reason)] += 1
        self.metrics.last_decision = at

    def look(self, at: float) -> None:
        self.now = at
        self.sampler.look()

    def criterion(self) -> Criterion:
        measured = Measurements(
            started_at=0.0, ended_at=SHOCK[1], steps={"shock": (*SHOCK, {"ran_s": SHOCK[1] - SHOCK[0]})},
            samples=self.sampler.drain(), faults=[], alerts=[], failures=[], poll_s=1.0, storage_rate=None,
            training_states={}, lending=(self.sampler.where, self.sampler.stale_s, ()))
        return next(c for c in judge(SPEC, measured) if c.name == "lending controller")


def steady(controller: Controller, reason: str = "steady") -> None:
    """A decision each 30 s from before the shock on, each looked at a second later: 971 before it, 1001, 1031."""
    for at in range(970, 1031, 30):
        controller.decide(float(at), reason=reason)
        controller.look(at + 1.0)


def lends_at_the_peak(controller: Controller, lent: bool = True) -> None:
    controller.decide(990.0)
    controller.look(991.0)
    controller.decide(1010.0, "lend", "peak")
    controller.metrics.moves["lend"] += 1
    if lent:
        controller.metrics.nodes[Owner.LENT] = 1
        controller.metrics.observe_lend(4.0)
    controller.look(1011.0)
    controller.decide(1040.0, "hold", "cooldown")
    controller.look(1041.0)


def test_should_pass_and_list_its_decisions_when_it_lent_a_node_at_the_peak() -> None:
    controller = Controller()
    lends_at_the_peak(controller)
    criterion = controller.criterion()
    assert criterion.passed, criterion.line()
    assert criterion.phase == "shock" and criterion.measured == (
        "2 looks answered, 0 not; last decision at most 1.0 s old; decisions: hold/cooldown x1, lend/peak x1; lends "
        "started 1, completed 1, reclaims 0, at most 1 nodes lent")
    assert "at most 300 s old (LendingControllerDown's threshold)" in criterion.objective
    assert criterion.source.startswith("the lending controller's /metrics at http://127.0.0.1:9465/metrics")


def paused(controller: Controller) -> None:
    controller.metrics.paused = True
    steady(controller)


def hung(controller: Controller) -> None:
    """Its last decision at 900, looked at in the shock at 1030 with a 120 s threshold."""
    controller.sampler.stale_s = 120.0
    controller.decide(900.0, reason="peak")
    controller.look(1030.0)


@pytest.mark.parametrize(("mutate", "why"), [
    pytest.param(lambda c: lends_at_the_peak(c, lent=False), "1 lends started, no node lent to inference",
                 id="should fail when it lent and no node reached inference"),
    pytest.param(lambda c: steady(c, reason="no-data"), "no decision on demand data",
                 id="should fail when it decided on no data throughout"),
    pytest.param(paused, "paused at 2 looks", id="should fail when it was paused through the shock"),
    pytest.param(hung, "a decision 130.0 s old",
                 id="should fail when its last decision is older than LendingControllerDown allows"),
])
def test_should_fail_the_lending_controller(mutate: Callable[[Controller], None], why: str) -> None:
    controller = Controller()
    mutate(controller)
    criterion = controller.criterion()
    assert not criterion.passed and criterion.measured.startswith(why), criterion.line()


def test_should_fail_when_the_controller_never_answers_in_the_shock() -> None:
    controller = Controller()
    controller.sampler.read = _refused
    controller.look(1010.0)
    criterion = controller.criterion()
    assert not criterion.passed and criterion.measured == "no answer at any look of the shock (1 unreadable)"


def test_should_fail_when_the_campaign_did_not_watch_it() -> None:
    measured = Measurements(0.0, SHOCK[1], {"shock": (*SHOCK, {"ran_s": 60.0})}, {}, [], [], [], 1.0, None, {}, None)
    (criterion,) = [c for c in judge(SPEC, measured) if c.name == "lending controller"]
    assert not criterion.passed and criterion.measured == "not watched (no /metrics to read)"


def test_should_count_decisions_across_a_controller_restart() -> None:
    controller = Controller()
    steady(controller)
    controller.metrics = Metrics()  # restarted: its counters start from 0 again
    controller.sampler.read = controller.metrics.render
    controller.decide(1055.0)
    controller.look(1056.0)
    criterion = controller.criterion()
    # 971 before the shock is the baseline; 1001, 1031 and the restarted one's first at 1056 in the shock.
    assert criterion.passed and "decisions: hold/steady x3" in criterion.measured, criterion.line()


def test_should_refuse_an_answer_that_is_not_the_lending_controllers() -> None:
    with pytest.raises(UnreadableError, match="no gpucluster_flex_last_decision_timestamp_seconds in the answer"):
        parse("# TYPE slurm_nodes gauge\nslurm_nodes{state=\"idle\"} 4\n")


def _refused() -> str:
    raise UnreadableError("http://127.0.0.1:9465/metrics: connection refused")
