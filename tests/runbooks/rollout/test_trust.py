"""What an adversary with a shell on the rollout host tries (issue 21): swap the plan while apply is held, run two
applies at once, request as someone else, write approvals straight into the state, rewrite or cut the audit
log, tear its last line, break glass over an approved request, point --state-dir at nothing. Each is driven
through the CLI or the state machine as the attacker would, and each is refused, held or detected."""

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from runbooks.rollout.gates import PrometheusGates
from runbooks.rollout.machine import RolloutHaltedError, StepHeldError
from runbooks.rollout.store import ClickStatus, RolloutState
from tests.runbooks.rollout.conftest import (
    APPROVERS,
    BOT_TOKEN,
    GATE_WINDOW_MINUTES,
    REQUESTER,
    WORKSPACE_ID,
    Harness,
    Worlds,
    run,
)


def approved(harness: Harness) -> Harness:
    harness.machine.request("half", REQUESTER)
    harness.click(APPROVERS[0])
    harness.click(APPROVERS[1])
    assert harness.store.rollout("half-1").state == RolloutState.APPROVED  # type: ignore[union-attr]
    return harness


def held_at_the_gates(harness: Harness, worlds: Worlds) -> None:
    """apply passes its plan and approval checks, then holds on an unhealthy cluster; health comes back after."""
    healthy = harness.machine.gates
    harness.machine.gates = PrometheusGates(worlds.unhealthy.url, harness.site.rollout.gates, GATE_WINDOW_MINUTES,
                                            harness.clock)
    with pytest.raises(StepHeldError, match='held at "check_gates_before_apply"'):
        harness.machine.apply()
    harness.machine.gates = healthy


def plan_of(harness: Harness) -> Path:
    return Path(str(harness.store.rollout("half-1").plan_path))  # type: ignore[union-attr]


def audited(harness: Harness, what: str) -> list[tuple[str, str]]:
    return [(r.decision, str(r.detail.get("reason", ""))) for r in harness.audit.records() if r.what == what]


# --- 1. every apply re-checks, from the bytes it deploys ----------------------------------------------------

def test_should_refuse_a_plan_swapped_while_apply_was_held_at_the_gates(harness: Harness, worlds: Worlds) -> None:
    held_at_the_gates(approved(harness), worlds)
    plan_of(harness).write_text(plan_of(harness).read_text().replace('"half"', '"full"'))
    with pytest.raises(RolloutHaltedError, match="plan digest mismatch"):
        harness.machine.apply()
    assert harness.pulumi.ups() == []
    assert audited(harness, "step.check_plan")[-1][0] == "failed"


def test_should_refuse_a_swapped_plan_whose_digest_was_written_into_the_state_too(harness: Harness,
                                                                                 worlds: Worlds) -> None:
    held_at_the_gates(approved(harness), worlds)
    swapped = plan_of(harness).read_text().replace('"half"', '"full"')
    plan_of(harness).write_text(swapped)
    with sqlite3.connect(harness.state_dir / "rollout.sqlite") as db:
        db.execute("UPDATE rollouts SET plan_digest = ?", ("sha256:" + hashlib.sha256(swapped.encode()).hexdigest(),))
    with pytest.raises(StepHeldError, match="0 of 2 approvals still count .*U0ALICE: approved plan sha256:"):
        harness.machine.apply()
    assert harness.pulumi.ups() == []


def test_should_recheck_approvers_and_expiry_when_apply_resumes_after_a_hold(harness: Harness,
                                                                            worlds: Worlds) -> None:
    held_at_the_gates(approved(harness), worlds)
    harness.slack.members.discard(APPROVERS[1])
    harness.clock.advance(hours=10 * harness.site.slack.approval_ttl_hours)
    with pytest.raises(StepHeldError, match='held at "check_approvals".*U0ALICE: approval expired.*'
                                            'U0BOB: no longer a member'):
        harness.machine.apply()
    assert harness.pulumi.ups() == []
    assert audited(harness, "step.check_approvals")[-1][0] == "held"


