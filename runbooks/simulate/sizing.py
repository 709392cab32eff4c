"""Sizing lending from a request-rate trace (`gpuctl simulate --size-lending`): the flex GPUs the peaks of the models
with lent_replicas need past their replicas.max, and, for each lend and reclaim delay tried, how much of those peaks
the stack serves in full, how much of what it lends holds a replica, how often it moves, and the training GPU-hours
it costs against the same stack lending nothing. docs/simulate.md ("Sizing lending") reads prod's settings from it.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from components.site.lending import Lending
from components.site.site import Pool
from runbooks.simulate.engine import Outcome, Policy, simulate
from runbooks.simulate.results import figures
from runbooks.simulate.site_model import SiteModel, StaticSlices
from runbooks.simulate.workload import Workload

DELAYS = ((30, 30), (60, 30), (120, 30), (300, 30), (30, 300), (60, 300), (30, 1800), (60, 1800))
"""(peak_s, trough_s) tried: a lend at the first tick of a peak (interval_s 30) up to the default 300 s; a reclaim at
the first tick after the lent nodes' replicas go (the floor drops at a trough: lending_decision.replica_floors),
after 300 s (the Kubernetes HPA's default scale-down stabilization window) or after the default 1800 s. The move
budget under LendingFlapping holds a reclaim past trough_s where moves came close together."""


@dataclass(frozen=True)
class FlexNeed:
    model: str
    gpu_model: str
    beyond_pool_h: float
    """Hours the load needs more replicas than replicas.max."""
    replicas: int
    """The most replicas past replicas.max the load needs at once (past lent_replicas too)."""
    gpus: int
    nodes: int
    """Flex nodes of its GPU those replicas need, whole replicas to a node."""
    lendable_nodes: int
    """Flex nodes of its GPU the stack may lend (above lending.training_floor_nodes)."""


def flex_need(model: SiteModel, workload: Workload, lending: Lending) -> list[FlexNeed]:
    flex = [n for n in model.nodes if n.pool == Pool.FLEX]
    needs = []
    for demand in workload.inference:
        if demand.lent_replicas == 0:
            continue
        past = [max(0, demand.needed(step) - demand.max_replicas) for step in range(len(demand.load))]
        own = [n for n in flex if n.gpu_model == demand.gpu_model]
        per_node = (own[0].gpus // demand.gpus_per_replica) if own else 0
        most = max(past, default=0)
        needs.append(
            FlexNeed(
                demand.model,
                demand.gpu_model,
                sum(p > 0 for p in past) * demand.step_s / 3600,
                most,
                most * demand.gpus_per_replica,
                math.ceil(most / per_node) if per_node else 0,
                min(len(own), max(0, len(flex) - lending.training_floor_nodes)),
            )
        )
    return needs


@dataclass(frozen=True)
class LendingOption:
    peak_s: int
    trough_s: int
    peaks_covered_pct: float
    """Of the time a model with lent_replicas needs more than replicas.max, the share every such model has the
    replicas its load needs (NaN: no such time)."""
    peaks_unlendable_pct: float
    """Of that time, the share no flex node was lent or lendable (running work a lend may not requeue)."""
    lent_gpu_h: float
    lent_serving_pct: float
    """Of the GPU-hours lent, the share that held a replica (NaN: nothing lent)."""
    moves: int
    most_moves_in_window: int
    """The most lends and reclaims within any lending.flapping_window_h: LendingFlapping fires at flapping_moves."""
    training_cost_gpu_h: float
    """Training progress (GPU-hours kept) without lending, less with it: the lends' requeues and the flex GPU-hours
    training did not get."""


def lending_options(
    model: SiteModel,
    workload: Workload,
    lending: Lending,
    checkpoint_s: float,
    slices: StaticSlices,
    delays: Sequence[tuple[int, int]] = DELAYS,
) -> list[LendingOption]:
    """The stack replayed once lending nothing (the lent_replicas of every model 0), then once per (peak_s, trough_s),
    the spec's other lending settings kept."""
    never = replace(workload, inference=[replace(d, lent_replicas=0) for d in workload.inference])
    baseline = _progress_gpu_h(simulate(model, never, Policy.STACK, lending, checkpoint_s, slices))
    window = lending.flapping_window_h * 3600
    options = []
    for peak_s, trough_s in delays:
        settings = lending.model_copy(update={"peak_s": peak_s, "trough_s": trough_s})
        outcome = simulate(model, workload, Policy.STACK, settings, checkpoint_s, slices)
        result = figures(outcome)
        options.append(
            LendingOption(
                peak_s,
                trough_s,
                _pct(outcome.beyond_pool_covered_s, outcome.beyond_pool_s),
                _pct(outcome.beyond_pool_unlendable_s, outcome.beyond_pool_s),
                result.lent_gpu_h,
                result.lent_serving_pct,
                len(outcome.moves),
                _most_within(outcome.moves, window),
                baseline - _progress_gpu_h(outcome),
            )
        )
    return options


def _pct(part: float, whole: float) -> float:
    return 100 * part / whole if whole else math.nan


def _progress_gpu_h(outcome: Outcome) -> float:
    return sum(r.done_gpu_s for r in outcome.runs) / 3600


def _most_within(times: list[float], window_s: float) -> int:
    """The most of `times` (in order) within any window_s."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most
