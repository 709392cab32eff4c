"""Approvals in Slack: the request message, the decision on each click, and the re-check before apply.

A request is a Block Kit message naming the stage, the teams it onboards, the plan digest and the gate
snapshot, with Approve and Reject buttons behind a confirm dialog. Each button's value binds the rollout,
the stage and the plan digest, so a click approves exactly one plan. A click counts when its user is in
the approver group at the moment of the click (usergroups.users.list), is not the requester, and the
request is younger than approval_ttl_hours; `approvers_before_apply` asks the group again and drops
approvals older than the TTL. Every decision, and every click refused, goes to the audit log.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler

from components.spec.site import Slack
from runbooks.rollout.audit import AuditLog
from runbooks.rollout.store import Click, ClickStatus, Rollout, RolloutState, Store

ACTIONS_BLOCK = "rollout-decision"
APPROVE = "approve"
REJECT = "reject"
RATE_LIMIT_RETRIES = 3
"""429 answers retried (each after Slack's Retry-After) before a call fails."""


class Refusal(StrEnum):
    """Why a click does not count; each is audited."""

    UNKNOWN_ROLLOUT = "unknown rollout"
    NOT_OPEN = "the rollout is not awaiting approval"
    DIGEST_MISMATCH = "plan digest mismatch"
    EXPIRED = "the request expired"
    SELF_APPROVAL = "the requester cannot approve"
    NOT_MEMBER = "not a member of the approver group"
    DUPLICATE = "already decided by this user"


def web_client(token: str, base_url: str | None = None) -> WebClient:
    """A WebClient that also retries 429s (slack-sdk's default handlers cover connection errors only)."""
    handlers = [ConnectionErrorRetryHandler(), RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES)]
    if base_url is None:
        return WebClient(token=token, retry_handlers=handlers)
    return WebClient(token=token, base_url=base_url, retry_handlers=handlers)


@dataclass(frozen=True)
class Approver:
    user: str
    approved_at: datetime


