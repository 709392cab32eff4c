"""The node health controller: every health.interval_s it reads the DCGM findings from Prometheus, every GPU node
from Slurm and kubectl and each node's last diagnosis, asks `decide` (components/scheduling/health_decision.py)
and carries the decision out (runbooks/health/nodes.py, runbooks/health/diagnose.py).

Each step is recorded before and after it acts: the memory the decision hands on (failures, when a suspicion began,
when a node returned) is written to <state_dir>/memory.json first, then the moves run, then one audit line (JSON)
goes to <state_dir>/decisions.jsonl and stdout (the journal) with every node's action, reason and outcome. A crash
between the two leaves moves the next step finishes: which nodes are the controller's is read from Slurm's Reason
and Kubernetes' annotation, and every move is idempotent. With --dry-run it decides and audits, moving nothing.
Files in the state dir are opened without following links and replaced atomically.
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.scheduling.health_decision import (
    Action,
    Decision,
    NodeMemory,
    NodeView,
    Phase,
    Reason,
    SlurmView,
    World,
    decide,
    phase,
)
from components.site.site import Site
from runbooks.flex.lease import Lease, holder_line
from runbooks.flex.lending import CommandError
from runbooks.flex.slurm_read import UNREADABLE_STATE
from runbooks.health.diagnose import Diagnoser
from runbooks.health.metrics import Metrics
from runbooks.health.nodes import Nodes, slurm_node_names
from runbooks.health.signals import PrometheusUnreadableError

AUDIT = "decisions.jsonl"
MEMORY = "memory.json"
LOCK = "controller.lock"
MAX_MEMORY_BYTES = 4 << 20
"""memory.json holds a few timestamps per node: past 4 MiB it is not ours, and the controller starts afresh."""


class Store:
    """The controller's files in its state dir (root's, 0700)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _dir(self) -> int:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def memory(self) -> dict[str, NodeMemory]:
        """Each node's memory; raises ValueError naming the file when it does not read."""
        directory = self._dir()
        try:
            descriptor = os.open(MEMORY, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            return {}
        finally:
            os.close(directory)
        try:
            raw = json.loads(os.read(descriptor, MAX_MEMORY_BYTES + 1)[:MAX_MEMORY_BYTES] or b"{}")
        except ValueError as error:
            raise ValueError(f"{self.directory / MEMORY}: unreadable ({error})") from None
        finally:
            os.close(descriptor)
        if not isinstance(raw, dict):
            raise ValueError(f"{self.directory / MEMORY}: not a JSON object")
        try:
            return {str(node): NodeMemory(tuple(float(t) for t in m.get("failures", ())),
                                          _float(m.get("suspect_since")), _float(m.get("returned_at")))
                    for node, m in raw.items()}
        except (AttributeError, TypeError, ValueError) as error:
            raise ValueError(f"{self.directory / MEMORY}: a node's memory does not read ({error})") from None

    def write_memory(self, memory: dict[str, NodeMemory]) -> None:
        self._replace(MEMORY, json.dumps({node: asdict(m) for node, m in sorted(memory.items())}, indent=1) + "\n")

    def audit(self, line: str) -> None:
        directory = self._dir()
        try:
            descriptor = os.open(AUDIT, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=directory)
        finally:
            os.close(directory)
        try:
            os.write(descriptor, (line + "\n").encode())
        finally:
            os.close(descriptor)

    def _replace(self, name: str, text: str) -> None:
        directory = self._dir()
        try:
            descriptor = os.open(f"{name}.new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o600, dir_fd=directory)
            try:
                os.write(descriptor, text.encode())
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(f"{name}.new", name, src_dir_fd=directory, dst_dir_fd=directory)
        finally:
            os.close(directory)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


@dataclass
class Controller:
    site: Site
    nodes: Nodes
    findings: Callable[[], dict[str, tuple[str, ...] | None]]
    """Each GPU node's DCGM findings (None: stale); raises PrometheusUnreadableError."""
    diagnoser: Diagnoser
    store: Store
    metrics: Metrics = field(default_factory=Metrics)
    dry_run: bool = False
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.time
    moves_lock: Path | None = None
    """The lending controller's MOVES_LOCK (runbooks/flex/controller.py): held for each live step, so a lend and a
    health drain never read a flex node's Reason and overwrite each other's; None in a test without lending."""
    memory: dict[str, NodeMemory] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.memory = self.store.memory()
        except ValueError as error:
            # Starting afresh forgets failures: a node is diagnosed again before it is handed off, the safe side for
            # capacity; which nodes are held is read from the schedulers, not from here.
            self.say(f"starting afresh: {error}")
            self.memory = {}

    def _world(self, at: float) -> World:
        unreadable = []
        try:
            findings = self.findings()
        except PrometheusUnreadableError as error:
            unreadable.append(str(error))
        try:
            slurm, kube = self.nodes.read()
        except (CommandError, ValueError) as error:
            unreadable.append(str(error))
        if unreadable:
            return World(at, None, tuple(unreadable), self.memory)
        in_slurm = slurm_node_names(self.site)
        views = []
        for group in self.site.node_groups:
            for node in group.nodes:
                # A Slurm node scontrol did not list is one Slurm has out: never touched.
                seen = slurm.get(node.name, SlurmView(UNREADABLE_STATE)) if node.name in in_slurm else None
                views.append(NodeView(node.name, findings.get(node.name), seen, kube.get(node.name),
                                      self.diagnoser.status(node.name)))
        return World(at, tuple(views), (), self.memory)

    def step(self) -> Decision:
        mode = "dry-run" if self.dry_run else "live"
        lease = Lease(self.moves_lock) if self.moves_lock is not None and mode == "live" else None
        holder = lease.try_acquire(holder_line("the health controller")) if lease is not None else None
        try:
            if holder is not None:
                mode = "dry-run"  # the lending side moves now: decide and audit, move nothing this step
                self.say(f"moves held by {holder}: deciding without moving")
            return self._step(mode)
        finally:
            if lease is not None:
                lease.release()

    def _step(self, mode: str) -> Decision:
        at = self.clock()
        world = self._world(at)
        decision = decide(world, self.site.health, self.site.node_check.diag_timeout_s)
        outcomes: dict[str, str] = {}
        if not decision.paused and mode == "live":
            self.store.write_memory(dict(decision.memory))  # before the moves: a crash redoes, never forgets
            self.memory = dict(decision.memory)
            views = {v.name: v for v in world.nodes or ()}
            for made in decision.nodes:
                if made.action != Action.WAIT:
                    outcomes[made.node] = self._act(made.node, made.action, made.detail, views[made.node])
        elif not decision.paused:
            self.memory = dict(decision.memory)
        record: dict[str, Any] = {
            "at": datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds"), "mode": mode,
            "paused": decision.paused, "detail": decision.detail, "budget": decision.budget, "held": decision.held,
            "nodes": [{"node": d.node, "action": d.action.value, "reason": d.reason.value, "detail": d.detail,
                       **({"outcome": outcomes[d.node]} if d.node in outcomes else {})}
                      for d in decision.nodes if d.reason != Reason.HEALTHY]}
        line = json.dumps(record)
        self.store.audit(line)
        self.say(line)
        self._count(decision, world, outcomes)
        return decision

    def _act(self, node: str, action: Action, detail: str, view: NodeView) -> str:
        in_slurm, in_kube = view.slurm is not None, view.kube is not None
        reason_now = view.slurm.reason if view.slurm is not None else ""
        try:
            if action == Action.DRAIN:
                self.nodes.drain(node, detail, in_slurm, in_kube, Phase.SUSPECT, reason_now)
            elif action == Action.HAND_OFF:
                self.diagnoser.stop(node)
                self.nodes.drain(node, detail, in_slurm, in_kube, Phase.HANDED, reason_now)
            elif action == Action.REQUEUE:
                self.nodes.requeue(node)
            elif action == Action.DIAGNOSE:
                self.diagnoser.start(node)
            elif action == Action.RETURN:
                self.nodes.give_back(node, reason_now, in_kube)
                self.diagnoser.forget(node)
        except (CommandError, OSError, ValueError) as error:
            with self.metrics.lock:
                self.metrics.errors += 1
            return f"failed: {error}"
        with self.metrics.lock:
            self.metrics.actions[action.value] += 1
        return "done"

    def _count(self, decision: Decision, world: World, outcomes: dict[str, str]) -> None:
        with self.metrics.lock:
            self.metrics.paused = decision.paused
            if decision.paused:
                self.metrics.errors += bool(world.unreadable)
                return
            self.metrics.last_decision = time.time()
            self.metrics.budget_waiting = sum(d.reason == Reason.BUDGET for d in decision.nodes)
            phases = {v.name: phase(v).value for v in world.nodes or () if phase(v) != Phase.NONE}
            for made in decision.nodes:
                if outcomes.get(made.node) != "done":
                    continue
                if made.action == Action.DRAIN:
                    phases[made.node] = Phase.SUSPECT.value
                elif made.action == Action.HAND_OFF:
                    phases[made.node] = Phase.HANDED.value
                elif made.action == Action.RETURN:
                    phases.pop(made.node, None)
            self.metrics.phases = phases

    def run(self, stop: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> None:
        while not stop():
            started = time.monotonic()
            self.step()
            sleep(max(0.0, self.site.health.interval_s - (time.monotonic() - started)))

