"""When to lend flex nodes to Kubernetes inference and when to give them back: one pure function of the live
signals, the flex pool's state and the spec's `lending` settings.

The controller loop (runbooks/flex/controller.py), the tests and the outcomes simulator all call `decide`; none
of them decides anything else. It never moves on missing data, keeps a peak (or trough) waiting until it has lasted
its duration, spaces moves by the cooldown, moves at most max_step_nodes at once, keeps training_floor_nodes in
Slurm, lends only nodes whose GPU a served model may add replicas on (its lent_replicas), the cheapest first (idle,
then those whose preemptible jobs lose the least work), and never a node running work the preemption table protects
from inference. A lent node is filled and given back as soon as it is empty (issue 37): `replica_floors` raises the
autoscaler of each model with lent_replicas to every replica its lent GPUs fit while inference is not in a trough, so
a node lent for one replica carries all it holds; at a trough the floor drops, the replicas past the pool go, and
the node is reclaimed once the trough has lasted trough_s, unless the moves of the last flapping_window_h leave no
room for the reclaim and one more lend below LendingFlapping's flapping_moves (then the node stays lent until they
do).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from components.site.lending import Lending
from components.site.site import Pool, Site


class Owner(StrEnum):
    SLURM = "slurm"
    """Slurm schedules on it."""
    LENDING = "lending"
    """Drained for lending; jobs inference may not requeue are still leaving it."""
    LENT = "lent"
    """Labelled for Kubernetes inference."""


@dataclass(frozen=True)
class Job:
    id: str
    qos: str
    preemptible: bool
    """Inference preempts its QoS in the preemption table: lending may requeue it."""
    since_checkpoint_s: float
    """s of work a requeue loses. The controller knows the time since the job (re)started, the upper bound of it."""


@dataclass(frozen=True)
class FlexNode:
    name: str
    owner: Owner
    usable: bool = True
    """Healthy and drained by nobody else: false for a node down, failed or drained for another reason."""
    jobs: tuple[Job, ...] = ()
    gpu_model: str = field(kw_only=True)
    """Its node group's gpu_model: only replicas of a model on that GPU can use it once lent."""


@dataclass(frozen=True)
class Signals:
    """Demand as Prometheus reports it at one moment; None where a query failed or returned nothing."""

    at: float
    """s since the epoch when the signals were read."""
    waiting: float | None
    """Requests waiting at the model servers (`vllm:num_requests_waiting`, summed)."""
    replicas: float | None
    """Model server replicas reporting that gauge."""
    pending_pods: float | None
    """Model servers pending (no node with free GPUs); the inference namespace's other pods are not counted."""
    ttft_p95_s: float | None = None
    """s; p95 time to first token, read only when the spec sets an objective. NaN: no first token in the window."""

    def missing(self, latency: bool) -> list[str]:
        """The signals the decision cannot use; latency: whether it reads the time to first token."""
        values = {"waiting": self.waiting, "replicas": self.replicas, "pending_pods": self.pending_pods}
        unusable = [name for name, value in values.items() if value is None or not math.isfinite(value)]
        return unusable + (["ttft_p95_s"] if latency and self.ttft_p95_s is None else [])


@dataclass(frozen=True)
class Memory:
    """What one decision hands to the next: when the current peak or trough began, and when the last move was."""

    peak_since: float | None = None
    trough_since: float | None = None
    last_move_at: float | None = None
    moves: tuple[float, ...] = ()
    """When the lends and reclaims of the last flapping_window_h started (s since the epoch, oldest first): the
    reclaim's budget under LendingFlapping."""


@dataclass(frozen=True)
class State:
    nodes: tuple[FlexNode, ...] | None
    """The flex pool; None when Slurm or Kubernetes could not be read."""
    memory: Memory = Memory()
    wanted_gpu_models: frozenset[str] = field(kw_only=True)
    """The GPU models replicas past the kubernetes pool run on (lent_gpu_models): a lent node of any other GPU would
    serve no one."""
    pool_replicas: float = field(kw_only=True)
    """Replicas of the models the signals count that the kubernetes pool holds (pool_replicas): with no more serving
    and none pending, the lent nodes hold nothing the pool could not."""


