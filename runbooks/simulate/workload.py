"""From a trace to this site's workload: which team submits each job, how a trace from a cluster of another size is
scaled to the site, which scheduler and class a job goes to, and how a request rate becomes inference GPU demand.

Every choice is a field of Mapping (gpuctl simulate's options) with its default; docs/simulate.md explains them.
"""

import math
import random
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from components.scheduling.preemption import priority_classes, slurm_qos
from components.site.site import Site
from runbooks.simulate.traces import (
    SERVEGEN_SERIES,
    Trace,
    TraceError,
    servegen_rates,
    trace_file,
    training_jobs,
)

DAY_S = 86_400


class Side(StrEnum):
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


@dataclass(frozen=True)
class Mapping:
    trace: Trace = Trace.GAVEL
    days: float = 30.0
    """days of the trace replayed, from its start."""
    training_load: float = 0.7
    """Training GPU-hours offered over the window, as a share of the site's GPU-hours: the trace's jobs are thinned
    (or copied) at random until they offer this much."""
    short_job_hours: float = 1.0
    """hours; a job that runs at most this long goes to Kubernetes (Kueue), a longer one to Slurm: the site's split of
    short jobs and long training."""
    inference_peak: float = 1.0
    """The request-rate series' highest window asks for this share of each served model's replicas.max."""
    team_map: dict[str, str] = field(default_factory=dict)
    """team -> trace group (Philly virtual cluster; `openb` for Alibaba). Empty: team i takes group i modulo the
    number of groups, and a group's jobs are dealt to its teams in turn."""
    seed: int = 0
    """Seed of the thinning and copying."""


@dataclass(frozen=True)
class SimJob:
    id: int
    team: str
    arrival_s: float
    gpus: int
    duration_s: float
    side: Side
    slurm_qos: str
    """The Slurm QoS it runs under when it goes to Slurm."""
    priority_class: str
    """The PriorityClass it runs under when it goes to Kubernetes."""


@dataclass(frozen=True)
class InferenceDemand:
    model: str
    gpu_model: str
    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    lent_replicas: int
    """Replicas the autoscaler may add past max_replicas for lent flex nodes (the spec's lent_replicas)."""
    waiting_per_replica: int
    """The autoscaler's target: requests waiting per replica (KEDA's threshold on vllm:num_requests_waiting)."""
    step_s: int
    load: list[float]
    """Replicas' worth of requests in each step of step_s from the window's start (a replica serving 1.0 is busy all
    the time)."""

    def needed(self, step: int) -> int:
        """Replicas the load needs, whatever the bounds: enough that each, an M/M/1 queue at utilization rho with
        rho / (1 - rho) waiting, has at most waiting_per_replica waiting (the autoscaler's target)."""
        busy = self.waiting_per_replica / (1 + self.waiting_per_replica)
        return max(self.min_replicas, math.ceil(self.load[step] / busy - 1e-9))

    def asked(self, step: int, lending: bool) -> int:
        """Replicas the autoscaler asks for: those needed, within min_replicas and max_replicas, plus lent_replicas
        where lent flex nodes exist to hold them (lending: this stack; the static world has none)."""
        return min(self.max_replicas + (self.lent_replicas if lending else 0), self.needed(step))


@dataclass(frozen=True)
class Workload:
    jobs: list[SimJob]
    inference: list[InferenceDemand]
    window_s: float
    scale: float
    """Copies of each trace job offered, on average (under 1: thinned)."""
    offered_load: float
    """Training GPU-hours of the jobs offered over the site's GPU-hours in the window: what --training-load asked for,
    up to the randomness of the thinning and copying."""


MAX_COPIES = 1_000
"""Copies of one trace job at most (the published traces need at most 624, Alibaba's over 365 days at load 10)."""
MAX_JOBS = 5_000_000
"""Simulated jobs at most, about 1 GB of job records before the replay (Alibaba's 365 days at load 10 are 3.85
million: 0.8 GB and 29 s to build, measured)."""