# --- 2. one apply per stack; a locked stack is not a failed deploy -------------------------------------------

def test_should_hold_a_second_apply_while_the_first_one_deploys(gpuctl: Harness) -> None:
    approved(gpuctl)
    second: list[tuple[int, str]] = []
    gpuctl.pulumi.during_up = lambda: second.append(run(gpuctl, "apply"))
    assert gpuctl.machine.apply().state == RolloutState.DONE
    ((code, text),) = second
    assert code == 3, text
    assert "held" in text and "`gpuctl rollout apply`" in text and "prod.lock" in text
    assert len(gpuctl.pulumi.ups()) == 1
    ((decision, reason),) = audited(gpuctl, "rollout.apply")
    assert decision == "held" and "holds" in reason


def test_should_hold_and_not_roll_back_when_another_update_holds_the_stack(harness: Harness) -> None:
    approved(harness).pulumi.locked_by = "an operator's `pulumi up`"
    with pytest.raises(StepHeldError, match='held at "deploy" step: the stack is locked by another update '
                                            '.*409.*: run this again'):
        harness.machine.apply()
    assert [up for up in harness.pulumi.ups() if "--plan" not in up] == []  # no rollback ran
    assert harness.pulumi.outputs["stage"] == "canary"
    assert harness.store.rollout("half-1").state == RolloutState.APPLYING  # type: ignore[union-attr]
    harness.pulumi.locked_by = None
    assert harness.machine.apply().state == RolloutState.DONE


# --- 3. identities come from Slack ------------------------------------------------------------------------

def test_should_take_the_requester_from_the_token_not_a_flag_or_the_environment(
        gpuctl: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    code, text = run(gpuctl, "request", "half", "--requester", APPROVERS[0])
    assert code == 2 and "No such option" in text
    monkeypatch.setenv("GPUCTL_SLACK_USER", APPROVERS[0])
    code, text = run(gpuctl, "request", "half")
    assert code == 0, text
    gpuctl.build()
    assert gpuctl.store.rollout("half-1").requester == REQUESTER  # type: ignore[union-attr]
    gpuctl.click(REQUESTER)
    assert gpuctl.approvals.counted("half-1") == []
    assert audited(gpuctl, "slack.approve") == [("refused", "the requester cannot approve")]


@pytest.mark.parametrize(("token", "identity", "message"), [
    pytest.param(None, None, "SLACK_USER_TOKEN is not set", id="no user token"),
    pytest.param(BOT_TOKEN, None, "SLACK_USER_TOKEN is a bot token", id="the bot's token"),
    pytest.param("xoxp-nobody", {"user_id": "", "team_id": WORKSPACE_ID}, "Slack names no user for SLACK_USER_TOKEN",
                 id="a token Slack names no user for"),
    pytest.param("xoxp-elsewhere", {"user_id": "U0ALICE", "team_id": "T0ELSEWHERE"},
                 "belongs to Slack workspace 'T0ELSEWHERE', not slack.workspace_id", id="a user of another workspace"),
    pytest.param("xoxp-revoked", None, "Slack refused SLACK_USER_TOKEN: invalid_auth", id="a revoked token"),
])
def test_should_refuse_a_request_no_person_of_the_workspace_stands_behind(
        gpuctl: Harness, monkeypatch: pytest.MonkeyPatch, token: str | None, identity: dict[str, str] | None,
        message: str) -> None:
    if token is None:
        monkeypatch.delenv("SLACK_USER_TOKEN")
    else:
        monkeypatch.setenv("SLACK_USER_TOKEN", token)
    if identity is not None:
        gpuctl.slack.identities[str(token)] = identity
    code, text = run(gpuctl, "request", "half")
    assert code == 2, text
    assert message in text and "Traceback" not in text
    assert gpuctl.slack.called("chat.postMessage") == [] and gpuctl.store.rollouts() == []


# --- 4. the state is not evidence; the audit log is, under a key ------------------------------------------

def test_should_ignore_an_approval_written_straight_into_the_state(harness: Harness) -> None:
    harness.machine.request("half", REQUESTER)
    harness.click(APPROVERS[0])
    genuine = harness.store.clicks("half-1")[0]
    with sqlite3.connect(harness.state_dir / "rollout.sqlite") as db:
        db.execute("INSERT INTO clicks (rollout_id, user_id, action, value, action_ts, team_id, app_id, channel_id, "
                   "source, received_at, status, audit_mac) SELECT rollout_id, 'U0BOB', action, value, '1.1', team_id,"
                   " app_id, channel_id, source, received_at, status, audit_mac FROM clicks WHERE id = ?",
                   (genuine.id,))
        db.execute("UPDATE rollouts SET state = 'approved'")
    assert [a.user for a in harness.approvals.counted("half-1")] == [APPROVERS[0]]
    with pytest.raises(StepHeldError, match="1 of 2 approvals still count \\(U0BOB: the state counts an approval "
                                            "the audit log has no record of\\)"):
        harness.machine.apply()
    assert harness.pulumi.ups() == []
    assert "U0BOB" in audited(harness, "step.check_approvals")[-1][1]


def rewrite_with_plain_hashes(log: Path) -> None:
    """The attacker's rewrite: U0BOB's approval becomes U0MALLORY's, every line re-chained with SHA-256."""
    records, prev = [json.loads(line) for line in log.read_text().splitlines()], "0" * 64
    for record in records:
        record["who"] = "U0MALLORY" if record["who"] == APPROVERS[1] else record["who"]
        record.pop("mac")
        record["prev"] = prev
        record["mac"] = prev = hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":"),
                                                         ensure_ascii=False).encode()).hexdigest()
    log.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def test_should_report_a_rewritten_audit_log_and_refuse_to_apply(gpuctl: Harness) -> None:
    approved(gpuctl)
    rewrite_with_plain_hashes(gpuctl.audit.path)
    code, text = run(gpuctl, "status")
    assert code == 1 and "audit log tampered: audit log line 1: content does not match its mac" in text
    code, text = run(gpuctl, "apply")
    assert code == 4 and "the audit log does not verify" in text
    assert gpuctl.pulumi.ups() == []


