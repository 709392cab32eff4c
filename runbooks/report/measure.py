"""The report's figures for one period, from Prometheus (DCGM, kube-state-metrics, the gateway) and Slurm accounting.

Names and definitions follow `gpuctl simulate`'s results (runbooks/simulate/results.py) where they measure the same
thing, so a prediction and a measurement sit side by side: `utilization_pct` and `pool_utilization_pct` are allocated
GPU-hours over capacity; `waits` are per team and `all`, over the jobs submitted in the period, nearest-rank p50/p95
in hours, a job not started by the period's end counting its wait up to the end (a lower bound) and as never started.
The DCGM figures say how busy the allocated GPUs were.
"""

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from components.monitoring.report_queries import (
    gpu_util_by_host,
    inference_error_pct,
    inference_latency_p95,
    pod_gpu_requests_by_node,
)
from components.site.site import Site
from components.slurm.conf import partitions
from runbooks.report.accounting import Job, submitted_in
from runbooks.report.prometheus import Prometheus
from runbooks.report.window import Window, steps
from runbooks.waits import Waits

WEEK_S = 7 * 86_400
ALL = "all"
"""The key of every team together, as in gpuctl simulate's results."""
OTHER = "other"
"""The pool of hosts and partitions that are no node or partition of the site: counted in the total, never dropped."""


@dataclass(frozen=True)
class Adoption:
    weekly_jobs: float
    """Jobs submitted in the period, per 7 days."""
    gpu_hours: float
    """GPU-hours of the team's allocations inside the period."""
    active_users: int
    """Users with a job submitted or running in the period."""


@dataclass
class Period:
    window: Window
    capacity: dict[str, int]
    """GPUs per pool."""
    utilization_pct: float
    """Allocated GPU-hours (Slurm allocations and Running pods' GPU requests) over capacity."""
    pool_utilization_pct: dict[str, float]
    dcgm_utilization_pct: float
    """Capacity-weighted: the sum over every GPU of its mean DCGM utilization, over the GPUs of the site."""
    dcgm_pool_utilization_pct: dict[str, float]
    slurm_gpu_hours: float
    kubernetes_gpu_hours: float
    inference_latency_p95_s: float
    inference_error_pct: float
    waits: dict[str, Waits]
    """Per team (Slurm account) and ALL."""
    adoption: dict[str, Adoption]
    dcgm_series: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the period's start, capacity-weighted DCGM utilization %) per step, for the plot."""
    waits_h: dict[str, list[float]] = field(default_factory=dict)
    """Each submitted job's wait, per team and ALL, for the CDF."""
    inference_series: list[tuple[float, float, float]] = field(default_factory=list)
    """(seconds since the period's start, p95 latency s, error %) over each step, for the plot; NaN without traffic."""

    @property
    def capacity_gpus(self) -> int:
        return sum(self.capacity.values())


def host_pools(site: Site) -> dict[str, str]:
    return {n.name: str(g.pool) for g in site.node_groups for n in g.nodes}


def pool_capacity(site: Site) -> dict[str, int]:
    capacity: dict[str, int] = defaultdict(int)
    for g in site.node_groups:
        capacity[str(g.pool)] += g.gpus_per_node * len(g.nodes)
    return dict(capacity)


def _shares(gpu_s: dict[str, float], capacity: dict[str, int], window_s: float) -> tuple[float, dict[str, float]]:
    """% of capacity in all and per pool; a pool outside the site has no capacity to divide by (NaN)."""
    pools = {pool: 100 * gpu_s.get(pool, 0.0) / (gpus * window_s) for pool, gpus in sorted(capacity.items())}
    if OTHER in gpu_s:
        pools[OTHER] = math.nan
    return 100 * sum(gpu_s.values()) / (sum(capacity.values()) * window_s), pools


def _dcgm(prometheus: Prometheus, site: Site, window: Window, step_s: int
          ) -> tuple[float, dict[str, float], list[tuple[float, float]]]:
    hosts, capacity = host_pools(site), pool_capacity(site)
    first, last = steps(window, step_s)
    points = window.seconds // step_s
    busy_s: dict[str, float] = defaultdict(float)
    at_step: dict[float, float] = defaultdict(float)
    for series in prometheus.range(gpu_util_by_host(step_s), first, last, step_s):
        pool = hosts.get(series["metric"].get("Hostname", ""), OTHER)
        for t, value in series["values"]:
            # A GPU busy u % for one step is u/100 of a GPU for step_s seconds.
            busy_s[pool] += float(value) / 100 * step_s
            at_step[round(float(t), 3)] += float(value)
    # A step with no series at all is a step of idle (or unmonitored) GPUs: divide by every step, not those seen.
    total, pools = _shares(busy_s, capacity, points * step_s)
    start, gpus = window.start.timestamp(), sum(capacity.values())
    series_pct = [(t - start, at_step.get(round(t, 3), 0.0) / gpus)
                  for t in (first.timestamp() + k * step_s for k in range(points))]
    return total, pools, series_pct


