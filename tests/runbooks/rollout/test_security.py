"""Security cases: each is refused and audited. Clicks reach the HTTP receiver as Slack sends them (signed,
form-encoded), or the inbox directly where the transport is not the point."""

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_sdk.signature import SignatureVerifier

from runbooks.rollout.machine import RolloutHaltedError, StepHeldError
from runbooks.rollout.receivers import HttpReceiver
from runbooks.rollout.store import ClickStatus, RolloutState
from tests.runbooks.rollout.conftest import APPROVERS, REQUESTER, SIGNING_SECRET, Harness, block_actions


@pytest.fixture
def awaiting(harness: Harness) -> Harness:
    harness.machine.request("half", REQUESTER)
    return harness


@pytest.fixture
def receiver(awaiting: Harness) -> Iterator[HttpReceiver]:
    server = HttpReceiver(SIGNING_SECRET, awaiting.inbox(), awaiting.store, awaiting.audit)
    server.start()
    yield server
    server.stop()


def post(receiver: HttpReceiver, payload: dict[str, object], timestamp: int | None = None,
         secret: str = SIGNING_SECRET, signature: str | None = None) -> int:
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    signed = signature or SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    request = urllib.request.Request(receiver.url, data=body.encode(), method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": str(signed)})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status = int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    # The receiver acks before it decides (Slack's 3 s rule): wait for the decision, boundedly.
    deadline = time.monotonic() + 5
    while receiver.store.clicks(status=ClickStatus.PENDING) and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


def refusals(harness: Harness) -> list[str]:
    return [r.detail.get("reason", "") for r in harness.audit.records() if r.decision == "refused"]


def test_should_count_a_signed_click_from_a_member(awaiting: Harness, receiver: HttpReceiver) -> None:
    assert post(receiver, block_actions(awaiting.slack, APPROVERS[0], "approve")) == 200
    assert [a.user for a in awaiting.approvals.counted("half-1")] == [APPROVERS[0]]


def test_should_refuse_a_forged_signature(awaiting: Harness, receiver: HttpReceiver) -> None:
    assert post(receiver, block_actions(awaiting.slack, APPROVERS[0], "approve"), secret="not-the-secret") == 401
    assert awaiting.approvals.counted("half-1") == []
    assert refusals(awaiting) == ["forged signature"]


def test_should_refuse_a_replayed_request(awaiting: Harness, receiver: HttpReceiver) -> None:
    payload, stamp = block_actions(awaiting.slack, APPROVERS[0], "approve"), int(time.time())
    assert post(receiver, payload, stamp) == 200
    assert post(receiver, payload, stamp) == 401
    assert refusals(awaiting) == ["replayed request"]


def test_should_refuse_a_stale_timestamp(awaiting: Harness, receiver: HttpReceiver) -> None:
    assert post(receiver, block_actions(awaiting.slack, APPROVERS[0], "approve"), int(time.time()) - 301) == 401
    assert refusals(awaiting) == ["stale timestamp"]


def test_should_refuse_self_approval(awaiting: Harness) -> None:
    awaiting.click(REQUESTER)
    assert awaiting.approvals.counted("half-1") == []
    assert refusals(awaiting) == ["the requester cannot approve"]


def test_should_refuse_a_click_from_outside_the_approver_group(awaiting: Harness) -> None:
    awaiting.click("U0OUTSIDER")
    assert refusals(awaiting) == ["not a member of the approver group"]


def test_should_refuse_a_click_bound_to_another_plan_digest(awaiting: Harness) -> None:
    awaiting.click(APPROVERS[0], value={"rollout": "half-1", "stage": "half", "digest": "sha256:" + "0" * 64})
    assert refusals(awaiting) == ["plan digest mismatch"]


def test_should_count_each_approver_once(awaiting: Harness) -> None:
    awaiting.click(APPROVERS[0])
    awaiting.click(APPROVERS[0])
    assert len(awaiting.approvals.counted("half-1")) == 1
    assert awaiting.store.rollout("half-1").state == RolloutState.AWAITING_APPROVAL  # type: ignore[union-attr]


def approved(harness: Harness) -> Harness:
    harness.click(APPROVERS[0])
    harness.click(APPROVERS[1])
    assert harness.store.rollout("half-1").state == RolloutState.APPROVED  # type: ignore[union-attr]
    return harness


def test_should_hold_apply_when_an_approver_left_the_group_before_apply(awaiting: Harness) -> None:
    approved(awaiting).slack.members.discard(APPROVERS[1])
    with pytest.raises(StepHeldError, match="no longer a member"):
        awaiting.machine.apply()
    assert awaiting.pulumi.ups() == []
    held = [r for r in awaiting.audit.records() if r.decision == "held"]
    assert "no longer a member" in held[-1].detail["reason"]


def test_should_hold_apply_when_an_approval_expired(awaiting: Harness) -> None:
    approved(awaiting).clock.advance(hours=awaiting.site.slack.approval_ttl_hours + 1)
    with pytest.raises(StepHeldError, match="approval expired"):
        awaiting.machine.apply()
    assert awaiting.pulumi.ups() == []


def test_should_refuse_clicks_on_an_expired_request(awaiting: Harness) -> None:
    awaiting.clock.advance(hours=awaiting.site.slack.approval_ttl_hours + 1)
    awaiting.click(APPROVERS[0])
    assert refusals(awaiting) == ["the request expired"]


def test_should_stop_the_rollout_when_the_plan_changed_after_approval(awaiting: Harness) -> None:
    approved(awaiting)
    plan = Path(str(awaiting.store.rollout("half-1").plan_path))  # type: ignore[union-attr]
    plan.write_text(plan.read_text().replace('"half"', '"full"'))
    with pytest.raises(RolloutHaltedError, match="plan digest mismatch"):
        awaiting.machine.apply()
    assert awaiting.pulumi.ups() == []
    assert awaiting.store.rollout("half-1").state == RolloutState.FAILED  # type: ignore[union-attr]
    assert any("plan digest mismatch" in r.detail.get("reason", "") for r in awaiting.audit.records())


def test_should_end_the_request_on_a_reject_and_restore_the_stack_config(awaiting: Harness) -> None:
    awaiting.inbox().receive(block_actions(awaiting.slack, APPROVERS[2], "reject"), "socket_mode")
    assert awaiting.machine.wait(_NoReceiver(), timeout_s=1).state == RolloutState.REJECTED
    assert awaiting.pulumi.config["gpu-cluster:stage"] == "canary"
    update = awaiting.slack.called("chat.update")[-1].params
    assert any(f"Rejected by <@{APPROVERS[2]}>" in b.get("text", {}).get("text", "") for b in update["blocks"])


def test_should_keep_pending_clicks_across_a_restart(awaiting: Harness) -> None:
    awaiting.inbox().receive(block_actions(awaiting.slack, APPROVERS[0], "approve"), "http")
    restarted = awaiting.build()
    assert [c.status for c in awaiting.store.clicks("half-1")] == [ClickStatus.PENDING]
    restarted.wait(_NoReceiver(), timeout_s=0.2)
    assert [a.user for a in awaiting.approvals.counted("half-1")] == [APPROVERS[0]]


class _NoReceiver:
    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None


def raw_post(receiver: HttpReceiver, body: bytes, content_length: str) -> int:
    """A request as an attacker writes it: the Content-Length header is theirs."""
    host, port = receiver.url.split("/")[2].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(b"POST /slack/interactions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + content_length.encode() + b"\r\nConnection: close\r\n\r\n" + body)
        connection.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    return int(reply.split()[1])


@pytest.mark.parametrize(("content_length", "status"), [
    pytest.param("abc", 400, id="a Content-Length that is no number"),
    pytest.param("-1", 400, id="a negative Content-Length, which would read to the end"),
    pytest.param(str(10 * 2**20), 413, id="a body over the cap"),
])
def test_should_refuse_a_body_it_cannot_bound(awaiting: Harness, receiver: HttpReceiver, content_length: str,
                                              status: int) -> None:
    assert raw_post(receiver, b"payload=x" * 100, content_length) == status
    assert awaiting.approvals.counted("half-1") == []


@pytest.mark.parametrize("user", [pytest.param("x", id="a user that is a string"),
                                  pytest.param({"id": "U" + "A" * 60_000}, id="60 kB of attacker text")])
def test_should_audit_a_forged_request_without_its_text(awaiting: Harness, receiver: HttpReceiver,
                                                        user: object) -> None:
    payload = {**block_actions(awaiting.slack, APPROVERS[0], "approve"), "user": user}
    assert post(receiver, payload, secret="not-the-secret") == 401
    (record,) = [r for r in awaiting.audit.records() if r.decision == "refused"]
    assert (record.who, record.detail["reason"]) == ("unverified", "forged signature")
    assert len((awaiting.state_dir / "audit.jsonl").read_text().splitlines()[-1]) < 1024


@pytest.mark.parametrize(("change", "reason"), [
    pytest.param({"user": {}}, "the click names no user", id="a click with no user"),
    pytest.param({"user": "x"}, "the click names no user", id="a user that is no object"),
    pytest.param({"user": {"id": ""}}, "the click names no user", id="an empty user id"),
    pytest.param({"team": {"id": "T0ELSEWHERE"}}, "not from the configured Slack workspace (slack.workspace_id)",
                 id="a click from another workspace"),
    pytest.param({"api_app_id": "A0OTHERAPP"}, "not sent to the configured Slack app (slack.app_id)",
                 id="a click sent to another app"),
    pytest.param({"channel": {"id": "C0ELSEWHERE"}, "container": {"type": "message", "channel_id": "C0ELSEWHERE"}},
                 "not from the channel the request was posted in", id="a click from another channel"),
])
def test_should_refuse_a_signed_click_from_no_one_or_elsewhere(awaiting: Harness, receiver: HttpReceiver,
                                                               change: dict[str, object], reason: str) -> None:
    assert post(receiver, {**block_actions(awaiting.slack, APPROVERS[0], "approve"), **change}) == 200
    assert awaiting.approvals.counted("half-1") == []
    assert refusals(awaiting) == [reason]
    assert [c.status for c in awaiting.store.clicks("half-1")] == [ClickStatus.REFUSED]
