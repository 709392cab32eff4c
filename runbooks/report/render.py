"""The report as people read it: one table of figures (console and markdown alike) and PNG plots (matplotlib, Agg)."""

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on an operator's host or in CI
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

from runbooks.report.measure import ALL_TEAMS, Period  # noqa: E402

PLOTS = ("utilization.png", "queue_wait.png", "adoption.png")
SUMMARY = "report.md"
FIGURES = "report.json"
NO_DATA = "no data"


def _fmt(value: float, digits: int = 1) -> str:
    return NO_DATA if math.isnan(value) else f"{value:.{digits}f}"


def _change(before: float, after: float, points: bool) -> str:
    """Percentage points for shares, relative change otherwise (a queue time -60 % is the mission's headline)."""
    if math.isnan(before) or math.isnan(after):
        return NO_DATA
    if points:
        return f"{after - before:+.1f} pts"
    if before == 0:
        return "new" if after else "0"
    return f"{100 * (after - before) / before:+.0f} %"


Row = tuple[str, str, str, Callable[[Period], float], bool]
"""(key in report.json, name, unit, value of a period, whether a change is in points)."""


def _pool_utilization(pool: str) -> Callable[[Period], float]:
    return lambda p: p.pool_utilization_pct.get(pool, math.nan)


def figures(window: Period) -> list[Row]:
    pools = [(f"gpu_utilization_pct_{pool.replace(' ', '_')}", f"GPU utilization, {pool} pool", "%",
              _pool_utilization(pool), True) for pool in window.pool_utilization_pct]
    return [
        ("gpu_utilization_pct", "GPU utilization (DCGM, capacity-weighted)", "%", lambda p: p.gpu_utilization_pct,
         True),
        *pools,
        ("gpu_allocation_pct", "GPU allocation (Slurm + Kubernetes requests)", "%", lambda p: p.gpu_allocation_pct,
         True),
        ("slurm_gpu_hours", "Slurm allocated GPU-hours", "h", lambda p: p.slurm_gpu_hours, False),
        ("kubernetes_gpu_hours", "Kubernetes requested GPU-hours", "h", lambda p: p.kubernetes_gpu_hours, False),
        ("queue_wait_p50_min", "training queue wait p50, all teams", "min",
         lambda p: p.queue_wait[ALL_TEAMS].p50_min, False),
        ("queue_wait_p95_min", "training queue wait p95, all teams", "min",
         lambda p: p.queue_wait[ALL_TEAMS].p95_min, False),
        ("jobs_started", "training jobs started", "", lambda p: p.queue_wait[ALL_TEAMS].jobs, False),
        ("inference_latency_p95_s", "inference latency p95 (gateway)", "s", lambda p: p.inference_latency_p95_s,
         False),
        ("inference_error_pct", "inference error rate (gateway, server-side)", "%", lambda p: p.inference_error_pct,
         True),
    ]


def figure_rows(baseline: Period, window: Period) -> list[tuple[str, str, str, str]]:
    """(figure with unit, baseline, window, change) for every headline figure."""
    return [(f"{name} [{unit}]" if unit else name, _fmt(get(baseline), 2), _fmt(get(window), 2),
             _change(get(baseline), get(window), points))
            for _, name, unit, get, points in figures(window)]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def as_json(stack: str, baseline: Period, window: Period, step_s: int) -> str:
    """Every figure at full precision, for a program (a simulation's prediction beside it, a dashboard); NaN as
    null."""
    teams = {team: {name: {field: _number(float(value)) for field, value in
                           {**asdict(p.queue_wait[team]), **asdict(p.adoption[team])}.items()}
                    for name, p in (("baseline", baseline), ("window", window))}
             for team in active_teams(baseline, window)}
    return json.dumps({
        "stack": stack, "window": str(window.window), "baseline": str(baseline.window), "step_s": step_s,
        "capacity_gpus": window.capacity_gpus,
        "figures": {key: {"unit": unit, "baseline": _number(get(baseline)), "window": _number(get(window))}
                    for key, _, unit, get, _ in figures(window)},
        "teams": teams,
    }, indent=2) + "\n"


