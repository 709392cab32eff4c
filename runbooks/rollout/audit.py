"""The audit log: append-only JSONL, each record chained to the one before by its SHA-256.

Every record carries who, what, when, the rollout and stage, the plan digest and gate snapshot where
there is one, and the decision. Editing, reordering or deleting a record breaks the chain at that line,
which `verify` reports. Secrets never enter a record: callers pass identities and facts, not credentials.
"""

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
"""The `prev` of the first record."""


class AuditChainBrokenError(Exception):
    """The chain is broken: a record was edited, reordered or removed."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"audit log line {line}: {reason}")
        self.line = line


@dataclass(frozen=True)
class AuditRecord:
    seq: int
    at: str
    who: str
    what: str
    rollout: str | None
    stage: str | None
    decision: str
    plan_digest: str | None
    gates: dict[str, Any] | None
    detail: dict[str, Any]
    prev: str
    hash: str


def _digest(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, *, who: str, what: str, decision: str, rollout: str | None = None, stage: str | None = None,
               plan_digest: str | None = None, gates: dict[str, Any] | None = None,
               detail: dict[str, Any] | None = None, at: datetime | None = None) -> AuditRecord:
        # An exclusive lock: the receiver threads and a concurrent CLI append to the same chain.
        with self.path.open("a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            last = None
            for line in handle:
                if line.strip():
                    last = line
            previous = json.loads(last) if last else None
            body: dict[str, Any] = {
                "seq": previous["seq"] + 1 if previous else 1,
                "at": (at or datetime.now(UTC)).isoformat(),
                "who": who,
                "what": what,
                "rollout": rollout,
                "stage": stage,
                "decision": decision,
                "plan_digest": plan_digest,
                "gates": gates,
                "detail": detail or {},
                "prev": previous["hash"] if previous else GENESIS,
            }
            record = {**body, "hash": _digest(body)}
            handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return AuditRecord(**record)

    def records(self) -> Iterator[AuditRecord]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield AuditRecord(**json.loads(line))

    def verify(self) -> int:
        """The number of records, or AuditChainBrokenError naming the first line that breaks the chain."""
        prev, count = GENESIS, 0
        if not self.path.exists():
            return 0
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    claimed = record.pop("hash")
                except (json.JSONDecodeError, KeyError, AttributeError):
                    raise AuditChainBrokenError(number, "not a record") from None
                if record.get("prev") != prev:
                    raise AuditChainBrokenError(number, "does not follow the record before it (removed or reordered)")
                if record.get("seq") != count + 1:
                    raise AuditChainBrokenError(number, f"sequence {record.get('seq')} where {count + 1} was expected")
                if _digest(record) != claimed:
                    raise AuditChainBrokenError(number, "content does not match its hash (edited)")
                prev, count = claimed, count + 1
        return count
