"""The report as people read it: one table of figures (console and markdown alike) and PNG plots (matplotlib, Agg)."""

import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on an operator's host or in CI
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

from runbooks.report.measure import ALL, Period  # noqa: E402

PLOTS = ("utilization.png", "queue_wait.png", "adoption.png", "inference.png")
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


Row = tuple[str, str, Callable[[Period], float], bool]
"""(name, unit, value of a period, whether a change is in points)."""


def _pool(of: Callable[[Period], dict[str, float]], pool: str) -> Callable[[Period], float]:
    return lambda p: of(p).get(pool, math.nan)


def figures(window: Period) -> list[Row]:
    """The headline figures, in gpuctl simulate's order and words where they are the same figure."""
    def pools(of: Callable[[Period], dict[str, float]]) -> list[Row]:
        return [(f"  {pool} pool", "%", _pool(of, pool), True) for pool in of(window)]

    return [
        ("GPU utilization (allocated over capacity)", "%", lambda p: p.utilization_pct, True),
        *pools(lambda p: p.pool_utilization_pct),
        ("GPU busy (DCGM, capacity-weighted)", "%", lambda p: p.dcgm_utilization_pct, True),
        *pools(lambda p: p.dcgm_pool_utilization_pct),
        ("Slurm allocated GPU-hours", "h", lambda p: p.slurm_gpu_hours, False),
        ("Kubernetes requested GPU-hours", "h", lambda p: p.kubernetes_gpu_hours, False),
        ("queue wait p50, all teams", "h", lambda p: p.waits[ALL].p50_h, False),
        ("queue wait p95, all teams", "h", lambda p: p.waits[ALL].p95_h, False),
        ("training jobs submitted", "", lambda p: p.waits[ALL].jobs, False),
        ("jobs never started", "", lambda p: p.waits[ALL].never_started, False),
        ("inference latency p95 (gateway)", "s", lambda p: p.inference_latency_p95_s, False),
        ("inference error rate (gateway, server-side)", "%", lambda p: p.inference_error_pct, True),
    ]


def figure_rows(baseline: Period, window: Period) -> list[tuple[str, str, str, str]]:
    """(figure with unit, baseline, window, change) for every headline figure."""
    # A figure without a unit is a count.
    return [(f"{name} [{unit}]" if unit else name, _fmt(get(baseline), 2 if unit else 0),
             _fmt(get(window), 2 if unit else 0), _change(get(baseline), get(window), points))
            for name, unit, get, points in figures(window)]


def _plain(value: Any) -> Any:
    """JSON-ready: NaN as null, dicts and lists inside too."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def as_json(stack: str, baseline: Period, window: Period, step_s: int) -> str:
    """Every figure at full precision, with gpuctl simulate's field names, for a program to set beside a
    prediction."""
    teams = active_teams(baseline, window)

    def period(p: Period) -> dict[str, Any]:
        figures = {k: v for k, v in asdict(p).items() if k not in ("window", "capacity", "waits_h")}
        figures["waits"] = {t: w for t, w in figures["waits"].items() if t in (*teams, ALL)}
        figures["adoption"] = {t: a for t, a in figures["adoption"].items() if t in teams}
        return {"window": str(p.window), **_plain(figures)}

    return json.dumps({"stack": stack, "step_s": step_s, "capacity": window.capacity,
                       "baseline": period(baseline), "window": period(window)}, indent=2) + "\n"


def active_teams(baseline: Period, window: Period) -> list[str]:
    """Teams with training in either period."""
    return [t for t in window.adoption if baseline.waits[t].jobs + window.waits[t].jobs
            + baseline.adoption[t].gpu_hours + window.adoption[t].gpu_hours > 0]


def team_rows(baseline: Period, window: Period) -> list[tuple[str, ...]]:
    """Per team with training in either period: queue wait and adoption, baseline -> window."""
    rows: list[tuple[str, ...]] = []
    for team in active_teams(baseline, window):
        b, w = baseline, window
        rows.append((
            team,
            f"{b.waits[team].jobs} -> {w.waits[team].jobs}",
            f"{_fmt(b.waits[team].p50_h, 2)} -> {_fmt(w.waits[team].p50_h, 2)}",
            f"{_fmt(b.waits[team].p95_h, 2)} -> {_fmt(w.waits[team].p95_h, 2)}",
            f"{b.waits[team].never_started} -> {w.waits[team].never_started}",
            f"{b.adoption[team].weekly_jobs:.1f} -> {w.adoption[team].weekly_jobs:.1f}",
            f"{b.adoption[team].gpu_hours:.1f} -> {w.adoption[team].gpu_hours:.1f}",
            f"{b.adoption[team].active_users} -> {w.adoption[team].active_users}",
        ))
    return rows


TEAM_COLUMNS = ("team", "jobs submitted", "wait p50 [h]", "wait p95 [h]", "never started", "weekly jobs",
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


def write(out: Path, stack: str, baseline: Period, window: Period, step_s: int) -> list[Path]:
    """report.md, report.json and the plots into `out`, each file replaced whole."""
    return [_publish(out / SUMMARY, markdown(stack, baseline, window, step_s).encode()),
            _publish(out / FIGURES, as_json(stack, baseline, window, step_s).encode()),
            *_plot(baseline, window, out)]


def _publish(path: Path, data: bytes) -> Path:
    """Write to a new file beside `path`, then rename it over `path`. The report may run as root in a folder others
    can write: a symlink planted at `path` is replaced, never followed, and a reader never sees half a file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _plot(baseline: Period, window: Period, out: Path) -> list[Path]:
    written = []
    periods = (("baseline", baseline), ("window", window))

    figure, axes = plt.subplots(figsize=(9, 4))
    for label, period in periods:
        hours = [t / 3600 for t, _ in period.dcgm_series]
        axes.plot(hours, [v for _, v in period.dcgm_series],
                  label=f"{label} (busy {_fmt(period.dcgm_utilization_pct)} %, allocated "
                        f"{_fmt(period.utilization_pct)} %)")
    axes.set(xlabel="hours since the period's start", ylabel="GPU busy, capacity-weighted [%]",
             ylim=(0, 100), title="GPU busy (DCGM) over all GPUs of the site")
    axes.legend()
    written.append(_save(figure, out / PLOTS[0]))

    figure, axes = plt.subplots(figsize=(9, 4))
    for label, period in periods:
        waits = period.waits_h[ALL]
        if waits:
            axes.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                      label=f"{label} ({len(waits)} jobs)")
    axes.set(xlabel="queue wait [h]", ylabel="share of jobs submitted", ylim=(0, 1.05),
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

    figure, (latency, errors) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, period in periods:
        hours = [t / 3600 for t, _, _ in period.inference_series]
        latency.plot(hours, [v for _, v, _ in period.inference_series],
                     label=f"{label} ({_fmt(period.inference_latency_p95_s, 2)} s)")
        errors.plot(hours, [v for _, _, v in period.inference_series],
                    label=f"{label} ({_fmt(period.inference_error_pct, 2)} %)")
    latency.set(ylabel="p95 latency [s]", title="Inference at the gateway (LiteLLM), per step")
    errors.set(xlabel="hours since the period's start", ylabel="server-side errors [%]")
    latency.legend()
    errors.legend()
    written.append(_save(figure, out / PLOTS[3]))
    return written


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    plt.close(figure)
    return _publish(path, png.getvalue())
