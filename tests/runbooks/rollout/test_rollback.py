"""Rollback: automatic when the update fails or does not verify; break-glass without Slack, audited."""

from runbooks.rollout.gates import PrometheusGates
from runbooks.rollout.machine import StepEvent
from runbooks.rollout.store import RolloutState
from tests.runbooks.rollout.conftest import GATE_WINDOW_MINUTES, Harness, Worlds
from tests.runbooks.rollout.test_resume import drive


def test_should_roll_back_when_the_update_fails(harness: Harness) -> None:
    harness.pulumi.fail_up = "error: preview failed: policy violation"
    drive(harness)
    rollout = harness.store.rollout("half-1")
    assert rollout is not None and rollout.state == RolloutState.ROLLED_BACK
    first, second = harness.pulumi.ups()
    assert "--plan" in first and "--plan" not in second and "--policy-pack" in second
    assert harness.pulumi.config["gpu-cluster:stage"] == "canary"


def test_should_roll_back_when_a_critical_alert_fires_after_the_deploy(harness: Harness, worlds: Worlds) -> None:
    def incident_during_deploy(event: StepEvent) -> None:
        if (event.step, event.phase) == ("deploy", "begin"):
            harness.machine.gates = PrometheusGates(worlds.unhealthy.url, harness.site.rollout.gates,
                                                    GATE_WINDOW_MINUTES, harness.clock)
    harness.machine.events = incident_during_deploy
    drive(harness)
    rollout = harness.store.rollout("half-1")
    assert rollout is not None and rollout.state == RolloutState.ROLLED_BACK
    assert [s.step for s in harness.store.steps("half-1")][-2:] == ["verify", "rollback"]
    assert harness.pulumi.outputs["stage"] == "canary"


def test_should_roll_back_by_break_glass_without_slack_and_audit_it(harness: Harness) -> None:
    drive(harness)
    harness.machine.approvals = None
    harness.slack.calls.clear()
    rollout = harness.machine.rollback("canary", operator="alice", reason="XID 79 storm on a03")
    assert rollout.state == RolloutState.ROLLED_BACK
    assert harness.pulumi.outputs["stage"] == "canary"
    assert harness.slack.calls == []
    records = [r for r in harness.audit.records() if r.what == "break_glass.rollback"]
    assert [(r.who, r.decision) for r in records] == [("alice", "started"), ("alice", "rolled_back")]
    assert records[0].detail["reason"] == "XID 79 storm on a03"
    assert harness.audit.verify().records > 0
