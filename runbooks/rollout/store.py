"""Rollout state in SQLite: rollouts, their steps, Slack clicks, signatures already seen, the audit chain's head.

Every write is one transaction, so a kill leaves either the old or the new state, never half of each.
A click is stored the moment it is received (before Slack gets its ack), which is what keeps an
approval from being lost to a crash between the ack and the decision. A decided click names the audit
record of its decision (`audit_mac`): the state is where a decision is looked up, the keyed audit log is
what makes it count.
"""

import errno
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from runbooks.stack.audit import ChainHead

SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY,
    from_stage TEXT NOT NULL,
    to_stage TEXT NOT NULL,
    requester TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    state TEXT NOT NULL,
    plan_path TEXT,
    plan_digest TEXT,
    gates TEXT,
    channel TEXT,
    message_ts TEXT,
    outputs TEXT,
    summary TEXT,
    hold TEXT,
    superseded_by TEXT
);
CREATE TABLE IF NOT EXISTS steps (
    rollout_id TEXT NOT NULL,
    step TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    detail TEXT,
    PRIMARY KEY (rollout_id, step)
);
CREATE TABLE IF NOT EXISTS clicks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rollout_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    action TEXT NOT NULL,
    value TEXT NOT NULL,
    action_ts TEXT NOT NULL,
    team_id TEXT NOT NULL,
    app_id TEXT NOT NULL,
    channel_id TEXT NOT NULL,
    source TEXT NOT NULL,
    received_at TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    decided_at TEXT,
    audit_mac TEXT,
    UNIQUE (user_id, action_ts)
);
CREATE TABLE IF NOT EXISTS seen_requests (
    key TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_head (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL,
    mac TEXT NOT NULL,
    tag TEXT NOT NULL
);
"""


class RolloutState(StrEnum):
    REQUESTING = "requesting"
    """Request steps (soak, gates, preview, Slack message) are under way or held."""
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    """A newer request for a stage replaced this one before it was applied."""
    APPLYING = "applying"
    DONE = "done"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"
    """Stopped by a permanent error that left the deployed stage unchanged (e.g. the plan file changed)."""


OPEN_STATES = (RolloutState.REQUESTING, RolloutState.AWAITING_APPROVAL, RolloutState.APPROVED,
               RolloutState.APPLYING)


class ClickStatus(StrEnum):
    PENDING = "pending"
    """Received and acknowledged, not yet decided (membership not checked yet)."""
    COUNTED = "counted"
    REFUSED = "refused"


@dataclass
class Rollout:
    id: str
    from_stage: str
    to_stage: str
    requester: str
    requested_at: datetime
    state: RolloutState
    plan_path: str | None = None
    plan_digest: str | None = None
    gates: dict[str, Any] | None = None
    channel: str | None = None
    message_ts: str | None = None
    outputs: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    hold: str | None = None
    """Why the last step is waiting (soak, gates, approvals); cleared when it passes."""
    superseded_by: str | None = None
    """The rollout (a newer request or a break-glass rollback) that replaced this one."""


@dataclass
class Click:
    id: int
    rollout_id: str
    user_id: str
    action: str
    value: dict[str, Any]
    action_ts: str
    team_id: str
    """The Slack workspace the click came from (payload team.id)."""
    app_id: str
    """The Slack app it was sent to (payload api_app_id)."""
    channel_id: str
    """The channel of the message clicked (payload channel.id)."""
    source: str
    received_at: datetime
    status: ClickStatus
    reason: str | None = None
    decided_at: datetime | None = None
    audit_mac: str | None = None
    """The audit record of the decision; a counted click without one does not count."""


@dataclass
class Step:
    step: str
    started_at: datetime
    finished_at: datetime | None
    detail: dict[str, Any] = field(default_factory=dict)


_JSON_COLUMNS = ("gates", "outputs", "summary")
_COLUMNS = ("state", "plan_path", "plan_digest", "gates", "channel", "message_ts", "outputs", "summary", "hold")
"""Columns a step may change; column names are never taken from anywhere else."""


class StateUnavailableError(Exception):
    """The state file cannot be created or opened where it was asked for (the state dir); names the path."""


class StateCorruptError(Exception):
    """The state file is there but is not a usable rollout state; names the path."""


def private_state_dir(folder: Path) -> None:
    """Make the state dir (0700) if it is missing, and refuse one that is a link, is not the caller's, or that group
    or others may write. gpuctl may run as root, and whoever can put a name in the state dir could point the lock,
    the audit log or the database at any file; judged by fstat on the folder opened without following a link."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StateUnavailableError(f"{folder}: a symlink or a file, not a state dir") from None
        raise
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise StateUnavailableError(f"{folder}: others could put links in this state dir (owner uid {info.st_uid}, "
                                    f"mode {stat.S_IMODE(info.st_mode):o}); it must be yours, writable by no one else")


class Store:
    def __init__(self, path: Path) -> None:
        # One connection shared by the receiver threads, serialized by a lock; autocommit, with explicit
        # transactions where a write touches more than one row.
        self._lock = threading.RLock()
        try:
            private_state_dir(path.parent)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as error:
            raise StateUnavailableError(f"cannot create the rollout state {path}: {error}") from None
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise StateCorruptError(f"{path} is not a usable rollout state ({error}): restore it from a backup, or "
                                    "move it aside to start afresh (open requests are then lost)") from None

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # --- rollouts ------------------------------------------------------------------------------

    def add_rollout(self, rollout: Rollout, supersede: list[str]) -> None:
        """Insert `rollout` and mark the rollouts in `supersede` superseded by it, in one transaction."""
        with self._transaction() as db:
            for old in supersede:
                db.execute("UPDATE rollouts SET state = ?, superseded_by = ? WHERE id = ?",
                           (RolloutState.SUPERSEDED, rollout.id, old))
            db.execute(
                "INSERT INTO rollouts (id, from_stage, to_stage, requester, requested_at, state) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (rollout.id, rollout.from_stage, rollout.to_stage, rollout.requester,
                 rollout.requested_at.isoformat(), rollout.state),
            )

    def update_rollout(self, rollout_id: str, **changes: Any) -> None:
        with self._transaction() as db:
            _set_rollout(db, rollout_id, changes)

    def rollout(self, rollout_id: str) -> Rollout | None:
        rows = self._read("SELECT * FROM rollouts WHERE id = ?", (rollout_id,))
        return _rollout(rows[0]) if rows else None

    def rollouts(self) -> list[Rollout]:
        return [_rollout(row) for row in self._read("SELECT * FROM rollouts ORDER BY requested_at, rowid")]

    def open_rollout(self) -> Rollout | None:
        """The newest rollout not yet done, rejected, superseded, failed or rolled back, if any."""
        placeholders = ", ".join("?" * len(OPEN_STATES))
        rows = self._read(f"SELECT * FROM rollouts WHERE state IN ({placeholders}) "
                          "ORDER BY requested_at DESC, rowid DESC LIMIT 1", OPEN_STATES)
        return _rollout(rows[0]) if rows else None

    # --- steps ---------------------------------------------------------------------------------

    def step(self, rollout_id: str, step: str) -> Step | None:
        rows = self._read("SELECT * FROM steps WHERE rollout_id = ? AND step = ?", (rollout_id, step))
        return _step(rows[0]) if rows else None

    def steps(self, rollout_id: str) -> list[Step]:
        return [_step(r) for r in self._read("SELECT * FROM steps WHERE rollout_id = ? ORDER BY rowid",
                                             (rollout_id,))]

    def step_started(self, rollout_id: str, step: str, at: datetime) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO steps (rollout_id, step, started_at) VALUES (?, ?, ?)",
                       (rollout_id, step, at.isoformat()))

    def step_finished(self, rollout_id: str, step: str, at: datetime, detail: dict[str, Any],
                      **rollout_changes: Any) -> None:
        """Close the step and apply its effect on the rollout in one transaction."""
        with self._transaction() as db:
            db.execute("UPDATE steps SET finished_at = ?, detail = ? WHERE rollout_id = ? AND step = ?",
                       (at.isoformat(), json.dumps(detail), rollout_id, step))
            _set_rollout(db, rollout_id, {**rollout_changes, "hold": None})

    # --- clicks --------------------------------------------------------------------------------

    def add_click(self, *, rollout_id: str, user_id: str, action: str, value: dict[str, Any], action_ts: str,
                  team_id: str, app_id: str, channel_id: str, source: str, at: datetime) -> bool:
        """False when this click (user, action_ts) was stored before: Slack redelivers unacknowledged ones."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO clicks (rollout_id, user_id, action, value, action_ts, team_id, app_id, "
                "channel_id, source, received_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rollout_id, user_id, action, json.dumps(value), action_ts, team_id, app_id, channel_id, source,
                 at.isoformat(), ClickStatus.PENDING),
            )
            return cursor.rowcount == 1

    def decide_click(self, click: "Click", status: ClickStatus, reason: str | None, at: datetime, audit_mac: str,
                     **rollout_changes: Any) -> None:
        """Record the decision the audit record `audit_mac` holds (appended first)."""
        with self._transaction() as db:
            db.execute("UPDATE clicks SET status = ?, reason = ?, decided_at = ?, audit_mac = ? WHERE id = ?",
                       (status, reason, at.isoformat(), audit_mac, click.id))
            _set_rollout(db, click.rollout_id, rollout_changes)

    def clicks(self, rollout_id: str | None = None, status: ClickStatus | None = None) -> list[Click]:
        sql, params = "SELECT * FROM clicks WHERE 1 = 1", list[str]()
        if rollout_id is not None:
            sql, params = sql + " AND rollout_id = ?", [*params, rollout_id]
        if status is not None:
            sql, params = sql + " AND status = ?", [*params, status]
        return [_click(r) for r in self._read(sql + " ORDER BY id", tuple(params))]

    # --- the audit chain's head (audit.HeadKeeper) ----------------------------------------------------

    def keep_audit_head(self, head: ChainHead, tag: str) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO audit_head (one, seq, mac, tag) VALUES (1, ?, ?, ?)",
                       (head.seq, head.mac, tag))

    def audit_head(self) -> tuple[ChainHead, str] | None:
        rows = self._read("SELECT seq, mac, tag FROM audit_head")
        return (ChainHead(rows[0]["seq"], rows[0]["mac"]), rows[0]["tag"]) if rows else None

    # --- replay protection ---------------------------------------------------------------------

    def first_sighting(self, key: str, now: float, keep_s: float) -> bool:
        """True the first time `key` is seen; keys older than keep_s are forgotten."""
        with self._transaction() as db:
            db.execute("DELETE FROM seen_requests WHERE seen_at < ?", (now - keep_s,))
            cursor = db.execute("INSERT OR IGNORE INTO seen_requests (key, seen_at) VALUES (?, ?)", (key, now))
            return cursor.rowcount == 1


def _set_rollout(db: sqlite3.Connection, rollout_id: str, changes: dict[str, Any]) -> None:
    for name, value in changes.items():
        if name not in _COLUMNS:
            raise KeyError(f"rollouts has no column {name}")
        stored = json.dumps(value) if name in _JSON_COLUMNS and value is not None else value
        db.execute(f"UPDATE rollouts SET {name} = ? WHERE id = ?", (stored, rollout_id))


def _step(row: sqlite3.Row) -> Step:
    return Step(row["step"], datetime.fromisoformat(row["started_at"]),
                datetime.fromisoformat(row["finished_at"]) if row["finished_at"] else None,
                json.loads(row["detail"]) if row["detail"] else {})


def _click(r: sqlite3.Row) -> Click:
    return Click(
        id=r["id"], rollout_id=r["rollout_id"], user_id=r["user_id"], action=r["action"],
        value=json.loads(r["value"]), action_ts=r["action_ts"], team_id=r["team_id"], app_id=r["app_id"],
        channel_id=r["channel_id"], source=r["source"],
        received_at=datetime.fromisoformat(r["received_at"]), status=ClickStatus(r["status"]),
        reason=r["reason"], decided_at=datetime.fromisoformat(r["decided_at"]) if r["decided_at"] else None,
        audit_mac=r["audit_mac"],
    )


def _rollout(row: sqlite3.Row) -> Rollout:
    return Rollout(
        id=row["id"], from_stage=row["from_stage"], to_stage=row["to_stage"], requester=row["requester"],
        requested_at=datetime.fromisoformat(row["requested_at"]), state=RolloutState(row["state"]),
        plan_path=row["plan_path"], plan_digest=row["plan_digest"],
        gates=json.loads(row["gates"]) if row["gates"] else None, channel=row["channel"],
        message_ts=row["message_ts"], outputs=json.loads(row["outputs"]) if row["outputs"] else None,
        summary=json.loads(row["summary"]) if row["summary"] else None, hold=row["hold"],
        superseded_by=row["superseded_by"],
    )