def _kubernetes_gpu_s(prometheus: Prometheus, site: Site, window: Window, step_s: int) -> dict[str, float]:
    """GPU-seconds of Running pods' requests per pool. Each point samples the requests at its time and stands for the
    step before it."""
    hosts = host_pools(site)
    first, last = steps(window, step_s)
    gpu_s: dict[str, float] = defaultdict(float)
    for series in prometheus.range(pod_gpu_requests_by_node(), first, last, step_s):
        gpu_s[hosts.get(series["metric"].get("node", ""), OTHER)] += sum(float(v) for _, v in series["values"]) * step_s
    return dict(gpu_s)


def _slurm_gpu_s(site: Site, jobs: list[Job], window: Window, now: float) -> dict[str, float]:
    """GPU-seconds of Slurm allocations per pool, by the partition each job ran in (one pool per partition)."""
    pool_of = {name: str(groups[0].pool) for name, groups in partitions(site).items()}
    gpu_s: dict[str, float] = defaultdict(float)
    for job in jobs:
        held = job.held_s(window, now)
        if held:
            gpu_s[pool_of.get(job.partition, OTHER)] += job.gpus * held
    return dict(gpu_s)


def _waits(jobs: list[Job], window: Window, teams: list[str]) -> tuple[dict[str, Waits], dict[str, list[float]]]:
    submitted = submitted_in(jobs, window)
    waits: dict[str, list[float]] = {}
    result = {}
    for team in [*teams, ALL]:
        mine = [j for j in submitted if team in (j.account, ALL)]
        waits[team] = sorted(j.wait_s(window) / 3600 for j in mine)
        result[team] = Waits.of(waits[team], sum(1 for j in mine if not j.started_by(window)))
    return result, waits


def _adoption(jobs: list[Job], window: Window, teams: list[str], now: float) -> dict[str, Adoption]:
    result = {}
    for team in teams:
        mine = [j for j in jobs if j.account == team]
        active = {j.user for j in mine if window.holds(j.submit) or j.held_s(window, now) > 0}
        result[team] = Adoption(sum(1 for j in mine if window.holds(j.submit)) * WEEK_S / window.seconds,
                                sum(j.gpus * j.held_s(window, now) for j in mine) / 3600, len(active))
    return result


def _scalar(prometheus: Prometheus, query: str, at: datetime) -> float:
    """The one value of an aggregating query; NaN when there was nothing to aggregate (no traffic)."""
    result = prometheus.instant(query, at)
    return float(result[0]["value"][1]) if result else math.nan


def _inference_series(prometheus: Prometheus, window: Window, step_s: int) -> list[tuple[float, float, float]]:
    """The gateway's figures over each step: the same queries as the period's, over one step's range."""
    first, last = steps(window, step_s)
    start = window.start.timestamp()

    def by_time(query: str) -> dict[float, float]:
        return {round(float(t), 3): float(v) for s in prometheus.range(query, first, last, step_s)
                for t, v in s["values"]}

    latency = by_time(inference_latency_p95(step_s))
    errors = by_time(inference_error_pct(step_s))
    return [(t - start, latency.get(round(t, 3), math.nan), errors.get(round(t, 3), math.nan))
            for t in (first.timestamp() + k * step_s for k in range(window.seconds // step_s))]


def teams(site: Site, jobs: list[Job]) -> list[str]:
    """The site's teams, then any other Slurm account with jobs (root's, a team not yet in the spec), by name."""
    names = [t.name for t in site.teams]
    return names + sorted({j.account for j in jobs} - set(names))


def measure(prometheus: Prometheus, site: Site, jobs: list[Job], window: Window, step_s: int, now: float) -> Period:
    """Every figure of one period, per team of `teams(site, jobs)`: both periods of a report list the same teams."""
    capacity = pool_capacity(site)
    dcgm, dcgm_pools, series = _dcgm(prometheus, site, window, step_s)
    slurm_s = _slurm_gpu_s(site, jobs, window, now)
    kubernetes_s = _kubernetes_gpu_s(prometheus, site, window, step_s)
    allocated = {pool: slurm_s.get(pool, 0.0) + kubernetes_s.get(pool, 0.0) for pool in {*slurm_s, *kubernetes_s}}
    utilization, pools = _shares(allocated, capacity, window.seconds)
    names = teams(site, jobs)
    waits, waits_h = _waits(jobs, window, names)
    return Period(
        window=window,
        capacity=capacity,
        utilization_pct=utilization,
        pool_utilization_pct=pools,
        dcgm_utilization_pct=dcgm,
        dcgm_pool_utilization_pct=dcgm_pools,
        slurm_gpu_hours=sum(slurm_s.values()) / 3600,
        kubernetes_gpu_hours=sum(kubernetes_s.values()) / 3600,
        inference_latency_p95_s=_scalar(prometheus, inference_latency_p95(window.seconds), window.end),
        inference_error_pct=_scalar(prometheus, inference_error_pct(window.seconds), window.end),
        waits=waits,
        adoption=_adoption(jobs, window, names, now),
        dcgm_series=series,
        inference_series=_inference_series(prometheus, window, step_s),
        waits_h=waits_h,
    )