def build(site: Site, teams: list[str], traces: Path, mapping: Mapping) -> Workload:
    window_s = mapping.days * DAY_S
    trace = [j for j in training_jobs(traces, mapping.trace) if j.arrival_s < window_s]
    if not trace:
        raise TraceError(f"{traces / mapping.trace}: no job arrives in the first {mapping.days:g} days")
    owners = _owners(teams, sorted({j.group for j in trace}), mapping.team_map)
    # Scaled on the groups some team takes: the jobs of the others are never offered.
    trace = [j for j in trace if j.group in owners]
    site_gpus = sum(len(g.nodes) * g.gpus_per_node for g in site.node_groups)
    offered = sum(j.gpus * j.duration_s for j in trace)
    scale = mapping.training_load * site_gpus * window_s / offered
    if scale > MAX_COPIES or scale * len(trace) > MAX_JOBS:
        # A few tiny jobs would be copied until they offer the load: a 50-byte trace asked for 10^8 jobs (issue 41).
        raise TraceError(
            f"{trace_file(traces, mapping.trace)}: {len(trace):,} jobs offer {offered / 3600:.3g} GPU-hours in the "
            f"first {mapping.days:g} days; --training-load {mapping.training_load:g} of {site_gpus} GPUs needs "
            f"{scale:.3g} copies of each ({scale * len(trace):.3g} jobs), over the limit of {MAX_COPIES:,} copies and "
            f"{MAX_JOBS:,} jobs: replay more days, lower --training-load, or give a fuller trace")
    slurm_class, kubernetes_class = _classes(site)
    rng, dealt = random.Random(mapping.seed), dict.fromkeys(owners, 0)
    jobs: list[SimJob] = []
    for job in trace:
        copies = int(scale) + (rng.random() < scale - int(scale))
        for _ in range(copies):
            group = owners[job.group]
            team = group[dealt[job.group] % len(group)]
            dealt[job.group] += 1
            side = Side.KUBERNETES if job.duration_s <= mapping.short_job_hours * 3600 else Side.SLURM
            jobs.append(SimJob(len(jobs), team, job.arrival_s, job.gpus, job.duration_s, side,
                               slurm_class[job.qos], kubernetes_class[job.qos]))
    load = sum(j.gpus * j.duration_s for j in jobs) / (site_gpus * window_s)
    return Workload(jobs, inference_demand(site, traces, mapping, window_s), window_s, scale, load)


def _owners(teams: list[str], groups: list[str], team_map: dict[str, str]) -> dict[str, list[str]]:
    """group -> the teams that submit its jobs."""
    unknown = [f"{team}={group}" for team, group in team_map.items() if group not in groups or team not in teams]
    if unknown:
        raise TraceError(f"--team-map: {', '.join(unknown)} names no team of the site or no group of the trace "
                         f"(teams: {', '.join(teams)}; groups: {', '.join(groups)})")
    pairs = team_map.items() if team_map else [(team, groups[i % len(groups)]) for i, team in enumerate(teams)]
    owners: dict[str, list[str]] = {}
    for team, group in pairs:
        owners.setdefault(group, []).append(team)
    return owners


def _classes(site: Site) -> tuple[dict[str | None, str], dict[str | None, str]]:
    """A trace class -> the Slurm QoS and the PriorityClass a team job gets: LS (latency-sensitive) the team default
    QoS and the highest class teams may use on Kubernetes, BE (best-effort) the lowest team class of each, a job the
    trace gives no class the team default QoS and the PriorityClass a pod naming none gets (the global default)."""
    team_qos = [q.name for q in slurm_qos(site) if q.for_teams]
    open_to_teams = {c.name for c in site.scheduling.classes if c.for_teams}
    team_pcs = [pc.name for pc in priority_classes(site) if pc.name in open_to_teams]
    default_pc = next(pc.name for pc in priority_classes(site) if pc.global_default)
    default_qos = site.scheduling.team_default_class
    return ({"LS": default_qos, None: default_qos, "BE": team_qos[-1]},
            {"LS": team_pcs[0], None: default_pc, "BE": team_pcs[-1]})


def inference_demand(site: Site, traces: Path, mapping: Mapping, window_s: float) -> list[InferenceDemand]:
    """Each served model follows one ServeGen series (the model with the most GPUs per replica the largest class, and
    so on, in turn), repeated to fill the window; replicas = the rate's share of the series' peak times
    inference_peak times replicas.max, in replicas' worth of load."""
    models = sorted(site.inference.models, key=lambda m: -m.gpus_per_replica)
    if not models:
        return []
    series = servegen_rates(traces)
    steps = math.ceil(window_s / series.step_s)
    demand = []
    for i, model in enumerate(models):
        rates = series.rates[SERVEGEN_SERIES[i % len(SERVEGEN_SERIES)]]
        peak = max(rates) or 1.0
        load = [mapping.inference_peak * model.replicas.max * rates[s % len(rates)] / peak for s in range(steps)]
        demand.append(InferenceDemand(model.name, model.gpu_model, model.gpus_per_replica, model.replicas.min,
                                      model.replicas.max, model.lent_replicas, model.waiting_per_replica, series.step_s,
                                      load))
    return demand
