"""The report's figures for one period, from Prometheus (DCGM, kube-state-metrics, the gateway) and Slurm accounting.

Names follow `gpuctl simulate`'s results where they measure the same thing, so a prediction and a measurement sit
side by side: GPU utilization, training queue wait p50/p95 per team, inference latency and errors.
"""

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from components.monitoring.report_queries import (
    gpu_util_by_host,
    inference_error_pct,
    inference_latency_p95,
    pod_gpu_requests_by_namespace,
)
from components.spec.site import Site
from runbooks.report.accounting import Job, started_in, submitted_in, waiting_at_end
from runbooks.report.prometheus import Prometheus
from runbooks.report.window import Window, steps

WEEK_S = 7 * 86_400
ALL_TEAMS = "all teams"
UNKNOWN_HOSTS = "other hosts"
"""The pool of DCGM series whose Hostname is no node of the site (counted in the total, never dropped)."""


@dataclass(frozen=True)
class QueueWait:
    jobs: int
    """Jobs that started in the period."""
    p50_min: float
    p95_min: float
    """NaN when no job started."""
    still_waiting: int
    """Jobs submitted before the period ended and not started by its end."""


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
    capacity_gpus: int
    gpu_utilization_pct: float
    """Capacity-weighted: the sum over every GPU of its mean DCGM utilization, over the site's GPU count."""
    pool_utilization_pct: dict[str, float]
    slurm_gpu_hours: float
    kubernetes_gpu_hours: float
    inference_latency_p95_s: float
    inference_error_pct: float
    queue_wait: dict[str, QueueWait]
    """Per team (Slurm account), and ALL_TEAMS."""
    adoption: dict[str, Adoption]
    utilization_series: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the period's start, capacity-weighted utilization %) per step, for the plot."""
    waits_min: dict[str, list[float]] = field(default_factory=dict)
    """Each started job's wait, per team and ALL_TEAMS, for the CDF."""

    @property
    def allocated_gpu_hours(self) -> float:
        return self.slurm_gpu_hours + self.kubernetes_gpu_hours

    @property
    def gpu_allocation_pct(self) -> float:
        """Allocated GPU-hours (Slurm allocations plus Running pods' GPU requests) over capacity."""
        return 100 * self.allocated_gpu_hours / (self.capacity_gpus * self.window.seconds / 3600)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Hyndman and Fan type 7); NaN for no values."""
    return float(np.percentile(values, q)) if values else math.nan


def _pools(site: Site) -> tuple[dict[str, str], dict[str, int]]:
    host_pool = {n.name: str(g.pool) for g in site.node_groups for n in g.nodes}
    capacity: dict[str, int] = defaultdict(int)
    for g in site.node_groups:
        capacity[str(g.pool)] += g.gpus_per_node * len(g.nodes)
    return host_pool, dict(capacity)


def _utilization(prometheus: Prometheus, site: Site, window: Window, step_s: int
                 ) -> tuple[float, dict[str, float], list[tuple[float, float]]]:
    host_pool, pool_capacity = _pools(site)
    capacity = sum(pool_capacity.values())
    first, last = steps(window, step_s)
    points = window.seconds // step_s
    by_pool: dict[str, float] = defaultdict(float)
    at_step: dict[float, float] = defaultdict(float)
    for series in prometheus.range(gpu_util_by_host(step_s), first, last, step_s):
        pool = host_pool.get(series["metric"].get("Hostname", ""), UNKNOWN_HOSTS)
        for t, value in series["values"]:
            by_pool[pool] += float(value)
            at_step[round(float(t), 3)] += float(value)
    # A step with no series at all is a step of idle (or unmonitored) GPUs: divide by every step, not those seen.
    pools = {pool: by_pool[pool] / (points * gpus) for pool, gpus in sorted(pool_capacity.items())}
    if UNKNOWN_HOSTS in by_pool:
        pools[UNKNOWN_HOSTS] = math.nan
    start = window.start.timestamp()
    series_pct = [(t - start, at_step.get(round(t, 3), 0.0) / capacity)
                  for t in (first.timestamp() + k * step_s for k in range(points))]
    return sum(by_pool.values()) / (points * capacity), pools, series_pct


def _kubernetes_gpu_hours(prometheus: Prometheus, window: Window, step_s: int) -> float:
    # Each point samples the Running pods' requests at its time and stands for the step before it.
    first, last = steps(window, step_s)
    series = prometheus.range(pod_gpu_requests_by_namespace(), first, last, step_s)
    return sum(float(v) for s in series for _, v in s["values"]) * step_s / 3600


def _scalar(prometheus: Prometheus, query: str, at: datetime) -> float:
    """The one value of an aggregating query; NaN when there was nothing to aggregate (no traffic)."""
    result = prometheus.instant(query, at)
    return float(result[0]["value"][1]) if result else math.nan


def _queue_waits(jobs: list[Job], window: Window, teams: list[str]) -> tuple[dict[str, QueueWait],
                                                                             dict[str, list[float]]]:
    started = started_in(jobs, window)
    waiting = waiting_at_end(jobs, window)
    waits: dict[str, list[float]] = {}
    result = {}
    for team in [*teams, ALL_TEAMS]:
        mine = [j for j in started if team in (j.account, ALL_TEAMS)]
        waits[team] = sorted((j.wait_s() or 0.0) / 60 for j in mine)
        result[team] = QueueWait(len(mine), percentile(waits[team], 50), percentile(waits[team], 95),
                                 sum(1 for j in waiting if team in (j.account, ALL_TEAMS)))
    return result, waits


def _adoption(jobs: list[Job], window: Window, teams: list[str], now: float) -> dict[str, Adoption]:
    submitted = submitted_in(jobs, window)
    result = {}
    for team in teams:
        mine = [j for j in jobs if j.account == team]
        active = {j.user for j in mine if window.holds(j.submit) or j.held_s(window, now) > 0}
        result[team] = Adoption(sum(1 for j in submitted if j.account == team) * WEEK_S / window.seconds,
                                sum(j.gpus * j.held_s(window, now) for j in mine) / 3600, len(active))
    return result


def measure(prometheus: Prometheus, site: Site, jobs: list[Job], window: Window, step_s: int, now: float) -> Period:
    """Every figure of one period. Teams are the site's, plus any Slurm account with jobs in the period."""
    utilization, pools, series = _utilization(prometheus, site, window, step_s)
    accounts = {j.account for j in jobs if window.holds(j.submit) or j.held_s(window, now) > 0}
    teams = [t.name for t in site.teams] + sorted(accounts - {t.name for t in site.teams})
    queue_wait, waits = _queue_waits(jobs, window, teams)
    return Period(
        window=window,
        capacity_gpus=sum(g.gpus_per_node * len(g.nodes) for g in site.node_groups),
        gpu_utilization_pct=utilization,
        pool_utilization_pct=pools,
        slurm_gpu_hours=sum(j.gpus * j.held_s(window, now) for j in jobs) / 3600,
        kubernetes_gpu_hours=_kubernetes_gpu_hours(prometheus, window, step_s),
        inference_latency_p95_s=_scalar(prometheus, inference_latency_p95(window.seconds), window.end),
        inference_error_pct=_scalar(prometheus, inference_error_pct(window.seconds), window.end),
        queue_wait=queue_wait,
        adoption=_adoption(jobs, window, teams, now),
        utilization_series=series,
        waits_min=waits,
    )