def active_teams(baseline: Period, window: Period) -> list[str]:
    return [t for t in window.adoption if baseline.queue_wait[t].jobs + window.queue_wait[t].jobs
            + baseline.adoption[t].gpu_hours + window.adoption[t].gpu_hours
            + baseline.queue_wait[t].still_waiting + window.queue_wait[t].still_waiting > 0]


def team_rows(baseline: Period, window: Period) -> list[tuple[str, ...]]:
    """Per team with training in either period: queue wait and adoption, baseline -> window."""
    rows: list[tuple[str, ...]] = []
    for team in active_teams(baseline, window):
        b, w = baseline, window
        rows.append((
            team,
            f"{b.queue_wait[team].jobs} -> {w.queue_wait[team].jobs}",
            f"{_fmt(b.queue_wait[team].p50_min, 2)} -> {_fmt(w.queue_wait[team].p50_min, 2)}",
            f"{_fmt(b.queue_wait[team].p95_min, 2)} -> {_fmt(w.queue_wait[team].p95_min, 2)}",
            f"{b.queue_wait[team].still_waiting} -> {w.queue_wait[team].still_waiting}",
            f"{b.adoption[team].weekly_jobs:.1f} -> {w.adoption[team].weekly_jobs:.1f}",
            f"{b.adoption[team].gpu_hours:.3f} -> {w.adoption[team].gpu_hours:.3f}",
            f"{b.adoption[team].active_users} -> {w.adoption[team].active_users}",
        ))
    return rows


TEAM_COLUMNS = ("team", "jobs started", "wait p50 [min]", "wait p95 [min]", "waiting at end", "weekly jobs",
                "GPU-hours", "active users")


def _markdown_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def markdown(stack: str, baseline: Period, window: Period, step_s: int) -> str:
    teams = team_rows(baseline, window)
    return "\n\n".join([
        f"# GPU cluster report: stack {stack}",
        f"Window `{window.window}` against baseline `{baseline.window}`; {window.capacity_gpus} GPUs of capacity; "
        f"utilization and Kubernetes requests at {step_s} s steps. What each figure is and where it comes from: "
        "docs/report.md in the gpu-cluster repository.",
        _markdown_table(("figure", "baseline", "window", "change"), figure_rows(baseline, window)),
        "## Training by team (Slurm accounting)",
        _markdown_table(TEAM_COLUMNS, teams) if teams else "No training jobs in either period.",
        "## Plots",
        *(f"![{name.removesuffix('.png')}]({name})" for name in PLOTS),
    ]) + "\n"


def plot(baseline: Period, window: Period, out: Path) -> list[Path]:
    written = []
    periods = (("baseline", baseline), ("window", window))

    figure, axes = plt.subplots(figsize=(9, 4))
    for label, period in periods:
        hours = [t / 3600 for t, _ in period.utilization_series]
        axes.plot(hours, [v for _, v in period.utilization_series],
                  label=f"{label} ({_fmt(period.gpu_utilization_pct)} %)")
    axes.set(xlabel="hours since the period's start", ylabel="GPU utilization, capacity-weighted [%]",
             ylim=(0, 100), title="GPU utilization (DCGM)")
    axes.legend()
    written.append(_save(figure, out / PLOTS[0]))

    figure, axes = plt.subplots(figsize=(9, 4))
    for label, period in periods:
        waits = period.waits_min[ALL_TEAMS]
        if waits:
            axes.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                      label=f"{label} ({len(waits)} jobs)")
    axes.set(xlabel="queue wait [min]", ylabel="share of jobs started", ylim=(0, 1.05),
             title="Training queue wait, all teams (Slurm accounting)")
    axes.legend()
    written.append(_save(figure, out / PLOTS[1]))

    figure, axes = plt.subplots(figsize=(9, 4))
    teams = active_teams(baseline, window)
    positions = range(len(teams))
    for offset, (label, period) in zip((-0.2, 0.2), periods, strict=True):
        axes.bar([p + offset for p in positions], [period.adoption[t].gpu_hours for t in teams], width=0.4,
                 label=label)
    axes.set_xticks(list(positions), teams, rotation=30, ha="right")
    axes.set(ylabel="GPU-hours", title="Training GPU-hours per team (Slurm accounting)")
    axes.legend()
    written.append(_save(figure, out / PLOTS[2]))
    return written


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
