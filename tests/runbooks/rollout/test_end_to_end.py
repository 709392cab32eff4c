"""From canary to full: two approvers in Slack (Socket Mode), gates from a real Prometheus, each stage
deployed through the Automation API with the saved plan and the policy pack."""

import threading
from pathlib import Path

from runbooks.rollout.receivers import SocketModeReceiver
from runbooks.rollout.store import RolloutState
from tests.runbooks.rollout.conftest import APP_TOKEN, APPROVERS, REQUESTER, SECRETS, Harness, block_actions
from tests.runbooks.rollout.fake_socket_mode import FakeSocketMode


def advance(harness: Harness, socket_mode: FakeSocketMode, stage: str) -> None:
    rollout = harness.machine.request(stage, REQUESTER)
    assert rollout.state == RolloutState.AWAITING_APPROVAL
    receiver = SocketModeReceiver(APP_TOKEN, harness.approvals.client, harness.inbox())
    waiter = threading.Thread(target=lambda: harness.machine.wait(receiver, timeout_s=20, poll_s=0.05))
    waiter.start()
    try:
        for user in APPROVERS[:2]:
            socket_mode.wait_ack(socket_mode.push(block_actions(harness.slack, user, "approve")))
    finally:
        waiter.join(timeout=25)
    assert not waiter.is_alive()
    assert harness.store.rollout(rollout.id).state == RolloutState.APPROVED  # type: ignore[union-attr]
    done = harness.machine.apply()
    assert done.state == RolloutState.DONE
    assert done.outputs == {"stage": stage, "gpu_count": 128}


def test_should_advance_canary_to_full_with_two_approvers_and_passing_gates(
        harness: Harness, socket_mode: FakeSocketMode) -> None:
    advance(harness, socket_mode, "half")
    harness.clock.advance(days=29)
    # half is another deployment: it needs its own passed acceptance campaign before full onboards anyone.
    harness.accept()
    advance(harness, socket_mode, "full")

    previews, ups = harness.pulumi.previews(), harness.pulumi.ups()
    assert len(previews) == 2 and len(ups) == 2
    for preview, up, applied, rollout in zip(previews, ups, harness.pulumi.applied_plans, harness.store.rollouts(),
                                             strict=True):
        plan = preview[preview.index("--save-plan") + 1]
        assert plan == rollout.plan_path
        assert preview[preview.index("--policy-pack") + 1] == "policy"
        assert "--plan" in up and applied == Path(plan).read_bytes()
        assert up[up.index("--policy-pack") + 1] == "policy"
    assert harness.audit.verify().records > 0
    for secret in SECRETS:
        assert secret not in (harness.state_dir / "audit.jsonl").read_text()
    decided = [c.params for c in harness.slack.called("chat.update")]
    final = [m for m in decided if any("Approved by <@U0ALICE>, <@U0BOB>" in b.get("text", {}).get("text", "")
                                       for b in m["blocks"])]
    assert final, "the message was never updated with the decision and who made it"
    assert all(b["type"] != "actions" for b in final[-1]["blocks"])
