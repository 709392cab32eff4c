"""`gpuctl simulate --replay-failures`: the failure replay (runbooks/simulate/failures.py) on the stack's site and the
trace's job run times, as a table of both worlds side by side with the difference."""

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from components.site.acceptance import CRITICAL_ALERT_MAX_S
from components.site.site import Site
from runbooks.simulate.engine import Policy
from runbooks.simulate.failures import LLAMA3, LONG_JOB_S, FailureModel, Replayed, replay
from runbooks.simulate.traces import Trace, training_jobs

RESPONSE_MINUTES = CRITICAL_ALERT_MAX_S / 60
"""Default minutes from a page to a human acting: the on-call response the SOPs are written for (a critical page
acknowledged and mitigated within a quarter hour, components/site/acceptance.py)."""
PERSISTENT_SHARE = 0.5
"""Default share of GPU faults a diagnosis fails (the GPU stays broken until repaired). An assumption: the Llama 3
paper counts interruptions by cause, not which ones a reset cleared; docs/simulate.md shows 0 and 1 too."""


# The options `gpuctl simulate` takes for the replay (runbooks/simulate/cli.py).
ReplayFailuresOption = Annotated[bool, typer.Option(
    help="Also replay GPU failures at a published fleet rate: lost GPU-hours with the node health controller beside "
         "the static world, where a failed node takes jobs until a human acts (docs/simulate.md).")]
FailureRateOption = Annotated[float | None, typer.Option(
    min=1e-9, max=1.0, help="GPU faults per GPU-hour; default: the Llama 3 paper's (1.16e-5).")]
PersistentShareOption = Annotated[float, typer.Option(
    min=0.0, max=1.0, help="Share of faults that keep the GPU broken until repaired (a diagnosis fails).")]
ResponseMinutesOption = Annotated[float, typer.Option(
    min=0.0, max=43_200, help="Minutes from a page or a hand-off to a human acting.")]
GangNodesOption = Annotated[int, typer.Option(min=1, max=128, help="Nodes a job spans: a failure loses all.")]


def failure_model(traces: Path, trace: Trace, rate_per_gpu_hour: float | None, persistent_share: float,
                  response_minutes: float, gang_nodes: int, checkpoint_s: float) -> FailureModel:
    """The model from the options: the study's rate unless one is given, the trace's long jobs' run times."""
    durations = tuple(job.duration_s for job in training_jobs(traces, trace) if job.duration_s > LONG_JOB_S)
    return FailureModel(LLAMA3.rate_per_gpu_hour if rate_per_gpu_hour is None else rate_per_gpu_hour,
                        persistent_share, response_minutes * 60, checkpoint_s, gang_nodes, durations)


def failure_table(site: Site, model: FailureModel, days: float, seed: int, trace: Trace) -> Table:
    replayed = replay(site, model, days, seed)
    return _table(replayed, model, days, seed, trace, site.health.diag_level)


def _title(model: FailureModel, days: float, seed: int, trace: Trace, level: int) -> str:
    rate = (f"{model.rate_per_gpu_hour:.3g} per GPU-hour" + (
        f" ({LLAMA3.source}: 419 unexpected interruptions x 58.7 % GPU issues over 16,384 GPUs x 54 days)"
        if model.rate_per_gpu_hour == LLAMA3.rate_per_gpu_hour else " (--failure-rate)"))
    return (f"GPU failures replayed over {days:g} days, seed {seed}: {rate}; {model.persistent_share:.0%} persistent; "
            f"a human acts {model.response_s / 60:g} min after a page or hand-off; jobs of {model.gang} node(s), run "
            f"times of {trace}'s jobs over an hour, a checkpoint every {model.checkpoint_s / 60:g} min; dcgmi diag -r "
            f"{level} (1 on RTX 4090s)")


def _table(replayed: Replayed, model: FailureModel, days: float, seed: int, trace: Trace, level: int) -> Table:
    static, ours = replayed.tallies[Policy.STATIC], replayed.tallies[Policy.STACK]
    table = Table("figure", "static", "this stack", "difference", title=_title(model, days, seed, trace, level))

    def row(name: str, a: float, b: float, digits: int = 1) -> None:
        change = "" if not a or math.isclose(a, b) else f" ({100 * (b - a) / a:+.0f} %)"
        table.add_row(name, f"{a:,.{digits}f}", f"{b:,.{digits}f}", f"{b - a:+,.{digits}f}{change}")

    row("GPU faults", static.faults, ours.faults, 0)
    row("jobs failed", static.jobs_failed, ours.jobs_failed, 0)
    row("GPU-hours of work lost", static.work_lost_gpu_s / 3600, ours.work_lost_gpu_s / 3600)
    row("GPU-hours held drained or diagnosing", static.held_gpu_s / 3600, ours.held_gpu_s / 3600)
    row("lost GPU-hours", static.lost_gpu_h, ours.lost_gpu_h)
    row("human actions", static.human_actions, ours.human_actions, 0)
    actions = ", ".join(f"{count} {action}" for action, count in sorted(ours.actions.items())) or "none"
    table.add_row("controller actions", "-", actions, "")
    table.add_row("decisions waiting for drain budget", "-", f"{ours.budget_waits:,}", "")
    return table
