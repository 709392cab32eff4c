"""The discrete-event replay of a workload on a site under one policy, on SimPy: arrivals, runs, the inference demand
steps and the lending controller's ticks are SimPy processes; a run preempted is a process interrupted.

- Slurm: jobs in priority order (QoS, then the team's GPUs held over its fairshare, then arrival; static: each team's
  own queue in arrival order), started wherever GPUs are free (stack: flex nodes only for the QoS the flex partitions
  admit, slurm.conf's AllowQos), with EASY backfill: the first job that does not fit
  holds a reservation, and a later one starts only if it ends before it or leaves it its GPUs. The stack preempts by
  QoS (`Preempt=` lists of the one table); static never does.
- Kubernetes (Kueue): team jobs in priority order, each on the first of its team's flavors with room within its
  limit (stack: the ClusterQueue quota, borrowing from the cohort; static: its fixed slice); the stack preempts
  lower-priority work of the team itself or of teams over their guarantee.
- Inference: replicas as demand asks, on the model's flavor and, in the stack, on flex nodes lent to it; the stack's
  inference pods preempt what the inference class lists; static inference owns a fixed slice.
- Lending (stack): every lending.interval_s, `decide` (components/scheduling/lending_decision.py, the live
  controller's own function) gets the flex pool and the pending inference pods; a lend requeues what it may.
- A preempted job loses the work since its last checkpoint (every checkpoint_s of run time) and queues again.
"""

import bisect
import heapq
import itertools
import math
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import simpy

from components.scheduling.lending_decision import (
    Action,
    Borrower,
    FlexNode,
    Job,
    Memory,
    Owner,
    Reason,
    Signals,
    State,
    decide,
    lendable,
    replica_floors,
)
from components.site.lending import Lending
from components.site.site import Pool
from runbooks.simulate.site_model import SiteModel, StaticSlices
from runbooks.simulate.workload import InferenceDemand, Side, SimJob, Workload

MAX_WAITING = 10_000.0
"""Requests waiting per replica reported for a model with more load than replicas: the spec's bound on the lend
threshold (components/site/lending.py), so such a model is always a peak."""


class Policy(StrEnum):
    STATIC = "static"
    STACK = "stack"


@dataclass(eq=False)
class Run:
    job: SimJob
    side: Side
    gpus: int
    """GPUs it runs on: its gang, or the most its team can ever hold there (then it runs longer, same GPU-hours)."""
    work_s: float
    """s of run time still to do."""
    first_start: float | None = None
    started: float | None = None
    held: dict[str, int] = field(default_factory=dict)
    """Slurm node or Kubernetes flavor -> GPUs, while it runs."""
    ends: tuple[float, int, int, int] | None = None
    """(when its run ends unless preempted, job id, GPUs, of them on slurm-pool nodes) while it runs on Slurm: its entry
    in the end-time lists."""
    done_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    finished: float | None = None
    process: Any = None

    team: str = ""
    qos: str = ""
    """The Slurm QoS or the PriorityClass it runs under, by side."""

    def __post_init__(self) -> None:
        self.team = self.job.team
        self.qos = self.job.slurm_qos if self.side == Side.SLURM else self.job.priority_class


@dataclass
class Node:
    name: str
    pool: Pool
    gpu_model: str
    gpus: int
    free: int
    owner: Owner = Owner.SLURM
    runs: set[Run] = field(default_factory=set)


@dataclass
class Served:
    demand: InferenceDemand
    replicas: int = 0
    """Replicas the autoscaler asks for now: by_load, or floor where that is more."""
    by_load: int = 0
    """Replicas the load makes the autoscaler ask for, within its bounds."""
    floor: int = 0
    """The autoscaler's floor the lending controller sets (lending_decision.replica_floors)."""
    needed: int = 0
    """Replicas the load needs now, past the autoscaler's bound too: served in full means this many serve."""
    load: float = 0.0
    """Replicas' worth of requests now."""
    held: dict[str, int] = field(default_factory=dict)
    """Flavor, or `flex` (lent nodes), -> GPUs it serves on."""

    @property
    def served_replicas(self) -> int:
        return sum(self.held.values()) // self.demand.gpus_per_replica


