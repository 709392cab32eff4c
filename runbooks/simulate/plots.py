"""The simulation's PNG figures, both policies on each: GPU utilization over time (hourly means), training queue-wait
CDFs, and inference over time (hourly share with every replica the load needs; GPUs asked, held and lent). Each
names the run (trace, days, load, seed) above its plots, draws the two policies in styles told apart where they
overlap (static dashed under this stack's solid line), and keeps its legend outside the data. matplotlib's Agg
backend: no display needed."""

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.figure import Figure  # noqa: E402

from runbooks.simulate.engine import Outcome, Policy  # noqa: E402

HOUR_S = 3600
FILES = ("utilization.png", "queue-wait-cdf.png", "inference-coverage.png")
LABELS = {Policy.STATIC: "static (fixed slices)", Policy.STACK: "this stack"}
STYLES: dict[Policy, dict[str, Any]] = {
    Policy.STATIC: {"color": "tab:orange", "linestyle": "--", "linewidth": 1.4, "zorder": 2},
    Policy.STACK: {"color": "tab:blue", "linestyle": "-", "linewidth": 0.9, "zorder": 3}}
"""Static dashed and wider under this stack's thin solid line: where the two coincide both stay visible."""
OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}
"""Legends to the right of the axes, never over the data (the first lend, at day 0, was under one)."""


def hourly(points: Sequence[tuple[float, float]], window_s: float) -> list[float]:
    """The hourly mean of a step function given as (time, value from then on) points, starting at 0."""
    bins = [0.0] * int(-(-window_s // HOUR_S))
    for (at, value), (until, _) in zip(points, [*points[1:], (window_s, 0.0)], strict=True):
        while at < until:
            index = int(at // HOUR_S)
            end = min(until, (index + 1) * HOUR_S)
            bins[index] += value * (end - at) / HOUR_S
            at = end
    return bins


def write_plots(outcomes: dict[Policy, Outcome], directory: Path, run: str) -> list[Path]:
    """run: what was replayed, named above every plot (trace, days, load, seed)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in FILES]
    for path, figure in zip(paths, figures(outcomes, run), strict=True):
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
    return paths


def figures(outcomes: dict[Policy, Outcome], run: str) -> list[Figure]:
    """The three figures of FILES, drawn."""
    return [_draw("GPU utilization (allocated over capacity), hourly", "day", "%", outcomes, _utilization, run),
            _draw_cdf(outcomes, run), _draw_inference(outcomes, run)]


def _utilization(outcome: Outcome) -> list[float]:
    capacity = sum(outcome.capacity.values())
    return [100 * v / capacity for v in hourly([(t, s + f + k) for t, s, f, k in outcome.timeline], outcome.window_s)]


def _name(figure: Figure, run: str) -> None:
    """The run's name above the plots, wrapped to the figure's width: on one line it set the image's width and left
    the axes a third of it."""
    figure.suptitle(textwrap.fill(run, width=int(figure.get_figwidth() * 10)), fontsize="medium")
    figure.tight_layout()


def _days(values: list[float]) -> list[float]:
    return [h / 24 for h in range(len(values))]


def _draw(title: str, xlabel: str, ylabel: str, outcomes: dict[Policy, Outcome],
          series: Callable[[Outcome], list[float]], run: str) -> Figure:
    figure, axes = plt.subplots(figsize=(12, 4))
    for policy, outcome in outcomes.items():
        values = series(outcome)
        axes.plot(_days(values), values, label=LABELS[policy], **STYLES[policy])
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel, ylim=(0, 105))
    axes.legend(**OUTSIDE)
    _name(figure, run)
    return figure


def _draw_inference(outcomes: dict[Policy, Outcome], run: str) -> Figure:
    figure, (share, gpus) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    for policy, outcome in outcomes.items():
        covered = hourly([(t, 100.0 * ok) for t, ok in outcome.coverage_timeline], outcome.window_s)
        share.plot(_days(covered), covered, label=LABELS[policy], **STYLES[policy])
        series = {name: hourly([(point[0], float(point[i])) for point in outcome.inference_timeline], outcome.window_s)
                  for i, name in ((1, "asked"), (2, "held"), (3, "lent"))}
        if policy == Policy.STACK:  # its autoscaler asks the most: replicas.max plus lent_replicas
            # An area under the lines: where held equals asked (most hours) a line on its edge, where short a gap.
            gpus.fill_between(_days(series["asked"]), series["asked"], label="GPUs asked, this stack",
                              color="0.85", linewidth=0, zorder=1)
        gpus.plot(_days(series["held"]), series["held"], label=f"GPUs held, {LABELS[policy]}", **STYLES[policy])
        if policy == Policy.STACK:
            gpus.plot(_days(series["lent"]), series["lent"], label="flex GPUs lent", color="tab:green",
                      linewidth=1.2, zorder=4)
    share.set(title="Inference: share of each hour with the replicas its load needs", ylabel="%", ylim=(0, 105))
    gpus.set(title="Inference GPUs, hourly means", xlabel="day", ylabel="GPUs")
    share.legend(**OUTSIDE)
    gpus.legend(fontsize="small", **OUTSIDE)
    _name(figure, run)
    return figure


def _draw_cdf(outcomes: dict[Policy, Outcome], run: str) -> Figure:
    figure, axes = plt.subplots(figsize=(9, 4))
    for policy, outcome in outcomes.items():
        # Jobs never started count at the window's end: a lower bound on their wait.
        waits = sorted(((r.first_start if r.first_start is not None else outcome.window_s) - r.job.arrival_s) / HOUR_S
                       for r in outcome.runs)
        if waits:
            axes.step(waits, [100 * (i + 1) / len(waits) for i in range(len(waits))], where="post",
                      label=LABELS[policy], **STYLES[policy])
    axes.set(title="Training queue wait, all teams", xlabel="hours from submission to first start",
             ylabel="% of jobs waiting at most that long", ylim=(0, 101))
    axes.set_xscale("symlog", linthresh=0.1)
    axes.set_xlim(left=0)
    axes.legend(**OUTSIDE)
    _name(figure, run)
    return figure
