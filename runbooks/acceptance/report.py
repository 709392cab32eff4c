"""The campaign's report: every criterion of the verdict with its measured value, objective and source, a line per
drill, every failure with its SOP, and PNG plots a person reads at a glance (GPU utilization, inference p95 latency
and error rate, training queue wait, storage latency, the flex nodes the lending controller lent to inference, over
time, each fault window and the shock shaded and named, each lend and reclaim it started and each training job's
requeue sacct accounted marked on every panel and listed with its step), and a table of what each phase asked of each
load against what it offered.
"""

import json
from pathlib import Path
from statistics import quantiles
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

from runbooks.acceptance.campaign import VERDICT_STEP  # noqa: E402
from runbooks.acceptance.lending import rises  # noqa: E402
from runbooks.acceptance.store import Campaign, CampaignStore  # noqa: E402
from runbooks.acceptance.verdict import LOADS, Criterion  # noqa: E402

BUCKET_S = 1.0
"""s per point of a plotted p95 or rate: the scaled campaign's resolution (a real one plots per minute)."""
PANELS = (
    ("gpu_util_pct", "GPU utilization (%)", "mean"),
    ("inference_latency_s", "inference p95 latency (s)", "p95"),
    ("inference_error", "inference errors (%)", "pct"),
    ("training_queue_wait_s", "training queue wait (s)", "p95"),
    ("storage_latency_s", "storage write p95 latency (s)", "p95"),
    ("lending_nodes_lent", "flex nodes lent to inference", "max"),
)
MOVES = (("lending_lends", "lend", "tab:green"), ("lending_reclaims", "reclaim", "tab:purple"))
"""The lending controller's move counters (runbooks.acceptance.lending) whose every rise the plots mark."""


def criterion_lines(store: CampaignStore, campaign: Campaign) -> list[str]:
    """One line per criterion the verdict judged (runbooks.acceptance.verdict), failed ones first."""
    verdict = store.steps(campaign.id).get(VERDICT_STEP)
    criteria = sorted(verdict[2].get("criteria", []) if verdict else [], key=lambda c: bool(c["passed"]))
    return [Criterion(**c).line() for c in criteria]


def load_lines(store: CampaignStore, campaign: Campaign) -> list[str]:
    """A table row per phase and load: what the phase asked of it against what it offered (the verdict's `<load>
    load` criteria), so the report shows whether the shock peaked all three loads together."""
    verdict = store.steps(campaign.id).get(VERDICT_STEP)
    criteria = [Criterion(**c) for c in (verdict[2].get("criteria", []) if verdict else [])]
    return [f"| {c.phase} | {c.name.removesuffix(' load')} | {c.measured} | {'PASS' if c.passed else 'FAIL'} |"
            for c in criteria if c.name.removesuffix(" load") in LOADS]


def drill_lines(store: CampaignStore, campaign: Campaign) -> list[str]:
    lines = []
    for step, (_, finished, detail) in store.steps(campaign.id).items():
        if not step.startswith("drill:"):
            continue
        if finished is None:
            lines.append(f"{step}: UNFINISHED")
            continue
        reactions = "; ".join(f"{r['name']}: {'ok' if r['ok'] else 'NOT MET'} ({r['detail']})"
                              for r in detail.get("reactions", []))
        lines.append(
            f"{step}: {detail['verdict'].upper()} - {detail.get('error') or ''}"
            f"detected by {detail.get('alert') or 'measurement'} after {_s(detail.get('detection_s'))} "
            f"(within {_s(detail.get('detect_within_s'))})"
            + (f", measured after {_s(detail.get('measured_s'))}" if detail.get("alert") else "")
            + f", recovered after {_s(detail.get('recovery_s'))} "
            f"(within {_s(detail.get('recover_within_s'))}); SOP docs/sop/{detail.get('sop')}.md"
            + (f"; {reactions}" if reactions else ""))
    return lines


def lending_lines(store: CampaignStore, campaign: Campaign) -> list[str]:
    """Each lend and reclaim the lending controller started, with the step it fell in (the shock's timeline)."""
    steps = store.steps(campaign.id)
    return [f"- {move} at {at - campaign.started_at:.1f} s{_step(steps, at)}"
            for move, at, _ in moves(store.samples(campaign.id))]


def requeue_lines(store: CampaignStore, campaign: Campaign) -> list[str]:
    """Each requeue of a training job of the load, as sacct accounted it, with the step it fell in."""
    steps = store.steps(campaign.id)
    return [f"- job {int(job)} requeued at {at - campaign.started_at:.1f} s{_step(steps, at)}"
            for at, job in store.samples(campaign.id).get("training_requeue", [])]


def _step(steps: dict[str, tuple[float, float | None, dict[str, Any]]], at: float) -> str:
    step = next((name for name, (begin, end, _) in steps.items() if end is not None and begin <= at <= end), "")
    return f" ({step})" if step else ""


def _s(value: Any) -> str:
    return f"{value:g} s" if isinstance(value, int | float) else "never"