@dataclass
class Outcome:
    policy: Policy
    window_s: float
    capacity: dict[str, int]
    """Pool -> GPUs."""
    allocated_gpu_s: dict[str, float]
    """Pool -> GPU-seconds allocated (training and inference) within the window."""
    training_gpu_s: float
    runs: list[Run]
    covered_s: dict[str, float]
    """Model -> s with as many replicas serving as its load needed (past the autoscaler's bound too); `all` when every
    model had them."""
    offered_replica_s: dict[str, float]
    """Model -> replica-seconds of requests offered (the load's integral)."""
    served_replica_s: dict[str, float]
    """Model -> of those, replica-seconds served: a replica serves at most 1.0, the rest is not served."""
    lent_peak_gpus: int
    lent_gpu_s: float
    """GPU-seconds of flex nodes lent to inference."""
    lent_serving_gpu_s: float
    """Of those, GPU-seconds that held a replica."""
    beyond_pool_s: float
    """s during which a model with lent_replicas needed more replicas than its replicas.max (the peaks a lend is
    for)."""
    beyond_pool_covered_s: float
    """Of those, s during which every such model had the replicas its load needed."""
    beyond_pool_unlendable_s: float
    """Of those, s during which no flex node was lent or lendable (decide()'s `lendable`): the flex nodes ran work a
    lend may not requeue, or sat at the training floor."""
    moves: list[float]
    """When the lending controller started a lend or a reclaim (s), in order."""
    timeline: list[tuple[float, int, int, int]]
    """(s, GPUs allocated on slurm, flex and kubernetes pools) at every change."""
    coverage_timeline: list[tuple[float, bool]]
    """(s, whether every model had the replicas its load needed) at every change."""
    inference_timeline: list[tuple[float, int, int, int]]
    """(s, GPUs inference asked for, GPUs it held, GPUs lent to it) at every change."""
    unrunnable: int
    """Jobs no GPU of their team could ever hold."""


