"""`gpuctl simulate`: replay a public workload trace on the stack's site under the static "before" policy and this
stack's, and print the figures side by side with the difference (docs/simulate.md)."""

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from components.site.lending import Lending
from components.site.site import Site
from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, exit_on_failure
from runbooks.options import StackOption, find_project_dir, site_or_exit
from runbooks.simulate.compare import Comparison, at_stage, checkpoint_s, compare
from runbooks.simulate.engine import Policy
from runbooks.simulate.failure_report import (
    PERSISTENT_SHARE,
    RESPONSE_MINUTES,
    FailureRateOption,
    GangNodesOption,
    PersistentShareOption,
    ReplayFailuresOption,
    ResponseMinutesOption,
    failure_model,
    failure_table,
)
from runbooks.simulate.failures import FailureModel
from runbooks.simulate.plots import write_plots
from runbooks.simulate.results import Figures, figures
from runbooks.simulate.site_model import StaticSplit
from runbooks.simulate.sizing import FlexNeed, LendingOption, flex_need, lending_options
from runbooks.simulate.sweep import Spread, sweep
from runbooks.simulate.traces import Trace
from runbooks.simulate.workload import Mapping

DEFAULTS = Mapping()
TRACES = Path("..") / "shared" / "traces"
"""Default trace folder, relative to the project directory (as the Makefile's chart mirror ../shared/charts)."""


def simulate(
    stack: StackOption = "prod",
    trace: Annotated[Trace, typer.Option(help="Training workload: a folder of the trace directory.")] = DEFAULTS.trace,
    traces: Annotated[Path | None, typer.Option(
        help="Trace directory; default: ../shared/traces beside the project directory.")] = None,
    days: Annotated[float, typer.Option(min=0.01, max=365, help="Days of the trace replayed.")] = DEFAULTS.days,
    training_load: Annotated[list[float] | None, typer.Option(
        min=0.01, max=10, help="Training GPU-hours offered, as a share of the site's GPU-hours (jobs thinned or "
                               "copied at random to reach it); repeat it to sweep loads. Default: 0.7.")] = None,
    short_job_hours: Annotated[float, typer.Option(
        min=0, max=10_000, help="Jobs running at most this many hours go to Kubernetes, longer ones to Slurm.")
    ] = DEFAULTS.short_job_hours,
    inference_peak: Annotated[float, typer.Option(
        min=0.01, max=100, help="Share of each model's replicas.max the request-rate series' peak asks for.")
    ] = DEFAULTS.inference_peak,
    team_map: Annotated[list[str] | None, typer.Option(
        help="team=group (repeatable): the team takes that trace group's jobs (a Philly VC; openb for Alibaba). "
             "Default: team i takes group i modulo the number of groups.")] = None,
    stage: Annotated[str | None, typer.Option(help="Rollout stage whose teams submit; default: the last.")] = None,
    checkpoint_minutes: Annotated[float | None, typer.Option(
        min=0.1, max=10_000, help="Minutes of run time between a job's checkpoints: a preemption loses the work "
                                  "since the last one. Default: the spec's storage.nfs_hot.checkpoint_interval_minutes."
    )] = None,
    seed: Annotated[int, typer.Option(help="Seed of the thinning and copying of trace jobs.")] = DEFAULTS.seed,
    seeds: Annotated[int, typer.Option(
        min=1, max=100, help="Runs per load, seeds --seed to --seed + N - 1: each figure as mean (lowest to highest)."
    )] = 1,
    static_split: Annotated[StaticSplit, typer.Option(
        help="How the static world cuts each team's slices: by fairshare and Kueue quota (as the site shares today), "
             "or in proportion to each team's demand in the replayed trace.")] = StaticSplit.FAIRSHARE,
    size_lending: Annotated[bool, typer.Option(
        help="Also size lending from the request-rate trace: the flex GPUs its peaks need past replicas.max and, "
             "per lend and reclaim delay, the peaks served, lent GPU-hours serving, moves and training cost.")
    ] = False,
    replay_failures: ReplayFailuresOption = False,
    failure_rate: FailureRateOption = None,
    persistent_share: PersistentShareOption = PERSISTENT_SHARE,
    response_minutes: ResponseMinutesOption = RESPONSE_MINUTES,
    gang_nodes: GangNodesOption = 1,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write the PNG plots here.")] = None,
    project_dir: Annotated[
        Path | None, typer.Option(help="Directory holding Pulumi.yaml; default: found from the working directory.")
    ] = None,
) -> None:
    """Replay a workload trace on the site: static slices against this stack, side by side."""
    project = project_dir or find_project_dir(Path.cwd())
    site = site_or_exit(project, stack)
    loads = training_load or [DEFAULTS.training_load]
    with exit_on_failure({ValueError: Ending(ExitCode.INVALID)}):  # a TraceError is one; the options' checks raise it
        mapping = Mapping(trace, days, loads[0], short_job_hours, inference_peak, _pairs(team_map or []), seed)
        failing = failure_model(traces or project / TRACES, trace, failure_rate, persistent_share, response_minutes,
                                gang_nodes, checkpoint_s(site, checkpoint_minutes)) if replay_failures else None
        if len(loads) > 1 or seeds > 1:
            if out_dir is not None or size_lending:
                raise ValueError(f"{'--out' if out_dir is not None else '--size-lending'}: it reads one run; a sweep "
                                 f"({len(loads)} loads, {seeds} seeds) has many: one --training-load and --seeds 1")
            with err.status(f"simulating {len(loads) * seeds} runs of static and this stack"):
                runs = sweep(at_stage(site, stage), traces or project / TRACES, mapping, loads, seeds,
                             checkpoint_minutes, static_split)
            for load, comparisons in runs.items():
                out.print(_sweep_table(comparisons, stack, replace(mapping, training_load=load), seeds))
            _replay_failures(failing, at_stage(site, stage), days, seed, trace)
            return
        with err.status("simulating static and this stack"):
            comparison = compare(at_stage(site, stage), traces or project / TRACES, mapping, checkpoint_minutes,
                                 static_split)
    results = {policy: figures(outcome) for policy, outcome in comparison.outcomes.items()}
    out.print(_table(comparison, results, stack, mapping))
    if size_lending:
        with err.status("sizing lending"):
            lending = at_stage(site, stage).lending
            needs = flex_need(comparison.model, comparison.workload, lending)
            options = lending_options(comparison.model, comparison.workload, lending,
                                      checkpoint_s(site, checkpoint_minutes), comparison.slices)
        out.print(_sizing_table(needs, options, lending, run_name(comparison, stack, mapping)))
    _replay_failures(failing, at_stage(site, stage), days, seed, trace)
    if out_dir is not None:
        with exit_on_failure({OSError: Ending(ExitCode.FAILED, what=f"cannot write the plots to {out_dir}")}):
            written = write_plots(comparison.outcomes, out_dir, run_name(comparison, stack, mapping))
        out.print("plots: " + ", ".join(escape(str(p)) for p in written))


