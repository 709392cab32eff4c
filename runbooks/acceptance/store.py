"""The campaign's state in SQLite: campaigns, their recorded steps, the faults in place, every failure and the samples
the report plots.

A step is recorded started before it runs and finished after, like the rollout's; a fault is recorded (with its undo
and the switch armed for it) before it is injected and marked reverted after, so a resumed campaign finds every fault
a dead run left in place. One connection, autocommit, one writer at a time (the campaign holds its lock).
"""

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY, deployment TEXT NOT NULL, stage TEXT NOT NULL, time_scale REAL NOT NULL,
    started_at REAL NOT NULL, state TEXT NOT NULL, verdict TEXT, reason TEXT);
CREATE TABLE IF NOT EXISTS steps (
    campaign TEXT NOT NULL, step TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL, detail TEXT,
    PRIMARY KEY (campaign, step));
CREATE TABLE IF NOT EXISTS faults (
    campaign TEXT NOT NULL, drill TEXT NOT NULL, fault TEXT NOT NULL, armed TEXT NOT NULL,
    injected_at REAL NOT NULL, reverted_at REAL, reverted_by TEXT);
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY, campaign TEXT NOT NULL, at REAL NOT NULL, source TEXT NOT NULL, mode TEXT NOT NULL,
    sop TEXT, key TEXT NOT NULL, detail TEXT NOT NULL, UNIQUE (campaign, key));