def _bucketed(points: list[tuple[float, float]], how: str, start: float) -> tuple[list[float], list[float]]:
    buckets: dict[int, list[float]] = {}
    for at, value in points:
        buckets.setdefault(int((at - start) / BUCKET_S), []).append(value)
    xs, ys = [], []
    for bucket in sorted(buckets):
        values = buckets[bucket]
        if how == "p95":
            y = quantiles(values, n=20)[-1] if len(values) > 1 else values[0]
        elif how == "pct":
            y = 100 * sum(values) / len(values)
        elif how == "max":
            y = max(values)
        else:
            y = sum(values) / len(values)
        xs.append(bucket * BUCKET_S)
        ys.append(y)
    return xs, ys


def moves(samples: dict[str, list[tuple[float, float]]]) -> list[tuple[str, float, str]]:
    """(move, when its counter rose, colour) for each lend and reclaim the lending controller started, as the
    campaign's looks saw its counters (runbooks.acceptance.lending.rises)."""
    marks = [(move, at, color) for series, move, color in MOVES for at in rises(samples, series)]
    return sorted(marks, key=lambda mark: mark[1])


def plot(store: CampaignStore, campaign: Campaign, path: Path) -> list[str]:
    """Writes the PNG; returns the panels drawn (a panel with no samples says so on its face)."""
    samples = store.samples(campaign.id)
    windows = [(f.drill, f.injected_at - campaign.started_at, (f.reverted_at or f.injected_at) - campaign.started_at)
               for f in store.faults(campaign.id)]
    steps = store.steps(campaign.id)
    shock = steps.get("shock")
    if shock is not None:
        windows.append(("shock", shock[0] - campaign.started_at, (shock[1] or shock[0]) - campaign.started_at))
    marks = [(move, at - campaign.started_at, color) for move, at, color in moves(samples)]
    marks += [("requeue", at - campaign.started_at, "tab:brown") for at, _ in samples.get("training_requeue", [])]
    figure, axes = plt.subplots(len(PANELS), 1, figsize=(11, 2.2 * len(PANELS)), sharex=True)
    drawn = []
    for axis, (series, title, how) in zip(axes, PANELS, strict=True):
        xs, ys = _bucketed(samples.get(series, []), how, campaign.started_at)
        if xs:
            axis.plot(xs, ys, lw=1.2)
            drawn.append(series)
        else:
            axis.text(0.5, 0.5, "no samples", transform=axis.transAxes, ha="center", va="center", color="grey")
        for name, begin, end in windows:
            color = "tab:orange" if name == "shock" else "tab:red"
            axis.axvspan(begin, max(end, begin + BUCKET_S), color=color, alpha=0.15)
            axis.text(begin, 1.0, name, transform=axis.get_xaxis_transform(), fontsize=7, va="top", color=color)
        for move, at, color in marks:
            axis.axvline(at, color=color, lw=1, ls="--")
            axis.text(at, 0.0, move, transform=axis.get_xaxis_transform(), fontsize=7, va="bottom", color=color)
        axis.set_ylabel(title, fontsize=8)
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel(f"seconds since the campaign started (time scale {campaign.time_scale:g}; "
                        "red: faults, orange: the shock; dashed: the lending controller's lends and reclaims, "
                        "training requeues)")
    figure.suptitle(f"{campaign.id}: {(campaign.verdict or campaign.state).upper()}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return drawn


def write_report(store: CampaignStore, campaign: Campaign, directory: Path) -> Path:
    """report.md and report.png in `directory`; returns the Markdown's path."""
    drawn = plot(store, campaign, directory / "report.png")
    failures = store.failures(campaign.id)
    lines = [f"# Acceptance campaign {campaign.id}", "",
             f"Verdict: **{(campaign.verdict or campaign.state).upper()}** - {campaign.reason or 'not finished'}", "",
             f"Deployment {campaign.deployment}, stage {campaign.stage}, time scale {campaign.time_scale:g}.", "",
             "## Criteria", "", *[f"- {line}" for line in criterion_lines(store, campaign)], "",
             "## Loads per phase", "", "| phase | load | offered (measured) against asked | |",
             "| --- | --- | --- | --- |", *load_lines(store, campaign), "",
             "## Drills", "", *[f"- {line}" for line in drill_lines(store, campaign)], "",
             "## Lending controller", "", *(lending_lines(store, campaign) or ["- no lend or reclaim started"]), "",
             "## Training requeues (sacct)", "", *(requeue_lines(store, campaign) or ["- none"]), "",
             "## Failures logged", "", "| at (s) | source | mode | SOP |", "| --- | --- | --- | --- |",
             *[f"| {f.at - campaign.started_at:.1f} | {f.source} | {f.mode} | "
               f"{('docs/sop/' + f.sop + '.md') if f.sop else '**none**'} |" for f in failures], "",
             "## Plots", "", f"![campaign](report.png) (panels with samples: {', '.join(drawn) or 'none'})", ""]
    report = directory / "report.md"
    report.write_text("\n".join(lines))
    (directory / "report.json").write_text(json.dumps({
        "campaign": campaign.id, "verdict": campaign.verdict, "reason": campaign.reason,
        "steps": {k: v[2] for k, v in store.steps(campaign.id).items()},
        "failures": [f.__dict__ for f in failures]}, indent=2, sort_keys=True))
    return report
