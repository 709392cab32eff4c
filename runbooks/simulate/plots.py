"""The simulation's PNG figures, both policies on each: GPU utilization over time (hourly means), training queue-wait
CDFs, and inference over time (hourly share with every replica asked for; GPUs asked, held and lent). matplotlib's
Agg backend: no display needed."""

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

from runbooks.simulate.engine import Outcome, Policy  # noqa: E402

HOUR_S = 3600
FILES = ("utilization.png", "queue-wait-cdf.png", "inference-coverage.png")
LABELS = {Policy.STATIC: "static (fixed slices)", Policy.STACK: "this stack"}


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


def write_plots(outcomes: dict[Policy, Outcome], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in FILES]
    _draw(paths[0], "GPU utilization (allocated over capacity), hourly", "day", "%", outcomes, _utilization)
    _draw_cdf(paths[1], outcomes)
    _draw_inference(paths[2], outcomes)
    return paths


def _utilization(outcome: Outcome) -> list[float]:
    capacity = sum(outcome.capacity.values())
    return [100 * v / capacity for v in hourly([(t, s + f + k) for t, s, f, k in outcome.timeline], outcome.window_s)]


def _days(values: list[float]) -> list[float]:
    return [h / 24 for h in range(len(values))]


def _draw(path: Path, title: str, xlabel: str, ylabel: str, outcomes: dict[Policy, Outcome],
          series: Callable[[Outcome], list[float]]) -> None:
    figure, axes = plt.subplots(figsize=(10, 4))
    for policy, outcome in outcomes.items():
        values = series(outcome)
        axes.plot(_days(values), values, label=LABELS[policy], linewidth=0.8)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel, ylim=(0, 105))
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _draw_inference(path: Path, outcomes: dict[Policy, Outcome]) -> None:
    figure, (share, gpus) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for n, (policy, outcome) in enumerate(outcomes.items()):
        covered = hourly([(t, 100.0 * ok) for t, ok in outcome.coverage_timeline], outcome.window_s)
        share.plot(_days(covered), covered, label=LABELS[policy], linewidth=0.8)
        series = {name: hourly([(point[0], float(point[i])) for point in outcome.inference_timeline], outcome.window_s)
                  for i, name in ((1, "asked"), (2, "held"), (3, "lent"))}
        if n == 0:  # the demand is the same for both
            gpus.plot(_days(series["asked"]), series["asked"], label="GPUs asked", color="black", linewidth=0.8)
        gpus.plot(_days(series["held"]), series["held"], label=f"GPUs held, {LABELS[policy]}", linewidth=0.8)
        if policy == Policy.STACK:
            gpus.plot(_days(series["lent"]), series["lent"], label="flex GPUs lent", linestyle=":", linewidth=0.8)
    share.set(title="Inference: share of each hour with every replica placed", ylabel="%", ylim=(0, 105))
    gpus.set(title="Inference GPUs, hourly means", xlabel="day", ylabel="GPUs")
    share.legend()
    gpus.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _draw_cdf(path: Path, outcomes: dict[Policy, Outcome]) -> None:
    figure, axes = plt.subplots(figsize=(7, 4))
    for policy, outcome in outcomes.items():
        # Jobs never started count at the window's end: a lower bound on their wait.
        waits = sorted(((r.first_start if r.first_start is not None else outcome.window_s) - r.job.arrival_s) / HOUR_S
                       for r in outcome.runs)
        if waits:
            axes.step(waits, [100 * (i + 1) / len(waits) for i in range(len(waits))], where="post",
                      label=LABELS[policy])
    axes.set(title="Training queue wait, all teams", xlabel="hours from submission to first start",
             ylabel="% of jobs waiting at most that long", ylim=(0, 101))
    axes.set_xscale("symlog", linthresh=0.1)
    axes.set_xlim(left=0)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
