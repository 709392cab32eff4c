"""Approvals in Slack: the request message, the decision on each click, and the re-check before apply.

A request is a Block Kit message naming the stage, the teams it onboards, the plan digest and the gate
snapshot, with Approve and Reject buttons behind a confirm dialog. Each button's value binds the rollout,
the stage and the plan digest, so a click approves exactly one plan. A click counts when it comes from the
configured workspace and app and the request's channel, its user is in the approver group at the moment of
the click (usergroups.users.list), is not the requester, and the request is younger than approval_ttl_hours.

Identities come from Slack only: the requester is the owner of the user token `request` runs with
(auth.test), an approver is the user of a click Slack signed or sent over the app's socket. Every decision
goes to the keyed audit log first and is then recorded in the state with the audit record's mac; an approval
counts only while that record is authentic, so a row written straight into the state counts for nothing.
`approvers_before_apply` re-derives everything from the audit log: who requested, who approved which plan
digest and when, and asks the group again.
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

from components.site.site import Slack
from runbooks.rollout.store import Click, ClickStatus, Rollout, RolloutState, Store
from runbooks.stack.audit import AuditLog, AuditRecord, ChainHead

ACTIONS_BLOCK = "rollout-decision"
APPROVE = "approve"
REJECT = "reject"
RATE_LIMIT_RETRIES = 3
"""429 answers retried (each after Slack's Retry-After) before a call fails."""


class Refusal(StrEnum):
    """Why a click does not count; each is audited."""

    NO_IDENTITY = "the click names no user"
    OTHER_WORKSPACE = "not from the configured Slack workspace (slack.workspace_id)"
    OTHER_APP = "not sent to the configured Slack app (slack.app_id)"
    OTHER_CHANNEL = "not from the channel the request was posted in"
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


class IdentityError(Exception):
    """Slack does not vouch for a person behind the token; the message names the variable and why."""


def token_owner(client: WebClient, workspace_id: str, variable: str) -> str:
    """The Slack user who owns the client's token (auth.test): a person, in the configured workspace."""
    try:
        response = client.auth_test()
    except SlackApiError as error:
        raise IdentityError(f"Slack refused {variable}: {error.response.get('error')}") from None
    if response.get("bot_id"):
        raise IdentityError(f"{variable} is a bot token: the requester is a person, who runs `request` with their "
                            "own user token (xoxp-)")
    user, team = str(response.get("user_id") or ""), str(response.get("team_id") or "")
    if not user.strip():
        raise IdentityError(f"Slack names no user for {variable}")
    if team != workspace_id:
        raise IdentityError(f"{variable} belongs to Slack workspace {team!r}, not slack.workspace_id {workspace_id}")
    return user


@dataclass(frozen=True)
class Approver:
    user: str
    approved_at: datetime
    plan_digest: str | None
    """The digest the audited approval was given for."""


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
        self._bot_id: str | None = None

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

    def post_head(self, rollout: Rollout, head: ChainHead) -> None:
        """Post the audit chain's head to the request's thread: a copy of it the state dir's owner cannot edit."""
        if rollout.channel is not None and rollout.message_ts is not None:
            self.client.chat_postMessage(channel=rollout.channel, thread_ts=rollout.message_ts, text=head.text())

    def posted_heads(self, rollout: Rollout) -> list[ChainHead]:
        """The heads this app posted to the rollout's thread (conversations.replies), oldest first."""
        if rollout.channel is None or rollout.message_ts is None:
            return []
        if self._bot_id is None:
            self._bot_id = str(self.client.auth_test().get("bot_id") or "")
        heads: list[ChainHead] = []
        # A SlackResponse iterates over its pages (response_metadata.next_cursor).
        for page in self.client.conversations_replies(channel=rollout.channel, ts=rollout.message_ts, limit=200):
            for message in page.get("messages", []):
                head = ChainHead.parse(str(message.get("text", "")))
                if head is not None and message.get("bot_id") == self._bot_id:
                    heads.append(head)
        return heads

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
        newer = self.store.rollout(rollout.superseded_by) if rollout.superseded_by else None
        if rollout.state == RolloutState.SUPERSEDED and newer is not None:
            return (f":no_entry_sign: Superseded by {newer.id} ({newer.from_stage} → {newer.to_stage}, started by "
                    f"{newer.requester} at {newer.requested_at:%Y-%m-%d %H:%M} UTC): these buttons count no more")
        if rollout.state == RolloutState.REJECTED:
            rejecters = [c.user_id for c in self.store.clicks(rollout.id, ClickStatus.COUNTED) if c.action == REJECT]
            return f":x: Rejected by {', '.join(f'<@{u}>' for u in rejecters)}"
        return f":white_check_mark: Approved by {approvers} — now {rollout.state.value.replace('_', ' ')}"

    # --- decisions -----------------------------------------------------------------------------

    def counted(self, rollout_id: str) -> list[Approver]:
        """The approvals of `rollout_id` that have an authentic audit record."""
        return self._audited_approvals(rollout_id, self.audit.authentic())[0]

    def _audited_approvals(self, rollout_id: str,
                           audited: dict[str, AuditRecord]) -> tuple[list[Approver], list[str]]:
        """(approvals backed by their audit record, users whose counted row has none)."""
        approvers, unaudited = [], []
        for click in self.store.clicks(rollout_id, ClickStatus.COUNTED):
            if click.action != APPROVE:
                continue
            record = audited.get(click.audit_mac or "")
            if record is None or (record.what, record.decision, record.who, record.rollout,
                                  record.detail.get("action_ts")) != (f"slack.{APPROVE}", "approved", click.user_id,
                                                                      rollout_id, click.action_ts):
                unaudited.append(click.user_id)
                continue
            approvers.append(Approver(click.user_id, datetime.fromisoformat(record.at), record.plan_digest))
        return approvers, unaudited

    def members(self) -> set[str]:
        response = self.client.usergroups_users_list(usergroup=self.settings.approver_group)
        return set(response["users"])

    def process_pending(self) -> None:
        """Decide every click received but not yet decided, oldest first."""
        for click in self.store.clicks(status=ClickStatus.PENDING):
            self.decide(click)

    def decide(self, click: Click) -> None:
        """Audit the decision on `click`, then record it in the state: what is not audited never counts."""
        rollout = self.store.rollout(click.rollout_id)
        refusal = self._refusal(click, rollout)
        now = self.clock()
        seen = {"source": click.source, "action_ts": click.action_ts}
        if refusal is not None or rollout is None:
            refused = self.audit.append(
                who=click.user_id or "(none)", what=f"slack.{click.action}", decision="refused",
                rollout=click.rollout_id, stage=click.value.get("stage"), plan_digest=click.value.get("digest"),
                detail={**seen, "reason": str(refusal), "workspace": click.team_id, "app": click.app_id,
                        "channel": click.channel_id}, at=now)
            self.store.decide_click(click, ClickStatus.REFUSED, refusal, now, refused.mac)
            return
        state = rollout.state
        if click.action == REJECT:
            state = RolloutState.REJECTED
        elif len(self.counted(rollout.id)) + 1 >= self.settings.approvals_required:
            state = RolloutState.APPROVED
        record = self.audit.append(who=click.user_id, what=f"slack.{click.action}",
                                   decision="approved" if click.action == APPROVE else "rejected",
                                   rollout=rollout.id, stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                                   gates=rollout.gates, detail={**seen, "rollout_state": state.value}, at=now)
        self.store.decide_click(click, ClickStatus.COUNTED, None, now, record.mac, state=state)
        updated = self.store.rollout(rollout.id)
        if updated is not None:
            self.refresh_message(updated)
            self.post_head(updated, ChainHead(record.seq, record.mac))

    def _refusal(self, click: Click, rollout: Rollout | None) -> Refusal | None:
        if not click.user_id.strip():
            return Refusal.NO_IDENTITY
        if click.team_id != self.settings.workspace_id:
            return Refusal.OTHER_WORKSPACE
        if click.app_id != self.settings.app_id:
            return Refusal.OTHER_APP
        if rollout is None:
            return Refusal.UNKNOWN_ROLLOUT
        if click.channel_id != rollout.channel:
            return Refusal.OTHER_CHANNEL
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

    def approvers_before_apply(self, rollout: Rollout, digest: str) -> tuple[list[Approver], list[str]]:
        """Approvals that still count for deploying the plan whose bytes hash to `digest`, and why the others do
        not. Only the audit log is believed: the requester is who its request record names, an approval is its
        authentic record (for this digest, younger than the TTL) whose user is still in the group."""
        audited = self.audit.authentic()
        requests = [r for r in audited.values()
                    if (r.what, r.decision, r.rollout) == ("rollout.request", "started", rollout.id)]
        if not requests:
            return [], [f"the audit log has no record of who requested {rollout.id}"]
        requester = max(requests, key=lambda r: r.seq).who
        approvals, unaudited = self._audited_approvals(rollout.id, audited)
        dropped = [f"{user}: the state counts an approval the audit log has no record of" for user in unaudited]
        members, now, valid = self.members(), self.clock(), []
        for approver in approvals:
            if approver.user == requester:
                dropped.append(f"{approver.user}: {Refusal.SELF_APPROVAL}")
            elif approver.plan_digest != digest:
                dropped.append(f"{approver.user}: approved plan {approver.plan_digest}, not {digest}")
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
    """The fields of a block_actions payload that a decision needs, or None for anything else. Whatever shape the
    sender gave a field, a missing or malformed one reads as empty (and is refused), never as an error."""
    if payload.get("type") != "block_actions":
        return None
    actions = [a for a in _list(payload.get("actions")) if a.get("action_id") in (APPROVE, REJECT)]
    if not actions:
        return None
    action = actions[0]
    try:
        value = json.loads(str(action.get("value", "")))
    except json.JSONDecodeError:
        value = {}
    return {
        "rollout_id": _id(value, "rollout") if isinstance(value, dict) else "",
        "user_id": _id(payload.get("user"), "id"),
        "action": action["action_id"],
        "value": value if isinstance(value, dict) else {},
        "action_ts": _id(action, "action_ts"),
        "team_id": _id(payload.get("team"), "id"),
        "app_id": _id(payload, "api_app_id"),
        # channel.id for a message's buttons; container.channel_id says the same where channel is left out.
        "channel_id": _id(payload.get("channel"), "id") or _id(payload.get("container"), "channel_id"),
    }


MAX_ID_CHARS = 64
"""Slack ids are a dozen characters; a longer one is cut here (and matches nothing) before it is stored."""


def _id(holder: object, key: str) -> str:
    found = holder.get(key) if isinstance(holder, dict) else None
    return found[:MAX_ID_CHARS] if isinstance(found, str) else ""


def _list(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
