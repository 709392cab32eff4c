"""Both worlds on one workload: the site at a stage, the trace mapped onto it, static and this stack simulated."""

from dataclasses import dataclass
from pathlib import Path

from components.spec.site import Site
from runbooks.simulate.engine import Outcome, Policy, simulate
from runbooks.simulate.site_model import site_model, static_slices
from runbooks.simulate.workload import Mapping, Workload, build

CHECKPOINT_MINUTES = 30.0
"""minutes of run time between a training job's checkpoints. The site spec sets none (its nearest fact is the
checkpoint mover's schedule, every 30 minutes), so it is an option with this default."""


@dataclass(frozen=True)
class Comparison:
    workload: Workload
    outcomes: dict[Policy, Outcome]


def at_stage(site: Site, stage: str | None) -> Site:
    """The site as if `stage` were deployed (None: the last stage, every team onboarded). An unknown stage is an error
    naming the known ones."""
    names = [s.name for s in site.stages]
    chosen = names[-1] if stage is None else stage
    if chosen not in names:
        raise ValueError(f"--stage: no stage named {chosen!r} (stages: {', '.join(names)})")
    return site.model_copy(update={"stage": chosen})


def compare(site: Site, traces: Path, mapping: Mapping, checkpoint_minutes: float = CHECKPOINT_MINUTES) -> Comparison:
    model = site_model(site)
    workload = build(site, model.teams, traces, mapping)
    slices = static_slices(model, site)
    outcomes = {policy: simulate(model, workload, policy, site.lending, checkpoint_minutes * 60, slices)
                for policy in Policy}
    return Comparison(workload, outcomes)
