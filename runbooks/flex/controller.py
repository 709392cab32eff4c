"""The lending controller: every lending.interval_s it reads demand from Prometheus and the flex pool from Slurm and
kubectl, asks `decide` (components/scheduling/lending_decision.py) and carries the decision out with gpuctl flex's
own lend and reclaim (runbooks/flex/lending.py).

Each decision is one audit line (JSON) in <state_dir>/decisions.jsonl and on stdout (the journal), with its reason;
the last one, with what the next decision must remember, is <state_dir>/last-decision.json, which `gpuctl flex
status` shows. A file <state_dir>/paused (written by `gpuctl flex pause`) keeps it deciding and auditing without
moving anything; so does --dry-run. A lend that has to wait for jobs is left draining and finished by later
decisions, so one step never blocks longer than interval_s on a drain; each live step also requeues what a lend
stopped on a lent node and Slurm refused to requeue then. A live step moves only while it holds MOVES_LOCK; while a
manual `gpuctl flex lend` or `reclaim` holds it, the step decides and audits (mode "held", with the holder) and
moves nothing. Manual moves are audited in the same file (mode "manual", with who ran them).
"""

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.scheduling.lending_decision import (
    Action,
    Decision,
    FlexNode,
    Memory,
    Owner,
    Reason,
    Signals,
    State,
    borrowers,
    decide,
    flex_node_gpus,
    lent_gpu_models,
    lent_gpus,
    pool_replicas,
    replica_floors,
)
from components.site.site import Site
from runbooks.flex.lease import Lease, holder_line
from runbooks.flex.lending import CommandError, Flex, NodeOutcome
from runbooks.flex.metrics import Metrics

AUDIT = "decisions.jsonl"
LAST = "last-decision.json"
PAUSED = "paused"
LOCK = "controller.lock"
"""Held by the controller for its lifetime (runbooks.flex.lease)."""
MOVES_LOCK = "moves.lock"
"""Held by whoever moves flex nodes, for the move: a live step, or a manual lend or reclaim."""