def lent_models(site: Site) -> list[str]:
    """The served models that may add replicas on lent flex nodes (inference.models[].lent_replicas over 0): the
    signals count their demand alone."""
    return [m.name for m in site.inference.models if m.lent_replicas > 0]


def lent_gpu_models(site: Site) -> frozenset[str]:
    """The GPU models of lent_models."""
    return frozenset(m.gpu_model for m in site.inference.models if m.lent_replicas > 0)


def pool_replicas(site: Site) -> int:
    """The replicas of lent_models the kubernetes pool is sized for: their replicas.max summed."""
    return sum(m.replicas.max for m in site.inference.models if m.lent_replicas > 0)


@dataclass(frozen=True)
class Borrower:
    """A served model with lent_replicas, as replica_floors reads it."""

    name: str
    gpu_model: str
    gpus_per_replica: int
    min_replicas: int
    pool_replicas: int
    """replicas.max: what the kubernetes pool holds."""
    lent_replicas: int


def borrowers(site: Site) -> list[Borrower]:
    """lent_models with what their floors need, in the spec's order."""
    return [Borrower(m.name, m.gpu_model, m.gpus_per_replica, m.replicas.min, m.replicas.max, m.lent_replicas)
            for m in site.inference.models if m.lent_replicas > 0]


def flex_node_gpus(site: Site) -> dict[str, int]:
    """Flex node -> its GPUs (its node group's gpus_per_node)."""
    return {n.name: g.gpus_per_node for g in site.node_groups if g.pool == Pool.FLEX for n in g.nodes}


def lent_gpus(nodes: Sequence[FlexNode], gpus: Mapping[str, int]) -> dict[str, int]:
    """GPU model -> GPUs of the nodes lent (Owner.LENT: labelled for inference), `gpus` giving each node's."""
    lent: dict[str, int] = {}
    for node in nodes:
        if node.owner == Owner.LENT:
            lent[node.gpu_model] = lent.get(node.gpu_model, 0) + gpus[node.name]
    return lent