class Simulation:
    def __init__(self, model: SiteModel, workload: Workload, policy: Policy, lending: Lending, checkpoint_s: float,
                 slices: StaticSlices) -> None:
        self.env = simpy.Environment()
        self.model, self.workload, self.policy, self.lending = model, workload, policy, lending
        self.checkpoint_s, self.slices = checkpoint_s, slices
        self.stack = policy == Policy.STACK
        self.nodes = [Node(n.name, n.pool, n.gpu_model, n.gpus, n.gpus) for n in model.nodes]
        self.by_name = {n.name: n for n in self.nodes}
        self.flex = [n for n in self.nodes if n.pool == Pool.FLEX]
        self.slurm_gpus = sum(n.gpus for n in self.nodes)
        self.flavor_jobs = dict.fromkeys(model.flavors, 0)
        self.slurm_used = dict.fromkeys(model.teams, 0)
        self.kube_used = {(t, f): 0 for t in model.teams for f in model.flavors}
        self.queue: dict[Side, dict[tuple[str, str], dict[int, list[Run]]]] = {side: {} for side in Side}
        """Waiting jobs by side, then by (QoS or class, team), then by GPUs, each list in arrival order: what a pass
        orders by, and what it skips by width."""
        self.changed: set[Side] = set()
        """Sides whose queue or room changed since their last pass; a pass over an unchanged side starts nothing."""
        self.changed_teams: set[str] = set()
        """Teams whose Slurm queue or running jobs changed since the last static pass: a static slice's room changes
        only with its own team's jobs (the slices add up to Slurm's GPUs, so the free GPUs are never fewer than a
        slice's room), and a pass over an unchanged slice starts nothing."""
        self.running: set[Run] = set()
        self.running_slurm: set[Run] = set()
        self.running_on: dict[str, set[Run]] = {f: set() for f in model.flavors}
        """Kubernetes flavor -> the jobs running on it: what a preemption check walks, not every running job."""
        self.ends: dict[str | None, list[tuple[float, int, int, int]]] = {None: [], **{t: [] for t in model.teams}}
        """Running Slurm jobs' Run.ends, in order, of all teams (None) and of each: what backfill reads."""
        self.runs: list[Run] = []
        self.served = [Served(d) for d in workload.inference]
        self.memory = Memory()
        self.borrowers = [s for s in self.served if s.demand.lent_replicas > 0]
        """The models that may add replicas on lent nodes: decide() reads their demand alone, as the live controller
        does (components/inference/demand.py)."""
        self.floored = [Borrower(d.model, d.gpu_model, d.gpus_per_replica, d.min_replicas, d.max_replicas,
                                 d.lent_replicas) for d in (s.demand for s in self.borrowers)]
        """The same, as lending_decision.borrowers reads them from the spec, for the floors the controller sets."""
        self.wanted_gpus = frozenset(s.demand.gpu_model for s in self.borrowers)
        self.pool_replicas = sum(s.demand.max_replicas for s in self.borrowers)
        """As lending_decision.pool_replicas reads the spec."""
        """As lending_decision.lent_gpu_models reads the spec: the GPUs of models that may add replicas on lent
        nodes."""
        self.wake: simpy.Event | None = None
        """Triggered when inference is placed afresh while the controller sleeps (see _controller)."""
        self.pool_jobs = {Pool.SLURM: 0, Pool.FLEX: 0}
        """GPUs training jobs hold on each Slurm pool."""
        self.free_owned = sum(n.gpus for n in self.nodes)
        """Free GPUs on nodes Slurm owns (not lent or being lent)."""
        self.free_owned_flex = sum(n.gpus for n in self.flex)
        """Of those, on flex nodes: room only for the QoS the flex partitions admit."""
        self.away = 0
        """Flex nodes not Slurm's (being lent or lent)."""
        self.lent = {n.gpu_model: 0 for n in self.nodes} | {d.gpu_model: 0 for d in workload.inference}
        """GPU model -> GPUs of lent flex nodes."""
        self.unrunnable = 0
        self.last = 0.0
        self.allocated = {"slurm": 0.0, "flex": 0.0, "kubernetes": 0.0}
        self.training_gpu_s = 0.0
        self.lent_gpu_s = 0.0
        self.lent_serving_gpu_s = 0.0
        self.beyond_pool_s = 0.0
        self.beyond_pool_covered_s = 0.0
        self.beyond_pool_unlendable_s = 0.0
        self.moves: list[float] = []
        self.covered = {**{s.demand.model: 0.0 for s in self.served}, "all": 0.0}
        self.offered = {s.demand.model: 0.0 for s in self.served}
        self.served_load = {s.demand.model: 0.0 for s in self.served}
        self.lent_peak = 0
        self.timeline: list[tuple[float, int, int, int]] = [(0.0, 0, 0, 0)]
        self.coverage: list[tuple[float, bool]] = []
        self.inference: list[tuple[float, int, int, int]] = [(0.0, 0, 0, 0)]

    # --- accounting ---------------------------------------------------------------------------------------------

    def _pools_now(self) -> tuple[int, int, int, int]:
        """(GPUs allocated on slurm, flex and kubernetes pools, GPUs of training jobs)."""
        slurm, flex_jobs = self.pool_jobs[Pool.SLURM], self.pool_jobs[Pool.FLEX]
        flex_served = sum(s.held.get("flex", 0) for s in self.served)
        jobs = sum(self.flavor_jobs.values())
        served = sum(g for s in self.served for f, g in s.held.items() if f != "flex")
        return slurm, flex_jobs + flex_served, jobs + served, slurm + flex_jobs + jobs

    def _advance(self) -> None:
        """Integrates the state since the last change up to now; call before every change."""
        now = self.env.now
        dt = now - self.last
        if dt > 0:
            slurm, flex, kube, training = self._pools_now()
            self.allocated["slurm"] += slurm * dt
            self.allocated["flex"] += flex * dt
            self.allocated["kubernetes"] += kube * dt
            self.training_gpu_s += training * dt
            self.lent_gpu_s += sum(self.lent.values()) * dt
            self.lent_serving_gpu_s += sum(s.held.get("flex", 0) for s in self.served) * dt
            covered = [s.served_replicas >= s.needed for s in self.served]
            for s, ok in zip(self.served, covered, strict=True):
                self.covered[s.demand.model] += dt * ok
                self.offered[s.demand.model] += dt * s.load
                self.served_load[s.demand.model] += dt * min(s.load, s.served_replicas)
            self.covered["all"] += dt * all(covered)
            if any(s.needed > s.demand.max_replicas for s in self.borrowers):
                self.beyond_pool_s += dt
                self.beyond_pool_covered_s += dt * all(s.served_replicas >= s.needed for s in self.borrowers)
                self.beyond_pool_unlendable_s += dt * (self.stack and self.away == 0 and not lendable(
                    self._flex_nodes(), self.lending, self.wanted_gpus))
        self.last = now

    def _record(self) -> None:
        slurm, flex, kube, _ = self._pools_now()
        if self.timeline[-1][1:] != (slurm, flex, kube):
            self.timeline.append((self.env.now, slurm, flex, kube))
        covered = all(s.served_replicas >= s.needed for s in self.served)
        if not self.coverage or self.coverage[-1][1] != covered:
            self.coverage.append((self.env.now, covered))
        lent = sum(self.lent.values())
        self.lent_peak = max(self.lent_peak, lent)
        gpus = (sum(s.replicas * s.demand.gpus_per_replica for s in self.served),
                sum(sum(s.held.values()) for s in self.served), lent)
        if self.inference[-1][1:] != gpus:
            self.inference.append((self.env.now, *gpus))

    # --- processes ----------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        self.env.process(self._arrivals())
        if self.served:
            self.env.process(self._inference())
        if self.stack and self.served and self.flex:
            self.env.process(self._controller())
        self.env.run(until=self.workload.window_s)
        self._advance()
        for run in self.running:
            assert run.started is not None
            run.done_gpu_s += (self.env.now - run.started) * run.gpus  # progress so far, not lost
        capacity = {"slurm": sum(n.gpus for n in self.nodes if n.pool == Pool.SLURM),
                    "flex": sum(n.gpus for n in self.nodes if n.pool == Pool.FLEX),
                    "kubernetes": sum(g for _, g in self.model.flavors.values())}
        return Outcome(self.policy, self.workload.window_s, capacity, self.allocated, self.training_gpu_s, self.runs,
                       self.covered, self.offered, self.served_load, self.lent_peak, self.lent_gpu_s,
                       self.lent_serving_gpu_s, self.beyond_pool_s, self.beyond_pool_covered_s,
                       self.beyond_pool_unlendable_s, self.moves,
                       self.timeline, self.coverage,
                       self.inference, self.unrunnable)

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        for job in self.workload.jobs:
            if job.arrival_s > self.env.now:
                yield self.env.timeout(job.arrival_s - self.env.now)
            self._advance()
            self._submit(job)
            self._schedule()
            self._record()

    def _inference(self) -> Generator[simpy.Event, Any, None]:
        step_s = self.served[0].demand.step_s
        for step in range(math.ceil(self.workload.window_s / step_s)):
            self._advance()
            for s in self.served:
                s.by_load, s.needed = s.demand.asked(step, self.stack), s.demand.needed(step)
                s.replicas, s.load = max(s.by_load, s.floor), s.demand.load[step]
            self._serve()
            self._schedule()
            self._record()
            yield self.env.timeout(step_s)

    def _running(self, run: Run) -> Generator[simpy.Event, Any, None]:
        try:
            yield self.env.timeout(run.work_s)
        except simpy.Interrupt:
            return  # preempted: _stop has already requeued it
        self._advance()
        run.done_gpu_s += run.work_s * run.gpus
        run.work_s = 0.0
        run.finished = self.env.now
        self._release(run)
        self._schedule()
        self._record()

    def _pending(self) -> int:
        return sum(s.replicas - s.served_replicas for s in self.borrowers if s.replicas > s.served_replicas)

    def _waiting(self) -> float:
        """Requests waiting at the model servers of the models that may use lent nodes, summed (as the controller's
        queries read them): each such model's replicas as M/M/1 queues sharing its
        load, L = rho / (1 - rho) per replica at utilization rho (so the spec's defaults, lend at 10 waiting per replica
        and reclaim at 1, are 91 % and 50 % busy); a model with more load than replicas counts MAX_WAITING each."""
        waiting = 0.0
        for s in self.borrowers:
            replicas = s.served_replicas
            rho = s.load / replicas if replicas else (math.inf if s.load > 0 else 0.0)
            waiting += MAX_WAITING * max(replicas, 1) if rho >= 1 else replicas * rho / (1 - rho)
        return waiting

    def _controller(self) -> Generator[simpy.Event, Any, None]:
        """Ticks every lending.interval_s from 0. Demand changes only when inference is placed afresh (_serve), the flex
        pool only when a job starts or ends on a flex node: while there is no peak and every flex node is Slurm's, or
        at a peak with nothing lendable, the ticks until one of them changes would all hold with no effect on any
        later decision, so they are skipped and the next one runs at its place on the grid."""
        interval = self.lending.interval_s
        while True:
            yield self.env.timeout(0)  # after every demand step of this instant: the controller reads what it left
            self._advance()
            pending = self._pending()
            # No latency in the model: with an objective set, no window is slow (NaN, as a window without a first
            # token reads to decide()).
            signals = Signals(self.env.now, self._waiting(), float(sum(s.served_replicas for s in self.borrowers)),
                              float(pending), math.nan if self.lending.ttft_objective_s is not None else None)
            decision = decide(signals, State(self._flex_nodes(), self.memory, wanted_gpu_models=self.wanted_gpus,
                                                pool_replicas=self.pool_replicas),
                              self.lending)
            self.memory = decision.memory
            if decision.action != Action.HOLD:
                if decision.reason != Reason.FINISH_LEND:
                    self.moves.append(self.env.now)
                self._move(decision.action, decision.nodes)
            # The floors the live controller sets on the autoscalers after each decision.
            floors = replica_floors(self.floored, self.lent, decision.memory.trough_since is not None)
            refloored = False
            for s in self.borrowers:
                floor = floors[s.demand.model]
                if s.floor != floor:
                    s.floor, s.replicas, refloored = floor, max(s.by_load, floor), True
            if decision.action != Action.HOLD or refloored:
                self._serve()
                self._schedule()
                self._record()
            # Nothing lendable at a peak stays so until a flex node's jobs change or inference is placed afresh: the
            # peak has lasted long enough and the cooldown is over (decide() checks both first).
            if decision.action == Action.HOLD and (decision.memory.peak_since is None and self.away == 0
                                                   or decision.reason == Reason.NOTHING_LENDABLE):
                self.wake = self.env.event()
                yield self.wake
                self.wake = None
                yield self.env.timeout(math.ceil(self.env.now / interval) * interval - self.env.now)
            else:
                yield self.env.timeout(interval)

    # --- jobs ---------------------------------------------------------------------------------------------------

    def _most(self, team: str, side: Side) -> int:
        """The most GPUs a team's job can ever hold on a side."""
        if side == Side.SLURM:
            return self.slices.slurm[team] if not self.stack else self.slurm_gpus
        return max((self._kube_limit(team, f) if not self.stack else min(self._kube_limit(team, f), gpus)
                    for f, (_, gpus) in self.model.flavors.items()), default=0)

    def _submit(self, job: SimJob) -> None:
        side = job.side
        if self._most(job.team, side) == 0:
            side = Side.SLURM if side == Side.KUBERNETES else Side.KUBERNETES  # the team has nothing on that side
        most = self._most(job.team, side)
        if most == 0:
            self.unrunnable += 1
            return
        gpus = min(job.gpus, most)
        run = Run(job, side, gpus, job.duration_s * job.gpus / gpus)
        self.runs.append(run)
        self._enqueue(run)
        self.changed.add(side)

    def _start(self, run: Run, held: dict[str, int]) -> None:
        run.held, run.started = held, self.env.now
        if run.first_start is None:
            run.first_start = self.env.now
        for place, gpus in held.items():
            if run.side == Side.SLURM:
                node = self.by_name[place]
                node.free -= gpus
                node.runs.add(run)
                self.pool_jobs[node.pool] += gpus
                if node.pool == Pool.FLEX:
                    self._poke()
                self._owned_room(node, -gpus)
            else:
                self.flavor_jobs[place] += gpus
                self.kube_used[run.team, place] += gpus
                self.running_on[place].add(run)
        if run.side == Side.SLURM:
            self.slurm_used[run.team] += run.gpus
        self.queue[run.side][run.qos, run.team][run.gpus].remove(run)
        self.running.add(run)
        if run.side == Side.SLURM:
            self.running_slurm.add(run)
            on_slurm_pool = sum(g for n, g in held.items() if self.by_name[n].pool == Pool.SLURM)
            run.ends = (self.env.now + run.work_s, run.job.id, run.gpus, on_slurm_pool)
            for key in (None, run.team):
                bisect.insort(self.ends[key], run.ends)
        run.process = self.env.process(self._running(run))

    def _release(self, run: Run) -> None:
        for place, gpus in run.held.items():
            if run.side == Side.SLURM:
                node = self.by_name[place]
                node.free += gpus
                node.runs.discard(run)
                self.pool_jobs[node.pool] -= gpus
                if node.pool == Pool.FLEX:
                    self._poke()
                self._owned_room(node, gpus)
            else:
                self.flavor_jobs[place] -= gpus
                self.kube_used[run.team, place] -= gpus
                self.running_on[place].discard(run)
        if run.side == Side.SLURM:
            self.slurm_used[run.team] -= run.gpus
        run.held = {}
        self.changed.add(run.side)
        if run.side == Side.SLURM:
            self.changed_teams.add(run.team)
        self.running.discard(run)
        self.running_slurm.discard(run)
        if run.ends is not None:
            for key in (None, run.team):
                ends = self.ends[key]
                del ends[bisect.bisect_left(ends, run.ends)]
            run.ends = None

    def _preempt(self, run: Run) -> None:
        """Requeue a running job: it keeps the work up to its last checkpoint and loses the rest."""
        assert run.started is not None
        ran = self.env.now - run.started
        lost = ran % self.checkpoint_s
        run.done_gpu_s += (ran - lost) * run.gpus
        run.lost_gpu_s += lost * run.gpus
        run.work_s -= ran - lost
        run.started = None
        self._release(run)
        run.process.interrupt()
        self._enqueue(run)

    def _schedule(self) -> None:
        if Side.SLURM in self.changed:
            self.changed.discard(Side.SLURM)
            self._slurm_pass()
        if Side.KUBERNETES in self.changed:
            self.changed.discard(Side.KUBERNETES)
            self._kube_pass()

    # --- Slurm --------------------------------------------------------------------------------------------------

    def _owned_room(self, node: Node, gpus: int) -> None:
        """GPUs freed (taken, if negative) on a node, counted as room where Slurm owns it."""
        if node.owner == Owner.SLURM:
            self.free_owned += gpus
            self.free_owned_flex += gpus if node.pool == Pool.FLEX else 0

    def _on_flex(self, run: Run) -> bool:
        """Whether the job may run on flex nodes: the stack's flex partitions admit only model.flex_qos (AllowQos);
        the static world has no partition for lending and schedules every Slurm node alike."""
        return not self.stack or self.model.flex_qos is None or run.qos in self.model.flex_qos

    def _slurm_free(self, team: str | None, flex: bool = True) -> int:
        free = self.free_owned - (0 if flex else self.free_owned_flex)
        return free if team is None else min(free, self.slices.slurm[team] - self.slurm_used[team])

    def _enqueue(self, run: Run) -> None:
        bisect.insort(self.queue[run.side].setdefault((run.qos, run.team), {}).setdefault(run.gpus, []), run,
                      key=_arrival)
        if run.side == Side.SLURM:
            self.changed_teams.add(run.team)

    def _in_order(self, side: Side, rank: Any, team: str | None = None,
                  done: dict[tuple[str, str], bool] | None = None,
                  blocked: dict[tuple[str, str], int] | None = None) -> Iterator[Run]:
        """The side's waiting jobs (of one team, or all), lazily, by rank((QoS or class, team)) and then arrival; each
        list is copied, so jobs may start (and leave their list) while the pass walks them. A (QoS or class, team)
        the caller marks in `done` yields no more of its jobs; one it marks in `blocked` with a width, no more jobs at
        least as wide, but for one per width already taken from its list (the merge holds one of each list), which
        the caller skips."""
        groups = sorted(((rank(key), key, sizes) for key, sizes in self.queue[side].items()
                         if team in (None, key[1]) and any(sizes.values())), key=lambda g: g[0])
        for _, same in itertools.groupby(groups, key=lambda g: g[0]):
            if blocked is None:
                walks = [_until(heapq.merge(*map(list, sizes.values()), key=_arrival), key, done)
                         for _, key, sizes in same]
            else:  # a width's jobs are walked apart from the others, so a block ends their walk
                walks = [_narrower(list(runs), key, gpus, blocked) for _, key, sizes in same
                         for gpus, runs in sizes.items() if runs]
            yield from heapq.merge(*walks, key=_arrival)

    def _slurm_pass(self) -> None:
        if self.stack:
            # Multifactor: QoS first (its weight is the larger), then fairshare: the team's GPUs held over its shares.
            self._easy(None, lambda key: (
                -self.model.qos_priority[key[0]], self.slurm_used[key[1]] / self.model.fairshare[key[1]]))
            return
        changed, self.changed_teams = self.changed_teams, set()
        for team in self.model.teams:
            if team in changed:
                self._easy(team, lambda key: 0)

    def _easy(self, team: str | None, rank: Any) -> None:
        """The waiting Slurm jobs (of one team's slice, or all) in order of rank((QoS, team)) and arrival, under EASY
        backfill.

        Once the first blocked job holds its reservation nothing is preempted, so the free GPUs only shrink as jobs
        start: a job that finds too few free blocks every later job of its QoS and team at least as wide, and the pass
        walks those no more. At 8,192 GPUs the queue of thousands, most waiting for more GPUs than are free or for
        nodes their QoS may not use, was walked in full at every event (30 days of philly-gavel, the stack: 113.5 ->
        37.9 s)."""
        now = self.env.now
        shadow: float | None = None
        extra = 0
        blocked: dict[tuple[str, str], int] = {}
        for run in self._in_order(Side.SLURM, rank, team, blocked=blocked):
            if run.gpus >= blocked.get((run.qos, run.team), math.inf):
                continue
            flex = self._on_flex(run)
            free = self._slurm_free(team, flex)
            if shadow is None:
                if run.gpus <= free or (self.stack and self._slurm_preempt_for(run, free, flex)):
                    self._start(run, self._place(run.gpus, flex))
                    continue
                shadow, extra = self._shadow(team, run.gpus, free, flex)
            elif self._slurm_free(team) <= 0:
                break  # nothing more fits, and only the first job may preempt
            elif run.gpus <= free:
                ends_before = now + run.work_s <= shadow
                if ends_before or run.gpus <= extra:
                    self._start(run, self._place(run.gpus, flex))
                    extra -= 0 if ends_before else run.gpus
            else:
                self._block(blocked, run)

    @staticmethod
    def _block(blocked: dict[tuple[str, str], int], run: Run) -> None:
        """No later job of the run's QoS and team at least as wide can start in this pass (_easy says why)."""
        blocked[run.qos, run.team] = run.gpus

    def _shadow(self, team: str | None, need: int, free: int, flex: bool) -> tuple[float, int]:
        """When the first blocked job can start as running jobs end (their remaining run time is known here; Slurm
        reads time limits), and the GPUs left over then."""
        available = free
        for end, _, gpus, on_slurm_pool in self.ends[team]:
            available += gpus if flex else on_slurm_pool
            if available >= need:
                return end, available - need
        return math.inf, 0

    def _place(self, gpus: int, flex: bool) -> dict[str, int]:
        held: dict[str, int] = {}
        for node in self.nodes:
            if node.owner == Owner.SLURM and node.free > 0 and gpus > 0 and (flex or node.pool != Pool.FLEX):
                take = min(node.free, gpus)
                held[node.name], gpus = take, gpus - take
        assert gpus == 0, "placed more GPUs than were free"
        return held

    def _slurm_preempt_for(self, run: Run, free: int, flex: bool) -> bool:
        preempts = self.model.qos_preempts.get(run.qos, set())
        if not preempts:
            return False
        # A job the flex partitions refuse gains nothing from a victim on flex nodes alone.
        victims = sorted((r for r in self.running_slurm if r.qos in preempts
                          and (flex or any(self.by_name[n].pool != Pool.FLEX for n in r.held))),
                         key=lambda r: (self.model.qos_priority[r.qos], -(r.started or 0.0), r.job.id))
        chosen, freed = [], free
        for victim in victims:
            if freed >= run.gpus:
                break
            chosen.append(victim)
            freed += sum(g for n, g in victim.held.items() if self.by_name[n].owner == Owner.SLURM
                         and (flex or self.by_name[n].pool != Pool.FLEX))
        if freed < run.gpus:
            return False
        for victim in chosen:
            self._preempt(victim)
        return True

    # --- Kubernetes ---------------------------------------------------------------------------------------------

    def _kube_limit(self, team: str, flavor: str) -> int:
        return self.model.quota[team, flavor] if self.stack else self.slices.kubernetes[team, flavor]

    def _flavor_free(self, flavor: str) -> int:
        gpus = self.model.flavors[flavor][1]
        serving = sum(s.held.get(flavor, 0) for s in self.served)
        reserved = serving if self.stack else self.slices.inference[flavor]
        return gpus - reserved - self.flavor_jobs[flavor]

    def _kube_pass(self) -> None:
        # A job that finds no room, nor (stack) work to preempt, blocks every later job of its class and team at least
        # as wide: each would fail the same checks, so the pass skips them instead of repeating those checks (the
        # preemption check sorts the running jobs) for each of thousands of waiting pods at every event. Starts only
        # take room; a preemption may free more than its job takes, so it clears what the pass learned.
        blocked: dict[tuple[str, str], int] = {}
        done: dict[tuple[str, str], bool] = {}
        """Blocked at one GPU: no job of theirs can start in this pass, so the pass stops walking them."""
        for run in self._in_order(Side.KUBERNETES, lambda key: -self.model.class_priority[key[0]], done=done):
            if run.gpus >= blocked.get((run.qos, run.team), math.inf):
                continue
            for flavor in self.model.flavors:
                if (self.kube_used[run.team, flavor] + run.gpus <= self._kube_limit(run.team, flavor)
                        and self._flavor_free(flavor) >= run.gpus):
                    self._start(run, {flavor: run.gpus})
                    break
            else:
                if self.stack and self._kueue_preempt_for(run):
                    blocked.clear()
                    done.clear()
                else:
                    blocked[run.qos, run.team] = run.gpus
                    done[run.qos, run.team] = run.gpus <= 1

    def _kueue_preempt_for(self, run: Run) -> bool:
        """Kueue's withinClusterQueue (the team's own lower-priority work) and reclaimWithinCohort/borrowWithinCohort
        (other teams' lower-priority work while they hold more than their guarantee); whether the job started."""
        preempts = self.model.class_preempts.get(run.qos, set())
        for flavor in self.model.flavors:
            limit = self._kube_limit(run.team, flavor)
            if run.gpus > limit:
                continue
            victims = sorted((r for r in self.running_on[flavor] if r.qos in preempts and (
                r.team == run.team or self.kube_used[r.team, flavor] > self.model.guaranteed[r.team, flavor])),
                             key=lambda r: (self.model.class_priority[r.qos], -(r.started or 0.0), r.job.id))
            free, used, chosen = self._flavor_free(flavor), self.kube_used[run.team, flavor], []
            for victim in victims:
                if free >= run.gpus and used + run.gpus <= limit:
                    break
                chosen.append(victim)
                free += victim.gpus
                used -= victim.gpus if victim.team == run.team else 0
            if free >= run.gpus and used + run.gpus <= limit:
                for victim in chosen:
                    self._preempt(victim)
                self._start(run, {flavor: run.gpus})
                return True
        return False

    # --- inference and lending ----------------------------------------------------------------------------------

    def _serve(self) -> None:
        """Every model's replicas placed afresh: free flavor GPUs, then lent flex GPUs, then (stack) GPUs of work the
        inference class preempts; static inference stays within its slice."""
        for s in self.served:
            s.held = {}
        for s in self.served:
            flavor = self.model.flavor_of(s.demand.gpu_model)
            want = s.replicas * s.demand.gpus_per_replica
            if flavor is not None:
                room = (self.model.flavors[flavor][1] - self.flavor_jobs[flavor] if self.stack
                        else self.slices.inference[flavor])
                room -= sum(o.held.get(flavor, 0) for o in self.served)
                s.held[flavor] = min(want, room)
            if self.stack:
                lent = self.lent[s.demand.gpu_model]
                lent -= sum(o.held.get("flex", 0) for o in self.served if o.demand.gpu_model == s.demand.gpu_model)
                s.held["flex"] = max(0, min(want - sum(s.held.values()), lent))
                if flavor is not None and sum(s.held.values()) < want:
                    s.held[flavor] += self._evict_for_inference(flavor, want - sum(s.held.values()))
            # Whole replicas only: a replica needs all its GPUs.
            spare = sum(s.held.values()) % s.demand.gpus_per_replica
            for place in list(s.held)[::-1]:
                take = min(spare, s.held[place])
                s.held[place] -= take
                spare -= take
        self.changed.add(Side.KUBERNETES)
        self._poke()

    def _poke(self) -> None:
        """Wakes the controller if it sleeps (see _controller)."""
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def _evict_for_inference(self, flavor: str, need: int) -> int:
        preempts = self.model.class_preempts.get(self.model.inference_class or "", set())
        victims = sorted((r for r in self.running_on[flavor] if r.qos in preempts),
                         key=lambda r: (self.model.class_priority[r.qos], -(r.started or 0.0), r.job.id))
        freed = 0
        for victim in victims:
            if freed >= need:
                break
            freed += victim.gpus
            self._preempt(victim)
        return min(freed, need)

    def _flex_nodes(self) -> tuple[FlexNode, ...]:
        now = self.env.now
        return tuple(FlexNode(n.name, n.owner, True, tuple(
            Job(str(r.job.id), r.qos, r.qos in self.model.lending_preempts, now - (r.started or now))
            for r in sorted(n.runs, key=lambda r: r.job.id)), gpu_model=n.gpu_model)
            for n in self.flex)

    def _move(self, action: Action, names: Iterable[str]) -> None:
        self.changed.add(Side.SLURM)
        for name in names:
            node = self.by_name[name]
            if action == Action.RECLAIM:
                if node.owner == Owner.LENT:
                    self.lent[node.gpu_model] -= node.gpus
                if node.owner != Owner.SLURM:
                    node.owner = Owner.SLURM
                    self._owned_room(node, node.free)
                    self.away -= 1
                continue
            if node.owner == Owner.SLURM:
                self._owned_room(node, -node.free)
                node.owner = Owner.LENDING  # drained: no new job starts on it
                self.away += 1
            for run in [r for r in node.runs if r.qos in self.model.lending_preempts]:
                self._preempt(run)
            if not node.runs and node.owner == Owner.LENDING:
                node.owner = Owner.LENT
                self.lent[node.gpu_model] += node.gpus


def _arrival(run: Run) -> tuple[float, int]:
    return run.job.arrival_s, run.job.id


def _until(runs: Iterable[Run], key: tuple[str, str], done: dict[tuple[str, str], bool] | None) -> Iterator[Run]:
    """The runs, until `done` marks their key."""
    for run in runs:
        if done is not None and done.get(key):
            return
        yield run


def _narrower(runs: list[Run], key: tuple[str, str], gpus: int, blocked: dict[tuple[str, str], int]) -> Iterator[Run]:
    """The runs (each of `gpus` GPUs), until `blocked` marks their key at that width or less."""
    for run in runs:
        if gpus >= blocked.get(key, math.inf):
            return
        yield run


def simulate(model: SiteModel, workload: Workload, policy: Policy, lending: Lending, checkpoint_s: float,
             slices: StaticSlices) -> Outcome:
    return Simulation(model, workload, policy, lending, checkpoint_s, slices).run()