class Store:
    """The controller's files in its state dir."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def last(self) -> dict[str, Any] | None:
        """The last decision's record, or None when there is none yet; a file that is no JSON object is an error
        naming it."""
        path = self.directory / LAST
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: unreadable ({error})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}: not a JSON object")
        return record

    def write_last(self, record: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        new = self.directory / f"{LAST}.new"
        new.write_text(json.dumps(record, indent=1) + "\n")
        new.replace(self.directory / LAST)  # atomic: status never reads half a file

    def audit(self, line: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / AUDIT).open("a") as log:
            log.write(line + "\n")

    def paused(self) -> dict[str, Any] | None:
        """Who paused the controller and why, or None when it runs."""
        try:
            return dict(json.loads((self.directory / PAUSED).read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            return {"by": "unknown", "reason": f"{self.directory / PAUSED} exists but is unreadable"}

    def audit_manual(self, action: str, by: str, nodes: list[str], outcomes: list[NodeOutcome],
                     error: str | None = None) -> None:
        """One audit line for a move an operator ran by hand (gpuctl flex lend or reclaim)."""
        self.audit(json.dumps({
            "at": datetime.now(UTC).isoformat(timespec="seconds"), "mode": "manual", "action": action,
            "nodes": nodes, "reason": "operator", "by": by,
            "detail": f"gpuctl flex {action} by {by}" + (f" failed: {error}" if error else ""),
            "outcomes": [asdict(o) for o in outcomes]}))

    def pause(self, by: str, reason: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {"by": by, "reason": reason, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        (self.directory / PAUSED).write_text(json.dumps(record) + "\n")

    def resume(self) -> bool:
        try:
            (self.directory / PAUSED).unlink()
        except FileNotFoundError:
            return False
        return True


@dataclass
class Controller:
    site: Site
    flex: Flex
    demand: Callable[[], Signals]
    store: Store
    metrics: Metrics = field(default_factory=Metrics)
    dry_run: bool = False
    say: Callable[[str], None] = print
    memory: Memory = Memory()
    lend_started: dict[str, float] = field(default_factory=dict)
    """node -> when the lend that is moving it was decided (s since the epoch), for the trigger-to-capacity time."""
    floors: dict[str, int] = field(default_factory=dict)
    """model -> the replica floor last set on its autoscaler (kept in the last decision's record); with no record,
    the chart's minReplicaCount, replicas.min."""

    def __post_init__(self) -> None:
        self.moves = Lease(self.store.directory / MOVES_LOCK)
        try:
            last = self.store.last() or {}
            memory = last.get("memory", {})
            self.memory = Memory(**{**memory, "moves": tuple(float(t) for t in memory.get("moves", ()))})
            self.lend_started = {str(node): float(at) for node, at in last.get("lend_started", {}).items()}
            self.floors = {b.name: b.min_replicas for b in borrowers(self.site)} | {
                str(model): int(replicas) for model, replicas in last.get("floors", {}).items()}
        except (ValueError, TypeError, AttributeError) as error:
            # Starting with no memory only restarts the hysteresis clocks: the safe side.
            self.say(f"starting afresh: {error}")
            self.memory, self.lend_started = Memory(), {}
            self.floors = {b.name: b.min_replicas for b in borrowers(self.site)}

    def step(self) -> Decision:
        signals = self.demand()
        nodes = self._pool()
        state = State(nodes, self.memory, wanted_gpu_models=lent_gpu_models(self.site),
                      pool_replicas=pool_replicas(self.site))
        decision = decide(signals, state, self.site.lending)
        paused = self.store.paused()
        mode = "paused" if paused else "dry-run" if self.dry_run else "live"
        held_by = self.moves.try_acquire(holder_line("the lending controller")) if mode == "live" else None
        mode = "held" if held_by is not None else mode
        outcomes: list[NodeOutcome] = []
        if mode == "live":
            try:
                self._finish_requeues(nodes)
                outcomes = self._act(decision, signals.at)
                self._set_floors(nodes, decision)
            finally:
                self.moves.release()
        # Paused or held, nothing moved: the cooldown and the move budget run from the real moves. A dry run keeps the
        # cadence it would have.
        moved = decision.action != Action.HOLD and decision.reason != Reason.FINISH_LEND
        self.memory = decision.memory if mode in ("live", "dry-run") else replace(
            decision.memory, last_move_at=self.memory.last_move_at,
            moves=decision.memory.moves[:-1] if moved else decision.memory.moves)
        record: dict[str, Any] = {
            "at": datetime.fromtimestamp(signals.at, UTC).isoformat(timespec="seconds"), "mode": mode,
            "action": decision.action.value, "nodes": list(decision.nodes), "reason": decision.reason.value,
            "detail": decision.detail, "outcomes": [asdict(o) for o in outcomes]}
        if paused:
            record["paused"] = paused
        if held_by is not None:
            record["held_by"] = held_by
        line = json.dumps(record)
        self.store.audit(line)
        self.say(line)
        self.store.write_last({**record, "memory": asdict(self.memory), "lend_started": self.lend_started,
                               "floors": self.floors})
        self._count(decision, mode, self._pool() if outcomes else nodes, paused is not None)
        return decision

    def _pool(self) -> tuple[FlexNode, ...] | None:
        try:
            return self.flex.pool()
        except CommandError as error:
            self.say(f"flex pool unreadable: {error}")
            self.metrics.errors += 1
            return None

    def _finish_requeues(self, nodes: tuple[FlexNode, ...] | None) -> None:
        """A lent node's lend is over, so no later lend requeues a job it stopped and Slurm refused to requeue: each
        live step does, while Slurm still keeps the ended job (MinJobAge). A lending node's next lend does it."""
        lent = [node.name for node in nodes or () if node.owner == Owner.LENT]
        if not lent:
            return
        try:
            self.flex.requeue_stopped(lent)
        except CommandError as error:
            self.say(f"requeue of jobs stopped by a lend failed: {error}")
            self.metrics.errors += 1

    def _act(self, decision: Decision, at: float) -> list[NodeOutcome]:
        if decision.action == Action.HOLD:
            return []
        wait_s = self.site.lending.interval_s
        try:
            if decision.action == Action.LEND:
                for node in decision.nodes:
                    self.lend_started.setdefault(node, at)
                outcomes = self.flex.lend(decision.nodes, wait_s=wait_s, poll_s=min(2.0, wait_s / 4))
            else:
                outcomes = self.flex.reclaim(decision.nodes, wait_s=wait_s)
        except CommandError as error:
            self.say(f"{decision.action.value} failed: {error}")
            self.metrics.errors += 1
            return [NodeOutcome(node, False, str(error)) for node in decision.nodes]
        with self.metrics.lock:
            for outcome in outcomes:
                started = self.lend_started.pop(outcome.node, None) if (
                    outcome.done or decision.action == Action.RECLAIM) else None
                if started is not None and decision.action == Action.LEND:
                    self.metrics.observe_lend(time.time() - started)
        return outcomes

    def _set_floors(self, nodes: tuple[FlexNode, ...] | None, decision: Decision) -> None:
        """Each lent model's replica floor for the nodes lent when the step began (a lend finished now counts at the
        next step) and the trough the decision saw; only those that changed are set, a failed one again next step."""
        if nodes is None:
            return
        floors = replica_floors(borrowers(self.site), lent_gpus(nodes, flex_node_gpus(self.site)),
                                decision.memory.trough_since is not None)
        for model, replicas in floors.items():
            if self.floors.get(model) == replicas:
                continue
            try:
                self.flex.set_replica_floor(model, replicas)
            except CommandError as error:
                self.say(f"replica floor of {model} not set: {error}")
                self.metrics.errors += 1
                continue
            self.floors[model] = replicas

    def _count(self, decision: Decision, mode: str, nodes: tuple[FlexNode, ...] | None, paused: bool) -> None:
        with self.metrics.lock:
            self.metrics.decisions[(decision.action.value, decision.reason.value)] += 1
            if mode == "live" and decision.action != Action.HOLD and decision.reason != Reason.FINISH_LEND:
                self.metrics.moves[decision.action.value] += 1
            if nodes is not None:
                self.metrics.nodes = {owner: sum(n.owner == owner for n in nodes) for owner in Owner}
            self.metrics.paused = paused
            self.metrics.last_decision = time.time()

    def run(self, stop: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> None:
        while not stop():
            started = time.monotonic()
            self.step()
            sleep(max(0.0, self.site.lending.interval_s - (time.monotonic() - started)))