def _replay_failures(model: FailureModel | None, site: Site, days: float, seed: int, trace: Trace) -> None:
    """The failure replay's table (--replay-failures), once, whatever the loads swept: it reads no training load."""
    if model is not None:
        with err.status("replaying GPU failures"):
            out.print(failure_table(site, model, days, seed, trace))


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        team, sep, group = item.partition("=")
        if not sep or not team or not group:
            raise ValueError(f"--team-map: {item!r} is not team=group")
        pairs[team] = group
    return pairs


def run_name(comparison: Comparison, stack: str, mapping: Mapping) -> str:
    """What was replayed, for the table's and the plots' titles."""
    workload = comparison.workload
    return (f"gpuctl simulate --stack {stack}: {mapping.trace}, {mapping.days:g} days, {len(workload.jobs):,} training "
            f"jobs (x{workload.scale:.2f} of the trace), training load offered {workload.offered_load:.2f} of the "
            f"site's GPU-hours (--training-load {mapping.training_load:g}), inference peak {mapping.inference_peak:g}, "
            f"seed {mapping.seed}, static slices by {comparison.split}")


@dataclass(frozen=True)
class Row:
    name: str
    static: float
    stack: float
    unit: str
    digits: int = 1
    points: bool = False
    """A difference of percentages is in points."""

    def shown(self, value: float, difference: bool = False) -> str:
        """A figure that does not apply (NaN) is a dash."""
        if math.isnan(value):
            return "-"
        unit = " pt" if difference and self.points else self.unit
        return f"{value:{'+' if difference else ''}.{self.digits}f}{unit}"


