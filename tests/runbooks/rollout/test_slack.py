"""slack-sdk against the fake Web API: rate limits retried, invalid_auth holds, a deleted message is reposted."""

import pytest

from runbooks.rollout.machine import StepHeldError
from runbooks.rollout.store import RolloutState
from tests.runbooks.rollout.conftest import APPROVERS, BOT_TOKEN, REQUESTER, Harness, button_value
from tests.runbooks.rollout.fake_slack import Script


def test_should_retry_a_rate_limited_call_after_retry_after(harness: Harness) -> None:
    harness.machine.request("half", REQUESTER)
    harness.slack.script("usergroups.users.list", Script(status=429, retry_after_s=1))
    harness.click(APPROVERS[0])
    assert [a.user for a in harness.approvals.counted("half-1")] == [APPROVERS[0]]
    assert len(harness.slack.called("usergroups.users.list")) == 2


def test_should_hold_the_request_on_invalid_auth_and_post_once_when_resumed(harness: Harness) -> None:
    harness.slack.script("chat.postMessage", Script(error="invalid_auth"))
    with pytest.raises(StepHeldError, match="invalid_auth") as held:
        harness.machine.request("half", REQUESTER)
    assert BOT_TOKEN not in str(held.value)
    rollout = harness.machine.request("half", REQUESTER)
    assert rollout.state == RolloutState.AWAITING_APPROVAL
    assert len(harness.pulumi.previews()) == 1
    assert len(harness.slack.messages) == 1


def test_should_repost_the_decision_when_the_message_was_deleted(harness: Harness) -> None:
    rollout = harness.machine.request("half", REQUESTER)
    assert rollout.message_ts is not None
    value = button_value(harness.slack)
    harness.slack.delete_message(rollout.message_ts)
    harness.click(APPROVERS[0], value=value)
    harness.click(APPROVERS[1], value=value)
    reposted = harness.store.rollout("half-1")
    assert reposted is not None and reposted.state == RolloutState.APPROVED
    assert reposted.message_ts != rollout.message_ts
    assert "Approved by" in str(harness.slack.messages[str(reposted.message_ts)]["blocks"])


def test_should_send_every_call_with_the_token_in_the_header_only(harness: Harness) -> None:
    harness.machine.request("half", REQUESTER)
    harness.click(APPROVERS[0])
    assert all(call.authorized for call in harness.slack.calls)
    assert BOT_TOKEN not in str([call.params for call in harness.slack.calls])


def test_should_post_a_request_naming_stage_teams_digest_and_gates_with_confirmed_buttons(harness: Harness) -> None:
    rollout = harness.machine.request("half", REQUESTER)
    text = str(harness.slack.messages[str(rollout.message_ts)]["blocks"])
    for fact in ("half", "vision, multimodal, rl, code-llm", "(6 in all)", str(rollout.plan_digest),
                 "critical_alerts", "gpu_utilization", "train_queue_time", "inference_error_rate"):
        assert fact in text
    actions = [b for b in harness.slack.messages[str(rollout.message_ts)]["blocks"] if b["type"] == "actions"]
    assert [e["action_id"] for e in actions[0]["elements"]] == ["approve", "reject"]
    assert all("confirm" in e for e in actions[0]["elements"])
