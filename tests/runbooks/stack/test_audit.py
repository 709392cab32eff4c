"""The audit log's keyed chain: edits, removals, reordering, a chain rewritten without the key and a cut tail are
detected; a torn last line is set aside, never a reason to stop appending; the key is kept as a secret."""

import hashlib
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from runbooks.rollout.store import Store
from runbooks.stack.audit import (
    KEY_ENV,
    KEY_FILE_ENV,
    STATE_DIR_KEY,
    AuditChainBrokenError,
    AuditKeyError,
    AuditLog,
    ChainHead,
    audit_key,
)

KEY = b"unit-test-audit-key-never-printed-0123456789"


def three_records(tmp_path: Path, keeper: Store | None = None) -> AuditLog:
    log = AuditLog(tmp_path / "audit.jsonl", KEY, keeper)
    for who in ("U0ALICE", "U0BOB", "U0CAROL"):
        log.append(who=who, what="slack.approve", decision="approved", rollout="half-1", stage="half",
                   plan_digest="sha256:abc")
    return log


def test_should_verify_an_untouched_chain(tmp_path: Path) -> None:
    report = three_records(tmp_path).verify()
    assert (report.records, report.torn_bytes) == (3, 0)


@pytest.mark.parametrize("tamper, line", [
    (lambda lines: [lines[0], lines[1].replace("U0BOB", "U0MALLORY"), lines[2]], 2),
    (lambda lines: [lines[0], lines[2]], 2),
    (lambda lines: [lines[1], lines[0], lines[2]], 1),
], ids=["detects an edited record", "detects a removed record", "detects reordered records"])
def test_should_detect_a_tampered_audit_log(tmp_path: Path, tamper: object, line: int) -> None:
    log = three_records(tmp_path)
    lines = log.path.read_text().splitlines(keepends=True)
    log.path.write_text("".join(tamper(lines)))  # type: ignore[operator]
    with pytest.raises(AuditChainBrokenError) as broken:
        log.verify()
    assert broken.value.line == line


def rewrite(log: AuditLog, seal: object) -> None:
    """The attacker's rewrite: record 2 says rejected, and every record is re-chained and re-sealed by `seal`."""
    records = [json.loads(line) for line in log.path.read_text().splitlines()]
    records[1]["decision"] = "rejected"
    prev = "0" * 64
    for record in records:
        record.pop("mac")
        record["prev"] = prev
        record["mac"] = prev = seal(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())  # type: ignore[operator]
    log.path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("seal", [
    pytest.param(lambda body: hashlib.sha256(body).hexdigest(), id="plain SHA-256 hashes recomputed"),
    pytest.param(lambda body: __import__("hmac").new(b"a guessed key", body, "sha256").hexdigest(),
                 id="an HMAC under another key"),
])
def test_should_refuse_a_chain_rewritten_without_the_key(tmp_path: Path, seal: object) -> None:
    log = three_records(tmp_path)
    rewrite(log, seal)
    with pytest.raises(AuditChainBrokenError, match="line 1: content does not match its mac"):
        log.verify()


def test_should_detect_deleted_last_lines_by_the_head_kept_in_the_state(tmp_path: Path) -> None:
    store = Store(tmp_path / "rollout.sqlite")
    log = three_records(tmp_path, store)
    log.path.write_text("".join(log.path.read_text().splitlines(keepends=True)[:1]))
    with pytest.raises(AuditChainBrokenError, match="ends at record 1 but the head kept in the rollout state "
                                                    "names record 3: records were removed from the end"):
        log.verify()
    store.close()


def test_should_detect_a_head_in_the_state_rewritten_to_match_a_cut_log(tmp_path: Path) -> None:
    store = Store(tmp_path / "rollout.sqlite")
    log = three_records(tmp_path, store)
    first = json.loads(log.path.read_text().splitlines()[0])
    log.path.write_text(log.path.read_text().splitlines(keepends=True)[0])
    store.keep_audit_head(ChainHead(1, first["mac"]), tag="0" * 64)  # the attacker has no key for the tag
    with pytest.raises(AuditChainBrokenError, match="does not carry the key's tag"):
        log.verify()
    store.close()