class SlackApprovals:
    def __init__(self, client: WebClient, settings: Slack, store: Store, audit: AuditLog,
                 clock: Callable[[], datetime], teams_of: Callable[[str], tuple[list[str], list[str]]]) -> None:
        self.client = client
        self.settings = settings
        self.store = store
        self.audit = audit
        self.clock = clock
        self.teams_of = teams_of
        """stage -> (teams it newly onboards, all teams onboarded by then)."""

    @property
    def ttl(self) -> timedelta:
        return timedelta(hours=self.settings.approval_ttl_hours)

    # --- the message ---------------------------------------------------------------------------

    def post_request(self, rollout: Rollout) -> tuple[str, str]:
        """Post the request; returns (channel id, message ts)."""
        response = self.client.chat_postMessage(channel=self.settings.channel, text=self._text(rollout),
                                                blocks=self.blocks(rollout))
        return str(response["channel"]), str(response["ts"])

    def refresh_message(self, rollout: Rollout) -> None:
        """Make the message show the rollout's current state (idempotent; a resumed wait calls it first).

        A deleted message (message_not_found) is posted again, so approvers still see the decision."""
        if rollout.channel is None or rollout.message_ts is None:
            return
        try:
            self.client.chat_update(channel=rollout.channel, ts=rollout.message_ts, text=self._text(rollout),
                                    blocks=self.blocks(rollout))
        except SlackApiError as error:
            if error.response.get("error") != "message_not_found":
                raise
            channel, ts = self.post_request(rollout)
            self.store.update_rollout(rollout.id, channel=channel, message_ts=ts)

    def _text(self, rollout: Rollout) -> str:
        return f"Rollout {rollout.id}: {rollout.from_stage} -> {rollout.to_stage} ({rollout.state.value})"

    def blocks(self, rollout: Rollout) -> list[dict[str, Any]]:
        new, total = self.teams_of(rollout.to_stage)
        approvals = self.counted(rollout.id)
        gates = rollout.gates or {"results": []}
        gate_lines = "\n".join(
            f"{_GATE_MARK[r['verdict']]} *{r['gate']}*: {r['reason']}" for r in gates["results"]
        ) or "no gate snapshot"
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text",
                                        "text": f"Rollout {rollout.from_stage} → {rollout.to_stage}"}},
            {"type": "section", "fields": [
                {"type": "mrkdwn", "text": f"*Stage*\n{rollout.to_stage}"},
                {"type": "mrkdwn", "text": f"*Requested by*\n<@{rollout.requester}>"},
                {"type": "mrkdwn", "text": f"*Teams onboarded*\n{', '.join(new) or 'none'}"
                                           f" ({len(total)} in all)"},
                {"type": "mrkdwn", "text": f"*Plan digest*\n`{rollout.plan_digest}`"},
            ]},
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*Health gates*\n{gate_lines}"}},
        ]
        who = ", ".join(f"<@{a.user}>" for a in approvals) or "nobody yet"
        if rollout.state == RolloutState.AWAITING_APPROVAL:
            expires = rollout.requested_at + self.ttl
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
                f"{len(approvals)} of {self.settings.approvals_required} approvals from "
                f"<!subteam^{self.settings.approver_group}> ({who}); the requester cannot approve; "
                f"expires {expires:%Y-%m-%d %H:%M} UTC")}]})
            value = json.dumps({"rollout": rollout.id, "stage": rollout.to_stage, "digest": rollout.plan_digest})
            blocks.append({"type": "actions", "block_id": ACTIONS_BLOCK, "elements": [
                _button(APPROVE, "Approve", "primary", value,
                        f"Approve {rollout.to_stage} with plan {rollout.plan_digest}?"),
                _button(REJECT, "Reject", "danger", value, f"Reject the {rollout.to_stage} rollout?"),
            ]})
        else:
            decided = self._decision_line(rollout, who)
            # A new block_id, so clients drop the buttons instead of keeping a stale actions block.
            blocks.append({"type": "section", "block_id": f"decision-{rollout.state.value}",
                           "text": {"type": "mrkdwn", "text": decided}})
        return blocks

    def _decision_line(self, rollout: Rollout, approvers: str) -> str:
        if rollout.state == RolloutState.REJECTED:
            rejecters = [c.user_id for c in self.store.clicks(rollout.id, ClickStatus.COUNTED) if c.action == REJECT]
            return f":x: Rejected by {', '.join(f'<@{u}>' for u in rejecters)}"
        return f":white_check_mark: Approved by {approvers} — now {rollout.state.value.replace('_', ' ')}"

    # --- decisions -----------------------------------------------------------------------------

    def counted(self, rollout_id: str) -> list[Approver]:
        return [Approver(c.user_id, c.decided_at or c.received_at)
                for c in self.store.clicks(rollout_id, ClickStatus.COUNTED) if c.action == APPROVE]

    def members(self) -> set[str]:
        response = self.client.usergroups_users_list(usergroup=self.settings.approver_group)
        return set(response["users"])

    def process_pending(self) -> None:
        """Decide every click received but not yet decided, oldest first."""
        for click in self.store.clicks(status=ClickStatus.PENDING):
            self.decide(click)

    def decide(self, click: Click) -> None:
        rollout = self.store.rollout(click.rollout_id)
        refusal = self._refusal(click, rollout)
        now = self.clock()
        if refusal is not None or rollout is None:
            self.store.decide_click(click, ClickStatus.REFUSED, refusal, now)
            self.audit.append(who=click.user_id, what=f"slack.{click.action}", decision="refused",
                              rollout=click.rollout_id, stage=click.value.get("stage"),
                              plan_digest=click.value.get("digest"),
                              detail={"reason": str(refusal), "source": click.source}, at=now)
            return
        state = rollout.state
        if click.action == REJECT:
            state = RolloutState.REJECTED
        elif len(self.counted(rollout.id)) + 1 >= self.settings.approvals_required:
            state = RolloutState.APPROVED
        self.store.decide_click(click, ClickStatus.COUNTED, None, now, state=state)
        self.audit.append(who=click.user_id, what=f"slack.{click.action}",
                          decision="approved" if click.action == APPROVE else "rejected",
                          rollout=rollout.id, stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                          gates=rollout.gates, detail={"source": click.source, "rollout_state": state.value}, at=now)
        updated = self.store.rollout(rollout.id)
        if updated is not None:
            self.refresh_message(updated)

    def _refusal(self, click: Click, rollout: Rollout | None) -> Refusal | None:
        if rollout is None:
            return Refusal.UNKNOWN_ROLLOUT
        if rollout.state != RolloutState.AWAITING_APPROVAL:
            return Refusal.NOT_OPEN
        if click.value.get("stage") != rollout.to_stage or click.value.get("digest") != rollout.plan_digest:
            return Refusal.DIGEST_MISMATCH
        if self.clock() - rollout.requested_at > self.ttl:
            return Refusal.EXPIRED
        if click.action == APPROVE and click.user_id == rollout.requester:
            return Refusal.SELF_APPROVAL
        if any(c.user_id == click.user_id for c in self.store.clicks(rollout.id, ClickStatus.COUNTED)):
            return Refusal.DUPLICATE
        if click.user_id not in self.members():
            return Refusal.NOT_MEMBER
        return None

    def approvers_before_apply(self, rollout: Rollout) -> tuple[list[Approver], list[str]]:
        """Approvals that still count (member now, younger than the TTL, not the requester), and why the others
        do not."""
        members, now = self.members(), self.clock()
        valid, dropped = [], []
        for approver in self.counted(rollout.id):
            if approver.user == rollout.requester:
                dropped.append(f"{approver.user}: {Refusal.SELF_APPROVAL}")
            elif approver.user not in members:
                dropped.append(f"{approver.user}: no longer a member of the approver group")
            elif now - approver.approved_at > self.ttl:
                dropped.append(f"{approver.user}: approval expired at {approver.approved_at + self.ttl:%Y-%m-%d %H:%M}")
            else:
                valid.append(approver)
        return valid, dropped


_GATE_MARK = {"pass": ":white_check_mark:", "fail": ":x:", "inconclusive": ":warning:"}


def _button(action_id: str, label: str, style: str, value: str, question: str) -> dict[str, Any]:
    return {
        "type": "button", "action_id": action_id, "style": style, "value": value,
        "text": {"type": "plain_text", "text": label},
        "confirm": {
            "title": {"type": "plain_text", "text": "Are you sure?"},
            "text": {"type": "mrkdwn", "text": question},
            "confirm": {"type": "plain_text", "text": label},
            "deny": {"type": "plain_text", "text": "Cancel"},
        },
    }


def click_from_payload(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The fields of a block_actions payload that a decision needs, or None for anything else."""
    if payload.get("type") != "block_actions":
        return None
    actions = [a for a in payload.get("actions", []) if a.get("action_id") in (APPROVE, REJECT)]
    if not actions:
        return None
    action = actions[0]
    try:
        value = json.loads(action.get("value", ""))
    except json.JSONDecodeError:
        value = {}
    if not isinstance(value, dict):
        value = {}
    return {
        "rollout_id": str(value.get("rollout", "")),
        "user_id": str(payload.get("user", {}).get("id", "")),
        "action": action["action_id"],
        "value": value,
        "action_ts": str(action.get("action_ts", "")),
    }