def replica_floors(models: Sequence[Borrower], lent: Mapping[str, int], trough: bool) -> dict[str, int]:
    """Model -> the least replicas its autoscaler keeps (KEDA's minReplicaCount). Out of a trough, with nodes of its
    GPU lent: replicas.max plus every replica the lent GPUs fit, within lent_replicas (models of one GPU take them in
    the spec's order), so a node lent for the one replica a queue asked carries all it holds and serves the peak at
    a lower utilization, instead of idling the rest of its GPUs. Otherwise replicas.min: the autoscaler follows the
    queue alone, and at a trough the replicas past the pool go, which empties the lent nodes for the reclaim."""
    left = dict(lent)
    floors = {}
    for model in models:
        fit = 0 if trough else min(model.lent_replicas, left.get(model.gpu_model, 0) // model.gpus_per_replica)
        left[model.gpu_model] = left.get(model.gpu_model, 0) - fit * model.gpus_per_replica
        floors[model.name] = model.pool_replicas + fit if fit else model.min_replicas
    return floors


class Action(StrEnum):
    LEND = "lend"
    RECLAIM = "reclaim"
    HOLD = "hold"


class Reason(StrEnum):
    NO_DATA = "no-data"
    PEAK = "peak"
    TROUGH = "trough"
    FINISH_LEND = "finish-lend"
    PEAK_TOO_SHORT = "peak-too-short"
    TROUGH_TOO_SHORT = "trough-too-short"
    COOLDOWN = "cooldown"
    MOVE_BUDGET = "move-budget"
    NOTHING_LENDABLE = "nothing-lendable"
    NOTHING_LENT = "nothing-lent"
    STEADY = "steady"


@dataclass(frozen=True)
class Decision:
    action: Action
    nodes: tuple[str, ...]
    reason: Reason
    detail: str
    """The reason with its numbers, for the audit line and `gpuctl flex status`."""
    memory: Memory
    """To pass in the next State."""


def decide(signals: Signals, state: State, settings: Lending) -> Decision:
    memory, at = state.memory, signals.at
    objective = settings.ttft_objective_s
    missing = signals.missing(objective is not None) + (["the flex pool"] if state.nodes is None else [])
    if missing or state.nodes is None:
        # A gap in the data breaks "has lasted": both clocks start again once data is back.
        return Decision(Action.HOLD, (), Reason.NO_DATA, f"no data for {', '.join(missing)}: holding",
                        replace(memory, peak_since=None, trough_since=None))
    assert signals.waiting is not None and signals.replicas is not None and signals.pending_pods is not None
    per_replica = signals.waiting / signals.replicas if signals.replicas > 0 else (
        math.inf if signals.waiting > 0 else 0.0)
    demand = (f"{signals.waiting:g} waiting over {signals.replicas:g} replicas ({per_replica:.1f} each), "
              f"{signals.pending_pods:g} inference pods pending")
    # NaN compares false: a window without a first token was not slow.
    slow = objective is not None and signals.ttft_p95_s is not None and signals.ttft_p95_s > objective
    if objective is not None:
        demand += f", p95 time to first token {signals.ttft_p95_s:.2f} s (objective {objective:g} s)"
    peak = signals.pending_pods > 0 or per_replica >= settings.lend_waiting_per_replica or slow
    # The autoscaler keeps each replica near its own target (5 waiting by default), over the reclaim threshold: once
    # it asks no more replicas than the pool holds, that is a trough too, or a lend would outlast its peak by days.
    trough = not peak and (per_replica <= settings.reclaim_waiting_per_replica
                           or signals.replicas <= state.pool_replicas)
    window_s = settings.flapping_window_h * 3600
    memory = replace(memory, peak_since=_since(memory.peak_since, at) if peak else None,
                     trough_since=_since(memory.trough_since, at) if trough else None,
                     moves=tuple(t for t in memory.moves if at - t < window_s))

    def hold(reason: Reason, why: str) -> Decision:
        return Decision(Action.HOLD, (), reason, f"{demand}: {why}", memory)

    def move(action: Action, nodes: Sequence[FlexNode], reason: Reason, why: str) -> Decision:
        moved = memory if reason == Reason.FINISH_LEND else replace(memory, last_move_at=at,
                                                                    moves=(*memory.moves, at))
        return Decision(action, tuple(n.name for n in nodes), reason, f"{demand}: {why}", moved)

    lending = [n for n in state.nodes if n.owner == Owner.LENDING]
    if lending and not trough:
        return move(Action.LEND, lending, Reason.FINISH_LEND, "finishing the lend under way")
    cooling = memory.last_move_at is not None and at - memory.last_move_at < settings.cooldown_s
    if peak:
        assert memory.peak_since is not None
        lasted = at - memory.peak_since
        if lasted < settings.peak_s:
            return hold(Reason.PEAK_TOO_SHORT, f"peak for {lasted:.0f} s of the {settings.peak_s} s a lend needs")
        if cooling:
            return hold(Reason.COOLDOWN, _cooldown(memory, at, settings))
        chosen = lendable(state.nodes, settings, state.wanted_gpu_models)
        if not chosen:
            wanted = ", ".join(sorted(state.wanted_gpu_models)) or "none"
            return hold(Reason.NOTHING_LENDABLE, f"peak for {lasted:.0f} s, but no flex node is lendable above the "
                                                 f"training floor of {settings.training_floor_nodes} with a GPU the "
                                                 f"replicas past the kubernetes pool use ({wanted})")
        return move(Action.LEND, chosen, Reason.PEAK, f"peak for {lasted:.0f} s (lend at >= "
                                                      f"{settings.lend_waiting_per_replica:g} each, a pod pending or "
                                                      "the latency objective missed)")
    if trough:
        assert memory.trough_since is not None
        lent = reclaimable(state.nodes, settings)
        if not lent:
            return hold(Reason.NOTHING_LENT, "trough, nothing lent")
        lasted = at - memory.trough_since
        if lasted < settings.trough_s:
            return hold(Reason.TROUGH_TOO_SHORT, f"trough for {lasted:.0f} s of the {settings.trough_s} s a "
                                                 "reclaim needs")
        if cooling:
            return hold(Reason.COOLDOWN, _cooldown(memory, at, settings))
        # The reclaim, and the lend a later peak calls (a cooldown after it at the earliest), must stay under the
        # alert: past that budget the node stays lent, ready for the next peak, until old moves leave the window.
        now_most, then_most = settings.flapping_moves - 2, settings.flapping_moves - 3
        lend_at = at + settings.cooldown_s
        at_lend = [t for t in memory.moves if lend_at - t < window_s]
        if len(memory.moves) > now_most or len(at_lend) > max(0, then_most):
            free_at = max(_expiry(memory.moves, now_most, window_s),
                          _expiry(at_lend, max(0, then_most), window_s) - settings.cooldown_s)
            return hold(Reason.MOVE_BUDGET, f"trough for {lasted:.0f} s, but {len(memory.moves)} moves in the last "
                                            f"{settings.flapping_window_h} h: this reclaim and a lend "
                                            f"{settings.cooldown_s} s later would reach "
                                            f"{max(len(memory.moves) + 1, len(at_lend) + 2)}, "
                                            f"LendingFlapping fires at {settings.flapping_moves}; reclaim possible "
                                            f"in {max(0.0, free_at - at):.0f} s")
        return move(Action.RECLAIM, lent, Reason.TROUGH, f"trough for {lasted:.0f} s (reclaim at "
                                                         f"<= {settings.reclaim_waiting_per_replica:g} each)")
    return hold(Reason.STEADY, "between the thresholds")


def lendable(nodes: Sequence[FlexNode], settings: Lending, gpu_models: frozenset[str]) -> list[FlexNode]:
    """The cheapest nodes to lend, at most max_step_nodes, leaving training_floor_nodes usable in Slurm: nodes of
    `gpu_models` only, idle ones, then those whose jobs are all preemptible, least work lost first. A node running any
    job the table protects from inference is never lent."""
    in_slurm = [n for n in nodes if n.owner == Owner.SLURM and n.usable]
    room = min(settings.max_step_nodes, len(in_slurm) - settings.training_floor_nodes)
    free = [n for n in in_slurm if n.gpu_model in gpu_models and all(j.preemptible for j in n.jobs)]
    free.sort(key=lambda n: (bool(n.jobs), max((j.since_checkpoint_s for j in n.jobs), default=0.0), n.name))
    return free[:max(0, room)]


def reclaimable(nodes: Sequence[FlexNode], settings: Lending) -> list[FlexNode]:
    """Lent nodes to give back, at most max_step_nodes: those still draining first (they serve nothing yet)."""
    lent = [n for n in nodes if n.owner in (Owner.LENDING, Owner.LENT)]
    lent.sort(key=lambda n: (n.owner != Owner.LENDING, n.name))
    return lent[:settings.max_step_nodes]


def _expiry(moves: Sequence[float], most: int, window_s: float) -> float:
    """When at most `most` of `moves` (oldest first) are left within window_s."""
    return moves[len(moves) - most - 1] + window_s if len(moves) > most else -math.inf


def _since(started: float | None, at: float) -> float:
    return at if started is None else started


def _cooldown(memory: Memory, at: float, settings: Lending) -> str:
    assert memory.last_move_at is not None
    return f"cooldown: last move {at - memory.last_move_at:.0f} s ago, {settings.cooldown_s} s between moves"