def test_should_report_deleted_last_lines_even_with_the_head_in_the_state_removed(gpuctl: Harness) -> None:
    approved(gpuctl)
    lines = gpuctl.audit.path.read_text().splitlines(keepends=True)
    gpuctl.audit.path.write_text("".join(lines[:-2]))
    code, text = run(gpuctl, "status")
    assert code == 1 and "the head kept in the rollout state names record" in text
    with sqlite3.connect(gpuctl.state_dir / "rollout.sqlite") as db:
        db.execute("DELETE FROM audit_head")
    code, text = run(gpuctl, "status")
    assert code == 1, text
    assert f"the log ends at record {len(lines) - 2} but the Slack thread of half-1 names record" in text


# --- 6. a torn last line never stops the audit, and nothing counts before it is audited -------------------

def test_should_break_glass_after_a_torn_last_line(gpuctl: Harness) -> None:
    approved(gpuctl)
    with gpuctl.audit.path.open("ab") as handle:
        handle.write(b'{"seq": 99, "who": "U0AL')  # the disk filled up mid-record
    code, text = run(gpuctl, "status")
    assert code == 0 and "the last line is torn (24 bytes" in text
    code, text = run(gpuctl, "rollback", "--to", "canary", "--operator", "alice", "--reason", "disk full")
    assert code == 0, text
    assert audited(gpuctl, "audit.torn_line") == [("set_aside", "")]
    code, text = run(gpuctl, "status")
    assert code == 0 and "keyed chain intact" in text and "torn" not in text


