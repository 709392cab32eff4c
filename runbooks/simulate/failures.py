"""GPU failures replayed on the site's nodes, twice: the static world, where a failed GPU's node keeps taking jobs
and failing them until a human acts on the page, and this stack's, where the node health controller's own `decide`
(components/scheduling/health_decision.py, with the stack's `health` settings, every health.interval_s) drains,
diagnoses, returns or hands it off (docs/simulate.md, "GPU failures").

The model, every number named where it is set:
- Faults arrive on each GPU as a Poisson process at a rate per GPU-hour from a published fleet study (LLAMA3).
  A share of them is persistent (the GPU stays broken: each job placed on the node fails FAIL_AFTER_S after it starts,
  a diagnosis fails) and the rest transient (only the job running then fails; the GPU serves again and a diagnosis
  passes once the XID has aged out of health.window_s).
- Every node is busy: when a job ends or fails, the next waiting job starts on it PLACE_S later; a job runs as long as
  a training job of the replayed trace does (one drawn at random among those longer than an hour, Slurm's side) and
  occupies the whole node. A failed job loses the work since its last checkpoint on every GPU of its gang (`gang`
  nodes' worth); a job on a broken GPU fails before its first checkpoint, losing all it ran.
- A human acts `response_s` after the page: the XID, ECC and remap alerts are critical and page at once, in both
  worlds. Static: the human drains the node and takes it to repair or reset. This stack: on a node the controller does
  not hold by then, the same; a node it holds is left to it, and the human acts `response_s` after its hand-off
  (NodeHandedToAHuman). The figures stop where a human takes the node: repair is the same in both worlds.
- Lost GPU-hours: the work failed jobs threw away, plus the GPU-hours a node the controller drained stood idle or
  diagnosing before it returned or a human took it (capacity held). Static holds nothing: its broken node is busy
  failing jobs, counted in the first term.

Bounded: at most MAX_FAULTS faults and MAX_STEPS decisions per run; seeded by the caller.
"""

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from components.scheduling.health_decision import (
    HANDED_REASON,
    SUSPECT_REASON,
    Action,
    Diagnosis,
    DiagStatus,
    KubeView,
    NodeMemory,
    NodeView,
    Phase,
    Reason,
    SlurmView,
    World,
    decide,
    diag_level,
)
from components.site.health import Health
from components.site.site import Site
from components.slurm.conf import slurm_nodes
from runbooks.simulate.engine import Policy


@dataclass(frozen=True)
class FleetStudy:
    source: str
    gpu_failures: float
    """Failures attributed to GPUs over the study."""
    gpus: int
    days: float

    @property
    def rate_per_gpu_hour(self) -> float:
        return self.gpu_failures / (self.gpus * self.days * 24)


# Dubey et al., "The Llama 3 Herd of Models", arXiv:2407.21783 (2024), section 3.3.4 and Table 5: a 54-day snapshot
# of Llama 3 405B pre-training on up to 16,384 H100 80GB GPUs had 466 job interruptions, 419 of them unexpected;
# GPU issues were 58.7 % of the unexpected ones (faulty GPU 148, 30.1 %; GPU HBM3 memory 72, 17.2 %; GPU SRAM
# memory 19, 4.5 %; GPU system processor 17, 4.1 %). 419 x 58.7 % = 246 over 16,384 x 54 x 24 GPU-hours: 1.16e-5
# per GPU-hour. A lower bound on the rate where fewer GPUs ran some of the time ("up to").
LLAMA3 = FleetStudy("Dubey et al., The Llama 3 Herd of Models, arXiv:2407.21783, sec. 3.3.4, Table 5",
                    419 * 0.587, 16_384, 54)

PLACE_S = 30.0
"""s from a node freed to the next waiting job on it: Slurm's backfill interval (slurm.conf(5), SchedulerParameters
bf_interval, default 30 s; the stack leaves it so)."""
FAIL_AFTER_S = 300.0
"""s a job placed on a broken GPU runs before it fails: its start-up (container, data loader, NCCL init) before the
first kernel on the bad GPU. An assumption; a fault found at CUDA init fails sooner."""
DIAG_RUN_S = {1: 30.0, 2: 120.0, 3: 900.0, 4: 5400.0}
"""s `dcgmi diag -r <level>` runs: seconds, ~2 min, ~15 min, 1-2 h (DCGM User Guide, "Run Levels"; health.diag_level's
docstring)."""
LONG_JOB_S = 3600.0
"""A job of the trace longer than this runs on Slurm (gpuctl simulate's --short-job-hours default)."""
STILL = frozenset({Reason.HEALTHY, Reason.DRAINING, Reason.DIAGNOSING, Reason.HANDED, Reason.BUDGET, Reason.HELD})
"""Waits only an event ends (a job, a diagnosis, another node's return, a human); a maintenance window is time's own
doing, so a node waiting for one is decided on every interval."""
MAX_FAULTS = 100_000
MAX_STEPS = 5_000_000


