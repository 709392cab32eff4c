"""The audit log's hash chain detects edits, removals and reordering."""

import json
from pathlib import Path

import pytest

from runbooks.rollout.audit import AuditChainBrokenError, AuditLog


def three_records(tmp_path: Path) -> AuditLog:
    log = AuditLog(tmp_path / "audit.jsonl")
    for who in ("U0ALICE", "U0BOB", "U0CAROL"):
        log.append(who=who, what="slack.approve", decision="approved", rollout="half-1", stage="half",
                   plan_digest="sha256:abc")
    return log


def test_should_verify_an_untouched_chain(tmp_path: Path) -> None:
    assert three_records(tmp_path).verify() == 3


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


def test_should_detect_an_edit_that_recomputes_nothing_but_the_hash(tmp_path: Path) -> None:
    log = three_records(tmp_path)
    lines = log.path.read_text().splitlines()
    record = json.loads(lines[0])
    record["decision"] = "rejected"
    lines[0] = json.dumps(record)
    log.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(AuditChainBrokenError, match="edited"):
        log.verify()
