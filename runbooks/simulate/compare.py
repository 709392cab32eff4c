"""Both worlds on one workload: the site at a stage, the trace mapped onto it, static and this stack simulated."""

from dataclasses import dataclass
from pathlib import Path

from components.site.site import Site
from runbooks.simulate.engine import Outcome, Policy, simulate
from runbooks.simulate.site_model import SiteModel, StaticSlices, StaticSplit, site_model, static_slices
from runbooks.simulate.workload import Mapping, Side, Workload, build


@dataclass(frozen=True)
class Comparison:
    workload: Workload
    model: SiteModel
    slices: StaticSlices
    split: StaticSplit
    outcomes: dict[Policy, Outcome]


def at_stage(site: Site, stage: str | None) -> Site:
    """The site as if `stage` were deployed (None: the last stage, every team onboarded). An unknown stage is an error
    naming the known ones."""
    names = [s.name for s in site.stages]
    chosen = names[-1] if stage is None else stage
    if chosen not in names:
        raise ValueError(f"--stage: no stage named {chosen!r} (stages: {', '.join(names)})")
    return site.model_copy(update={"stage": chosen})


def checkpoint_s(site: Site, minutes: float | None = None) -> float:
    """s of run time between a job's checkpoints: `minutes`, else the spec's
    storage.nfs_hot.checkpoint_interval_minutes."""
    return site.storage.nfs_hot.checkpoint_interval_s if minutes is None else 60 * minutes


def team_demand(workload: Workload) -> dict[str, tuple[float, float]]:
    """Team -> GPU-seconds its jobs offer to Slurm, to Kubernetes: what StaticSplit.DEMAND cuts the slices by."""
    demand: dict[str, tuple[float, float]] = {}
    for job in workload.jobs:
        slurm, kubernetes = demand.get(job.team, (0.0, 0.0))
        work = job.gpus * job.duration_s
        demand[job.team] = (slurm + work, kubernetes) if job.side == Side.SLURM else (slurm, kubernetes + work)
    return demand


def compare(site: Site, traces: Path, mapping: Mapping, checkpoint_minutes: float | None = None,
            split: StaticSplit = StaticSplit.FAIRSHARE) -> Comparison:
    model = site_model(site)
    workload = build(site, model.teams, traces, mapping)
    slices = static_slices(model, site, team_demand(workload) if split == StaticSplit.DEMAND else None)
    outcomes = {policy: simulate(model, workload, policy, site.lending, checkpoint_s(site, checkpoint_minutes), slices)
                for policy in Policy}
    return Comparison(workload, model, slices, split, outcomes)