@dataclass(frozen=True)
class FailureModel:
    rate_per_gpu_hour: float
    persistent_share: float
    """Share of faults that keep the GPU broken until a human repairs it."""
    response_s: float
    """s from the page (or the hand-off) to a human acting."""
    checkpoint_s: float
    gang: int = 1
    """Nodes a job spans: a failure on one loses the work of all."""
    job_durations_s: Sequence[float] = (86_400.0,)
    """Run times a job on a node is drawn from (the trace's long jobs)."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.rate_per_gpu_hour <= 1:
            problems.append(f"failure rate {self.rate_per_gpu_hour:g} per GPU-hour is outside (0, 1]")
        if not 0 <= self.persistent_share <= 1:
            problems.append(f"persistent share {self.persistent_share:g} is outside [0, 1]")
        if not 0 <= self.response_s <= 30 * 86_400:
            problems.append(f"response {self.response_s:g} s is outside 0..30 days")
        if self.gang < 1 or self.checkpoint_s <= 0 or not self.job_durations_s:
            problems.append("gang, checkpoint interval and job run times must be positive")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class Fault:
    node: str
    at: float
    gpu: int
    persistent: bool
    since_checkpoint_s: float
    """Run time of the job it fails since that job's last checkpoint: the same draw in both worlds."""


@dataclass
class Tally:
    faults: int = 0
    jobs_failed: int = 0
    work_lost_gpu_s: float = 0.0
    held_gpu_s: float = 0.0
    """GPU-seconds a drained node stood idle or diagnosing before it returned or a human took it."""
    human_actions: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    """This stack: what the controller did, by action."""
    budget_waits: int = 0
    """This stack: decisions that left a suspect node to run on for want of drain budget."""

    @property
    def lost_gpu_h(self) -> float:
        return (self.work_lost_gpu_s + self.held_gpu_s) / 3600


def draw_faults(site: Site, model: FailureModel, window_s: float, rng: random.Random) -> list[Fault]:
    """Every GPU's faults over the window, in time order; a fault on a node already broken adds nothing (it is
    dropped by the replay, not here)."""
    faults = []
    for group in site.node_groups:
        for node in group.nodes:
            rate_per_s = model.rate_per_gpu_hour * group.gpus_per_node / 3600
            at = rng.expovariate(rate_per_s)
            while at < window_s:
                faults.append(Fault(node.name, at, rng.randrange(group.gpus_per_node),
                                    rng.random() < model.persistent_share, rng.uniform(0, model.checkpoint_s)))
                at += rng.expovariate(rate_per_s)
                if len(faults) > MAX_FAULTS:
                    raise ValueError(f"more than {MAX_FAULTS:,} faults in the window: lower the rate or the days")
    return sorted(faults, key=lambda f: (f.at, f.node))


def _finding(fault: Fault) -> str:
    return f"GPU {fault.gpu}: {'XID 79 (GPU has fallen off the bus)' if fault.persistent else 'XID 94 (contained ECC)'}"


@dataclass
class NodeState:
    """One node of the replay: its fault, the job on it, and the controller's marks as the schedulers would show."""

    name: str
    gpus: int
    in_slurm: bool
    fault: Fault | None = None
    job_end: float | None = None
    """When the job on it ends (or fails, on a broken GPU); None: no job."""
    job_start: float = 0.0
    job_fails: bool = False
    next_start: float | None = None
    """When the next job starts on it, if it takes one."""
    reason: str = ""
    mark: str = ""
    diagnosis: Diagnosis | None = None
    diag_end: float = 0.0
    human_at: float | None = None
    idle_since: float | None = None
    """Drained and idle since: capacity held."""