def test_should_detect_deleted_last_lines_by_a_head_posted_to_slack(tmp_path: Path) -> None:
    log = three_records(tmp_path)
    posted = log.head()
    assert posted is not None and posted.seq == 3
    log.path.write_text("".join(log.path.read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(AuditChainBrokenError, match="names record 3: records were removed from the end"):
        log.verify([("the Slack thread of half-1", ChainHead.parse(posted.text()) or posted)])


def test_should_set_a_torn_last_line_aside_and_keep_appending(tmp_path: Path) -> None:
    store = Store(tmp_path / "rollout.sqlite")
    log = three_records(tmp_path, store)
    torn = b'{"seq": 4, "who": "U0AL'
    with log.path.open("ab") as handle:
        handle.write(torn)  # a crash or a full disk mid-write
    assert log.verify().torn_bytes == len(torn)
    record = log.append(who="alice", what="break_glass.rollback", decision="started", rollout="rollback-1")
    report = log.verify()
    assert (report.records, report.torn_bytes, record.seq) == (5, 0, 5)
    set_aside = [r for r in log.records() if r.what == "audit.torn_line"]
    assert [(r.seq, r.decision, r.detail["bytes"], r.detail["sha256"]) for r in set_aside] == [
        (4, "set_aside", len(torn), hashlib.sha256(torn).hexdigest())]
    assert (tmp_path / "audit.jsonl.torn").read_bytes() == torn + b"\n"
    store.close()


def key_file_at(tmp_path: Path) -> dict[str, str]:
    return {KEY_FILE_ENV: str(tmp_path / "keys" / "audit.key")}


def test_should_make_a_key_file_only_its_owner_can_read_apart_from_the_state(tmp_path: Path) -> None:
    state, environ = tmp_path / "state", key_file_at(tmp_path)
    key = audit_key(state, environ)
    assert stat.S_IMODE((tmp_path / "keys" / "audit.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert audit_key(state, environ) == key and len(key) == 64
    assert not (state / STATE_DIR_KEY).exists()


@pytest.mark.parametrize(("spoil", "message"), [
    pytest.param(lambda path: path.chmod(0o640), "is readable by group or others \\(mode 640\\)",
                 id="readable by its group"),
    pytest.param(lambda path: path.chmod(0o604), "is readable by group or others \\(mode 604\\)",
                 id="readable by others"),
    pytest.param(lambda path: (path.rename(path.with_name("real")), path.symlink_to("real")), "is a symlink",
                 id="a symlink to a key file"),
    pytest.param(lambda path: path.parent.chmod(0o777), "others could replace the audit key in it",
                 id="in a folder others can write"),
])
def test_should_refuse_a_key_file_not_its_owners_alone(tmp_path: Path, spoil: Any, message: str) -> None:
    environ = key_file_at(tmp_path)
    audit_key(tmp_path / "state", environ)
    spoil(tmp_path / "keys" / "audit.key")
    with pytest.raises(AuditKeyError, match=message):
        audit_key(tmp_path / "state", environ)


def test_should_refuse_a_key_left_beside_the_state_naming_where_to_move_it(tmp_path: Path) -> None:
    state, environ = tmp_path / "state", key_file_at(tmp_path)
    state.mkdir()
    (state / STATE_DIR_KEY).write_text("a" * 64 + "\n")
    with pytest.raises(AuditKeyError, match="the audit key sits beside the state it protects") as refused:
        audit_key(state, environ)
    assert f"install -D -m 600 {state / STATE_DIR_KEY} {tmp_path / 'keys' / 'audit.key'}" in str(refused.value)
    (state / STATE_DIR_KEY).unlink()
    with pytest.raises(AuditKeyError, match="inside the state dir"):
        audit_key(state, {KEY_FILE_ENV: str(state / "keys" / "audit.key")})


def test_should_take_the_key_from_the_environment_and_refuse_a_short_one(tmp_path: Path) -> None:
    assert audit_key(tmp_path, environ={KEY_ENV: KEY.decode()}) == KEY
    assert not (tmp_path / STATE_DIR_KEY).exists()
    with pytest.raises(AuditKeyError, match=f"{KEY_ENV} must be at least 32 characters \\(it has 5\\)"):
        audit_key(tmp_path, environ={KEY_ENV: "short"})


def test_should_never_show_the_key(tmp_path: Path) -> None:
    log = three_records(tmp_path)
    assert KEY.decode() not in repr(log) + log.path.read_text()
