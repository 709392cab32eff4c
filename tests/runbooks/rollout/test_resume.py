"""A crash at every step, then a fresh process resumes: no deploy twice, no approval lost."""

import pytest

from runbooks.rollout.machine import APPLY_STEPS, REQUEST_STEPS, StepEvent
from runbooks.rollout.store import RolloutState
from tests.runbooks.rollout.conftest import APPROVERS, REQUESTER, Harness
from tests.runbooks.rollout.fake_pulumi import Crash

POINTS = [(step, phase) for step in (*REQUEST_STEPS, *APPLY_STEPS) for phase in ("begin", "end")]


def drive(harness: Harness) -> None:
    """Bring the half rollout to done from wherever it stands, as an operator would by rerunning commands."""
    rollout = harness.store.open_rollout()
    if rollout is None or rollout.state == RolloutState.REQUESTING:
        harness.machine.request("half", REQUESTER)
        rollout = harness.store.open_rollout()
    assert rollout is not None
    if rollout.state == RolloutState.AWAITING_APPROVAL:
        for user in APPROVERS[:2]:
            harness.click(user)
    harness.machine.apply()


def crash_at(step: str, phase: str) -> object:
    def events(event: StepEvent) -> None:
        if (event.step, event.phase) == (step, phase):
            raise Crash(f"killed at {phase} of {step}")
    return events


@pytest.mark.parametrize("step, phase", POINTS, ids=[f"resumes after a kill at the {p} of {s}" for s, p in POINTS])
def test_should_resume_without_deploying_twice_or_losing_an_approval(harness: Harness, step: str, phase: str) -> None:
    harness.machine.events = crash_at(step, phase)  # type: ignore[assignment]
    with pytest.raises(Crash):
        drive(harness)
    approvals_before = {a.user for a in harness.approvals.counted("half-1")}
    harness.build()
    drive(harness)
    rollout = harness.store.rollout("half-1")
    assert rollout is not None and rollout.state == RolloutState.DONE
    assert len(harness.pulumi.ups()) == 1
    assert approvals_before <= {a.user for a in harness.approvals.counted("half-1")}
    assert len(harness.approvals.counted("half-1")) == 2
    assert harness.audit.verify().records > 0


def test_should_not_run_up_again_when_killed_after_the_update_finished(harness: Harness) -> None:
    harness.pulumi.crash_after_up = True
    with pytest.raises(Crash):
        drive(harness)
    harness.build()
    drive(harness)
    assert len(harness.pulumi.ups()) == 1
    assert harness.store.rollout("half-1").outputs == {"stage": "half", "gpu_count": 128}  # type: ignore[union-attr]
