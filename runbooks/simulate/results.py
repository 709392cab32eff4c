"""The figures of one simulated policy, computed from its outcome: GPU utilization (allocated GPU-hours over capacity,
in all and per pool), the training load offered, training queue wait p50/p95 per team with the jobs still waiting at
the window's end, the share of inference requests served and of time every model had the replicas its load needed,
GPU-hours lost to preemption and GPUs lent at the peak."""

import math
from dataclasses import dataclass

from runbooks.simulate.engine import Outcome
from runbooks.waits import Waits


@dataclass(frozen=True)
class Figures:
    utilization_pct: float
    pool_utilization_pct: dict[str, float]
    waits: dict[str, Waits]
    """Team -> its training jobs' queue waits; `all` for every team."""
    inference_covered_pct: float
    inference_served_pct: float
    """Of the requests offered (replica-seconds of load), those served: load past the replicas serving is not."""
    model_covered_pct: dict[str, float]
    lost_gpu_h: float
    lent_peak_gpus: int
    lent_gpu_h: float
    lent_serving_pct: float
    """Of the GPU-hours lent, the share that held a replica (NaN when nothing was lent)."""
    jobs_done: int
    unrunnable: int


def figures(outcome: Outcome) -> Figures:
    window = outcome.window_s
    capacity = sum(outcome.capacity.values())
    allocated = sum(outcome.allocated_gpu_s.values())
    offered = sum(outcome.offered_replica_s.values())
    waits: dict[str, list[float]] = {}
    never: dict[str, int] = {}
    for run in outcome.runs:
        start = run.first_start if run.first_start is not None else window
        for key in (run.team, "all"):
            waits.setdefault(key, []).append(start - run.job.arrival_s)
            never[key] = never.get(key, 0) + (run.first_start is None)
    return Figures(
        utilization_pct=100 * allocated / (capacity * window),
        pool_utilization_pct={pool: 100 * outcome.allocated_gpu_s[pool] / (gpus * window)
                              for pool, gpus in outcome.capacity.items() if gpus},
        waits={key: Waits.of([s / 3600 for s in w], never[key]) for key, w in waits.items()},
        inference_covered_pct=100 * outcome.covered_s["all"] / window,
        inference_served_pct=100 * sum(outcome.served_replica_s.values()) / offered if offered else 100.0,
        model_covered_pct={m: 100 * s / window for m, s in outcome.covered_s.items() if m != "all"},
        lost_gpu_h=sum(r.lost_gpu_s for r in outcome.runs) / 3600,
        lent_peak_gpus=outcome.lent_peak_gpus,
        lent_gpu_h=outcome.lent_gpu_s / 3600,
        lent_serving_pct=100 * outcome.lent_serving_gpu_s / outcome.lent_gpu_s if outcome.lent_gpu_s else math.nan,
        jobs_done=sum(r.finished is not None for r in outcome.runs),
        unrunnable=outcome.unrunnable,
    )