def test_should_not_count_a_click_whose_audit_record_could_not_be_written(harness: Harness,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    harness.machine.request("half", REQUESTER)
    with monkeypatch.context() as disk:
        disk.setattr(harness.audit, "append", lambda **_: (_ for _ in ()).throw(OSError(28, "No space left")))
        with pytest.raises(OSError):
            harness.click(APPROVERS[0])
    assert [c.status for c in harness.store.clicks("half-1")] == [ClickStatus.PENDING]
    harness.inbox().decide_pending()  # space again: the next decision audits it, then counts it
    assert [a.user for a in harness.approvals.counted("half-1")] == [APPROVERS[0]]


# --- 7. break glass tells Slack what it superseded --------------------------------------------------------

def test_should_tell_slack_when_a_rollback_supersedes_an_approved_request(gpuctl: Harness) -> None:
    message_ts = str(approved(gpuctl).store.rollout("half-1").message_ts)  # type: ignore[union-attr]
    code, text = run(gpuctl, "rollback", "--to", "canary", "--operator", "alice", "--reason", "XID storm")
    assert code == 0, text
    blocks = gpuctl.slack.messages[message_ts]["blocks"]
    assert all(b["type"] != "actions" for b in blocks)
    assert "Superseded by rollback-1 (canary → canary, started by alice" in json.dumps(blocks, ensure_ascii=False)
    assert audited(gpuctl, "slack.superseded") == [("told", "")]


def test_should_audit_that_slack_was_not_told_when_breaking_glass_without_it(
        gpuctl: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    approved(gpuctl)
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    code, text = run(gpuctl, "rollback", "--to", "canary", "--operator", "alice", "--reason", "Slack is down")
    assert code == 0, text
    assert audited(gpuctl, "slack.superseded") == [("not_told", "Slack is not configured (SLACK_BOT_TOKEN)")]


# --- 16. a state dir that cannot be used is an error, not a traceback -------------------------------------

def test_should_refuse_a_state_dir_it_cannot_create_with_exit_2(gpuctl: Harness, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    code, text = run(gpuctl, "status", state_dir=tmp_path / "a-file" / "state")
    assert code == 2, text
    assert f"cannot create the rollout state {tmp_path / 'a-file' / 'state' / 'rollout.sqlite'}" in text.replace(
        "\n", "")
    assert "Traceback" not in text


def test_should_refuse_a_corrupt_state_file_with_exit_1(gpuctl: Harness, tmp_path: Path) -> None:
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "rollout.sqlite").write_bytes(b"not a database, " * 512)
    code, text = run(gpuctl, "status", state_dir=tmp_path / "corrupt")
    assert code == 1, text
    assert f"{tmp_path / 'corrupt' / 'rollout.sqlite'} is not a usable rollout state" in text.replace("\n", "")
    assert "Traceback" not in text


def test_should_refuse_a_state_dir_others_can_write_and_follow_no_link_in_it(gpuctl: Harness,
                                                                              tmp_path: Path) -> None:
    # Issue 41: gpuctl runs as root; whoever could write the state dir linked the stack's lock to a root file, and
    # breaking glass wrote its holder line there and truncated it.
    approved(gpuctl)
    victim = tmp_path / "victim"
    victim.write_text("root's own")
    gpuctl.state_dir.chmod(0o777)
    (gpuctl.state_dir / "prod.lock").unlink(missing_ok=True)
    (gpuctl.state_dir / "prod.lock").symlink_to(victim)
    code, text = run(gpuctl, "rollback", "--to", "canary", "--operator", "alice", "--reason", "drill")
    assert code == 2, text
    assert f"{gpuctl.state_dir}: others could put links in this state dir" in text.replace("\n", "")
    assert victim.read_text() == "root's own"


def test_should_refuse_an_audit_log_swapped_for_a_link(harness: Harness, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's own, no newline at the end")  # the append would truncate it as a torn line
    harness.audit.path.unlink(missing_ok=True)
    harness.audit.path.symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        harness.audit.append(who="alice", what="test", decision="x")
    assert victim.read_text() == "root's own, no newline at the end"