class Replay:
    """One world's replay of the faults; `run` returns its tally. Policy.STATIC: a human acts on the page, nothing
    drains on its own; Policy.STACK: the node health controller acts, a human on the pages it leaves and its
    hand-offs."""

    def __init__(self, site: Site, model: FailureModel, regime: Policy, rng: random.Random,
                 health: Health | None = None) -> None:
        self.site, self.model, self.regime, self.rng = site, model, regime, rng
        self.health = health or site.health
        slurm = {n.name for n in slurm_nodes(site)}
        self.nodes = {n.name: NodeState(n.name, g.gpus_per_node, n.name in slurm)
                      for g in site.node_groups for n in g.nodes}
        self.tally = Tally()
        self.memory: dict[str, NodeMemory] = {}
        self.pages: list[tuple[float, Fault]] = []
        """This stack: each fault's page, answered `response_s` after it (in fault order, so in time order)."""

    # --- jobs ---------------------------------------------------------------------------------------------------

    def _lose(self, node: NodeState, run_s: float) -> None:
        self.tally.jobs_failed += 1
        self.tally.work_lost_gpu_s += node.gpus * self.model.gang * run_s

    def _start(self, node: NodeState, at: float) -> None:
        broken = node.fault is not None and node.fault.persistent
        node.job_start, node.job_fails, node.next_start = at, broken, None
        node.job_end = at + (FAIL_AFTER_S if broken else self.rng.choice(self.model.job_durations_s))

    def _jobs_until(self, node: NodeState, until: float) -> None:
        """Runs the node's jobs up to `until`: ends, failures and new starts (none once it is drained)."""
        while True:
            if node.job_end is not None and node.job_end <= until:
                ended = node.job_end
                if node.job_fails:
                    self._lose(node, (ended - node.job_start) % self.model.checkpoint_s)
                node.job_end = None
                if node.reason:
                    node.idle_since = ended
                else:
                    node.next_start = ended + PLACE_S
            elif node.job_end is None and node.next_start is not None and node.next_start <= until and not node.reason:
                self._start(node, node.next_start)
            else:
                return

    def _fault(self, fault: Fault) -> None:
        node = self.nodes[fault.node]
        self._jobs_until(node, fault.at)
        if node.fault is not None and (node.fault.persistent or node.human_at is not None):
            return  # already broken, or a human has it: nothing more to lose
        self.tally.faults += 1
        node.fault = fault
        if node.job_end is not None or not node.reason:
            # A busy node's job (one starting, in the moment between two) fails now, losing its work since its last
            # checkpoint; a drained idle node has none.
            self._lose(node, fault.since_checkpoint_s)
            node.job_end = None
            if node.reason:
                node.idle_since = fault.at
            else:
                node.next_start = fault.at + PLACE_S
        if self.regime == Policy.STATIC:
            node.human_at = fault.at + self.model.response_s
        else:
            self.pages.append((fault.at + self.model.response_s, fault))

    def _human(self, node: NodeState, at: float) -> None:
        """A human takes the node: drained, to repair or reset; the figures stop there, as repair is the same in
        both worlds, and the node comes back healthy and busy."""
        self._jobs_until(node, at)
        self._hold(node, at)
        if node.job_end is not None and node.job_fails:
            self._lose(node, (at - node.job_start) % self.model.checkpoint_s)
        self.tally.human_actions += 1
        node.fault, node.human_at, node.reason, node.mark, node.diagnosis = None, None, "", "", None
        node.job_end, node.next_start, node.idle_since = None, at + PLACE_S, None

    def _hold(self, node: NodeState, at: float) -> None:
        if node.idle_since is not None:
            self.tally.held_gpu_s += node.gpus * (at - node.idle_since)
            node.idle_since = at if node.reason else None

    # --- the worlds ---------------------------------------------------------------------------------------------

    def run(self, faults: Sequence[Fault]) -> Tally:
        for node in self.nodes.values():
            node.job_end = None
            node.next_start = 0.0
        if self.regime == Policy.STATIC:
            for fault in faults:
                self._due_humans(fault.at)
                self._fault(fault)
            self._due_humans(math.inf)
            return self.tally
        return self._controlled(faults)

    def _due_humans(self, until: float) -> None:
        due = [(n.human_at, n.name) for n in self.nodes.values() if n.human_at is not None and n.human_at <= until]
        for at, name in sorted(due):
            self._human(self.nodes[name], at)

    def _controlled(self, faults: Sequence[Fault]) -> Tally:
        interval = float(self.health.interval_s)
        timeout = float(self.site.node_check.diag_timeout_s)
        pending = list(faults)
        at, steps = 0.0, 0
        while True:
            busy = any(n.fault is not None or n.reason for n in self.nodes.values())
            if not busy:
                if not pending:
                    return self.tally
                at = max(at, math.ceil(pending[0].at / interval) * interval)  # nothing moves until the next fault
            while pending and pending[0].at <= at:
                self._fault(pending.pop(0))
            for node in self.nodes.values():
                self._jobs_until(node, at)
            self._pages_until(at)
            still = self._step(at, timeout)
            steps += 1
            if steps > MAX_STEPS:
                raise ValueError(f"more than {MAX_STEPS:,} decisions: lower the days or the rate")
            # A decision that only waits on what time alone does not change is taken again unchanged until the next
            # event: the next one that can differ is at the first step after it.
            then = self._next_event(pending, timeout) if still else at + interval
            at = max(at + interval, math.ceil(then / interval) * interval)

    def _pages_until(self, at: float) -> None:
        """The page's human acts on a faulty node the controller does not hold; one it holds is left to it."""
        while self.pages and self.pages[0][0] <= at:
            when, fault = self.pages.pop(0)
            node = self.nodes[fault.node]
            if node.fault is fault and not node.reason and node.human_at is None:
                self._human(node, when)
        for node in self.nodes.values():
            if node.human_at is not None and node.human_at <= at:
                self._human(node, node.human_at)

    def _next_event(self, pending: Sequence[Fault], timeout: float) -> float:
        """The first moment a node's inputs to the decision change: a job ends or starts, a diagnosis ends or times
        out, a transient XID ages out of health.window_s, a human acts, a page is answered, a fault arrives."""
        times = [pending[0].at] if pending else []
        times += [self.pages[0][0]] if self.pages else []
        for node in self.nodes.values():
            times += [t for t in (node.job_end, node.human_at) if t is not None]
            times += [node.next_start] if node.next_start is not None and not node.reason else []
            if node.diagnosis is not None and node.diagnosis.status == DiagStatus.RUNNING:
                times += [node.diag_end, node.diagnosis.started_at + timeout + 1]
            if node.fault is not None and not node.fault.persistent:
                times.append(node.fault.at + self.health.window_s)
        return min(times, default=math.inf)

    def _view(self, node: NodeState, at: float) -> NodeView:
        fault = node.fault
        if fault is not None and (fault.persistent or at - fault.at < self.health.window_s):
            findings: tuple[str, ...] = (_finding(fault),)
        else:
            findings = ()
        running = node.job_end is not None
        state = ("ALLOCATED" if running else "IDLE") + ("+DRAIN" if node.reason else "")
        slurm = SlurmView(state, node.reason) if node.in_slurm else None
        kube = KubeView(cordoned=bool(node.reason), mark=node.mark, gpu_pods=0 if node.in_slurm else int(running))
        return NodeView(node.name, findings, slurm, kube, node.diagnosis)

    def _step(self, at: float, timeout: float) -> bool:
        """Decides and acts; True when every node only waits on something only an event changes."""
        for node in self.nodes.values():
            if node.diagnosis is not None and node.diagnosis.status == DiagStatus.RUNNING and node.diag_end <= at:
                passed = node.fault is None or not node.fault.persistent
                node.diagnosis = replace(node.diagnosis, status=DiagStatus.PASSED if passed else DiagStatus.FAILED)
        views = tuple(self._view(n, at) for n in self.nodes.values())
        decision = decide(World(at, views, (), self.memory), self.health, timeout)
        self.memory = dict(decision.memory)
        still = self.health.requeue_after_s is None and all(
            made.action == Action.WAIT and made.reason in STILL for made in decision.nodes)
        for made in decision.nodes:
            node = self.nodes[made.node]
            self.tally.budget_waits += made.reason == Reason.BUDGET
            if made.action == Action.WAIT:
                continue
            self.tally.actions[made.action.value] = self.tally.actions.get(made.action.value, 0) + 1
            if made.action in (Action.DRAIN, Action.HAND_OFF):
                handed = made.action == Action.HAND_OFF
                node.reason = f"{HANDED_REASON if handed else SUSPECT_REASON}: {made.detail}"
                node.mark = (Phase.HANDED if handed else Phase.SUSPECT).value
                node.next_start = None
                if node.job_end is None and node.idle_since is None:
                    node.idle_since = at
                if handed:
                    node.diagnosis = None
                    node.human_at = at + self.model.response_s
            elif made.action == Action.DIAGNOSE:
                node.diagnosis = Diagnosis(DiagStatus.RUNNING, at)
                node.diag_end = at + DIAG_RUN_S[diag_level(self.site, node.name)]
            elif made.action == Action.REQUEUE and node.job_end is not None:
                self._lose(node, (at - node.job_start) % self.model.checkpoint_s)
                node.job_end, node.idle_since = None, at
            elif made.action == Action.RETURN:
                self._hold(node, at)
                node.fault, node.reason, node.mark, node.diagnosis = None, "", "", None
                node.next_start, node.idle_since = at + PLACE_S, None
        return still


@dataclass(frozen=True)
class Replayed:
    faults: int
    """Faults drawn in the window."""
    tallies: dict[Policy, Tally]


def replay(site: Site, model: FailureModel, days: float, seed: int, health: Health | None = None) -> Replayed:
    """Both worlds on the same faults (one draw per seed: node, time, kind and the work each loses at once); each
    world draws its jobs' run times from its own stream seeded alike, so neither's choices shift the faults."""
    window_s = days * 86_400
    faults = draw_faults(site, model, window_s, random.Random(seed))
    tallies = {regime: Replay(site, model, regime, random.Random(f"{seed}:jobs"), health).run(faults)
               for regime in Policy}
    return Replayed(len(faults), tallies)