def _rows(static: Figures, ours: Figures) -> list[Row]:
    rows: list[Row] = []

    def row(name: str, a: float, b: float, unit: str, digits: int = 1, points: bool = False) -> None:
        rows.append(Row(name, a, b, unit, digits, points))

    row("GPU utilization", static.utilization_pct, ours.utilization_pct, " %", points=True)
    for pool in static.pool_utilization_pct:
        row(f"  {pool} pool", static.pool_utilization_pct[pool], ours.pool_utilization_pct[pool], " %", points=True)
    # A job still waiting at the window's end counts its wait up to the end: a lower bound, so each team's count of
    # them is printed beside its percentiles.
    for team in sorted(static.waits, key=lambda t: t != "all"):
        a, b = static.waits[team], ours.waits[team]
        name = "all teams" if team == "all" else team
        row(f"queue wait p50, {name}", a.p50_h, b.p50_h, " h")
        row(f"queue wait p95, {name}", a.p95_h, b.p95_h, " h")
        row(f"  still waiting at the end, {name}", a.never_started, b.never_started, "", 0)
    row("jobs finished", static.jobs_done, ours.jobs_done, "", 0)
    row("inference requests served", static.inference_served_pct, ours.inference_served_pct, " %", points=True)
    row("inference served in full (% of time)", static.inference_covered_pct, ours.inference_covered_pct, " %",
        points=True)
    row("GPU-hours lost to preemption", static.lost_gpu_h, ours.lost_gpu_h, "")
    row("GPUs lent at peak", static.lent_peak_gpus, ours.lent_peak_gpus, "", 0)
    row("GPU-hours lent", static.lent_gpu_h, ours.lent_gpu_h, "")
    row("  of them serving inference", static.lent_serving_pct, ours.lent_serving_pct, " %", points=True)
    return rows


def _table(comparison: Comparison, results: dict[Policy, Figures], stack: str, mapping: Mapping) -> Table:
    table = Table("figure", "static", "this stack", "difference", title=run_name(comparison, stack, mapping))
    for r in _rows(results[Policy.STATIC], results[Policy.STACK]):
        table.add_row(r.name, r.shown(r.static), r.shown(r.stack), r.shown(r.stack - r.static, difference=True))
    return table


def _sweep_table(comparisons: list[Comparison], stack: str, mapping: Mapping, seeds: int) -> Table:
    """Each figure over the seeds: mean (lowest to highest), for static, this stack and the difference run by run."""
    runs = [_rows(*(figures(c.outcomes[p]) for p in (Policy.STATIC, Policy.STACK))) for c in comparisons]
    offered = Spread.of([c.workload.offered_load for c in comparisons])
    title = (f"gpuctl simulate --stack {stack}: {mapping.trace}, {mapping.days:g} days, --training-load "
             f"{mapping.training_load:g} (offered {offered.mean:.2f}, {offered.low:.2f} to {offered.high:.2f}), "
             f"inference peak {mapping.inference_peak:g}, seeds {mapping.seed} to {mapping.seed + seeds - 1}, static "
             f"slices by {comparisons[0].split}: mean (lowest to highest)")
    table = Table("figure", "static", "this stack", "difference", title=title)

    def spread(r: Row, values: list[float], difference: bool = False) -> str:
        s = Spread.of(values)
        if math.isnan(s.mean):
            return "-"
        return f"{r.shown(s.mean, difference)} ({r.shown(s.low, difference)} to {r.shown(s.high, difference)})"

    # A team that submitted nothing in one run has no rows there: its figures spread over the runs it has them in.
    named = [{r.name: r for r in run} for run in runs]
    for name, r in {n: r for run in named for n, r in run.items()}.items():
        same = [run[name] for run in named if name in run]
        table.add_row(name, spread(r, [x.static for x in same]), spread(r, [x.stack for x in same]),
                      spread(r, [x.stack - x.static for x in same], difference=True))
    return table


def _sizing_table(needs: list[FlexNeed], options: list[LendingOption], lending: Lending, name: str) -> Table:
    def pct(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.1f} %"

    lines = [f"{n.model}: past replicas.max {n.beyond_pool_h:.1f} h, at most {n.replicas} replicas ({n.gpus} "
             f"{n.gpu_model} GPUs, {n.nodes} flex nodes); the stack may lend {n.lendable_nodes}" for n in needs]
    table = Table("lend after (peak_s)", "reclaim after (trough_s)", "peaks served in full",
                  "peaks with no flex node lendable", "GPU-hours lent",
                  "of them serving inference", f"moves (most in {lending.flapping_window_h} h)",
                  "training GPU-hours it costs",
                  title=f"sizing lending: {name}", caption="\n".join(
                      [*lines, f"LendingFlapping fires at {lending.flapping_moves} moves in "
                               f"{lending.flapping_window_h} h; the spec's delays: {lending.peak_s} s, "
                               f"{lending.trough_s} s"]))
    for o in options:
        flapping = " (flapping)" if o.most_moves_in_window >= lending.flapping_moves else ""
        table.add_row(f"{o.peak_s} s", f"{o.trough_s} s", pct(o.peaks_covered_pct),
                      pct(o.peaks_unlendable_pct), f"{o.lent_gpu_h:.1f}",
                      pct(o.lent_serving_pct), f"{o.moves} ({o.most_moves_in_window}){flapping}",
                      f"{o.training_cost_gpu_h:.1f}")
    return table