CREATE TABLE IF NOT EXISTS samples (
    campaign TEXT NOT NULL, series TEXT NOT NULL, at REAL NOT NULL, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS alerts_seen (
    campaign TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, severity TEXT NOT NULL, place TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, PRIMARY KEY (campaign, key));
"""

RUNNING, PASSED, FAILED = "running", "passed", "failed"


@dataclass(frozen=True)
class Campaign:
    id: str
    deployment: str
    """The deployed stack the campaign judged (runbooks.stack.deploy.StackDeployer.deployment_digest)."""
    stage: str
    time_scale: float
    started_at: float
    state: str
    verdict: str | None
    reason: str | None


@dataclass(frozen=True)
class Failure:
    at: float
    source: str
    """"injected" by a drill, or "fired": an alert that fired on its own."""
    mode: str
    """The failure mode: a drill kind, or the alert's name."""
    sop: str | None
    """docs/sop/<sop>.md; None: no SOP exists, which fails the campaign."""
    detail: dict[str, Any]


@dataclass(frozen=True)
class AlertSpan:
    """One firing of an alert (its fingerprint and startsAt) as the campaign's watcher saw it: first and last look."""

    name: str
    severity: str
    place: str
    """Where it fired (its Hostname or instance label), or ""."""
    first_seen: float
    last_seen: float


@dataclass(frozen=True)
class FaultRecord:
    rowid: int
    drill: str
    """The drill's name (Acceptance.named_drills: its kind, unless the spec drills the kind more than once)."""
    fault: dict[str, Any]
    armed: str
    """The dead-man's switch armed for it (a path on the node)."""
    injected_at: float
    reverted_at: float | None
    reverted_by: str | None


class CampaignStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # --- campaigns -----------------------------------------------------------------------------

    def add_campaign(self, campaign: Campaign) -> None:
        with self._write() as db:
            db.execute("INSERT INTO campaigns VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (campaign.id, campaign.deployment, campaign.stage, campaign.time_scale, campaign.started_at,
                        campaign.state, campaign.verdict, campaign.reason))

    def finish_campaign(self, campaign_id: str, verdict: str, reason: str) -> None:
        with self._write() as db:
            db.execute("UPDATE campaigns SET state = ?, verdict = ?, reason = ? WHERE id = ?",
                       (verdict, verdict, reason, campaign_id))

    def campaigns(self) -> list[Campaign]:
        return [Campaign(**dict(r)) for r in self._read("SELECT * FROM campaigns ORDER BY started_at, id")]

    def campaign(self, campaign_id: str) -> Campaign | None:
        return next((c for c in self.campaigns() if c.id == campaign_id), None)

    def open_campaign(self) -> Campaign | None:
        return next((c for c in reversed(self.campaigns()) if c.state == RUNNING), None)

    # --- steps ---------------------------------------------------------------------------------

    def step_started(self, campaign_id: str, step: str, at: float) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, NULL, NULL)", (campaign_id, step, at))

    def step_finished(self, campaign_id: str, step: str, at: float, detail: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute("UPDATE steps SET finished_at = ?, detail = ? WHERE campaign = ? AND step = ?",
                       (at, json.dumps(detail, sort_keys=True), campaign_id, step))

    def steps(self, campaign_id: str) -> dict[str, tuple[float, float | None, dict[str, Any]]]:
        """step -> (started_at, finished_at, detail), in start order."""
        rows = self._read("SELECT * FROM steps WHERE campaign = ? ORDER BY started_at", (campaign_id,))
        return {r["step"]: (r["started_at"], r["finished_at"], json.loads(r["detail"] or "{}")) for r in rows}

    # --- faults --------------------------------------------------------------------------------

    def fault_armed(self, campaign_id: str, drill: str, fault: dict[str, Any], armed: str, at: float) -> int:
        """Recorded before the fault is injected: a run that dies after injecting leaves this row to revert."""
        with self._write() as db:
            cursor = db.execute("INSERT INTO faults VALUES (?, ?, ?, ?, ?, NULL, NULL)",
                                (campaign_id, drill, json.dumps(fault, sort_keys=True), armed, at))
            return int(cursor.lastrowid or 0)

    def fault_reverted(self, rowid: int, at: float, by: str) -> None:
        with self._write() as db:
            db.execute("UPDATE faults SET reverted_at = ?, reverted_by = ? WHERE rowid = ?", (at, by, rowid))

    def faults(self, campaign_id: str, in_place_only: bool = False) -> list[FaultRecord]:
        sql = "SELECT rowid, * FROM faults WHERE campaign = ?" + (" AND reverted_at IS NULL" if in_place_only else "")
        return [FaultRecord(r["rowid"], r["drill"], json.loads(r["fault"]), r["armed"], r["injected_at"],
                            r["reverted_at"], r["reverted_by"]) for r in self._read(sql + " ORDER BY rowid",
                                                                                    (campaign_id,))]

    # --- failures and samples ------------------------------------------------------------------

    def add_failure(self, campaign_id: str, key: str, failure: Failure) -> bool:
        """False when `key` (a drill's injection, an alert's firing) is logged already."""
        with self._write() as db:
            cursor = db.execute("INSERT OR IGNORE INTO failures (campaign, at, source, mode, sop, key, detail) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                (campaign_id, failure.at, failure.source, failure.mode, failure.sop, key,
                                 json.dumps(failure.detail, sort_keys=True)))
            return cursor.rowcount == 1

    def failures(self, campaign_id: str) -> list[Failure]:
        rows = self._read("SELECT * FROM failures WHERE campaign = ? ORDER BY at, id", (campaign_id,))
        return [Failure(r["at"], r["source"], r["mode"], r["sop"], json.loads(r["detail"])) for r in rows]

    def alert_seen(self, campaign_id: str, key: str, span: AlertSpan) -> None:
        """Records a look at a firing alert: the first look opens its span, every later one moves its end."""
        with self._write() as db:
            db.execute("INSERT INTO alerts_seen VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (campaign, key) "
                       "DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)",
                       (campaign_id, key, span.name, span.severity, span.place, span.first_seen, span.last_seen))

    def alert_spans(self, campaign_id: str) -> list[AlertSpan]:
        rows = self._read("SELECT name, severity, place, first_seen, last_seen FROM alerts_seen WHERE campaign = ? "
                          "ORDER BY first_seen, key", (campaign_id,))
        return [AlertSpan(**dict(r)) for r in rows]

    def add_samples(self, campaign_id: str, series: str, points: list[tuple[float, float]]) -> None:
        with self._write() as db:
            db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", [(campaign_id, series, t, v) for t, v in points])

    def samples(self, campaign_id: str) -> dict[str, list[tuple[float, float]]]:
        found: dict[str, list[tuple[float, float]]] = {}
        for r in self._read("SELECT series, at, value FROM samples WHERE campaign = ? ORDER BY at", (campaign_id,)):
            found.setdefault(r["series"], []).append((r["at"], r["value"]))
        return found
