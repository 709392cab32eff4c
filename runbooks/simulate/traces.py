"""The public workload traces under ../shared/traces, read as they are published (each folder's README gives the
source, licence, columns and units): training jobs from the Philly-derived Gavel traces and Alibaba's GPU 2023 pods,
the LLM request-rate series of Alibaba ServeGen for inference.

A trace that is missing or malformed raises TraceError naming the file, the row and the column.
"""

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class TraceError(ValueError):
    """A trace file missing, or a row whose column breaks its rule."""


class Trace(StrEnum):
    GAVEL = "philly-gavel"
    ALIBABA = "alibaba-gpu-2023"


SERVEGEN = Path("genai-inference-qps") / "servegen_language_rate_10min.csv"
SERVEGEN_SERIES = ("m_large_rps", "m_mid_rps", "m_small_rps")
"""The ServeGen aggregate's request-rate columns, largest model class first (genai-inference-qps/README.md)."""
SERVEGEN_STEP_S = 600
"""The series' resolution: one row per 600-s window."""

ALIBABA_WINDOW_START_S = 9_965_463
"""First creation time of the 34-day window holding 99.6 % of the pods (alibaba-gpu-2023/README.md, "Time span");
the 33 pods created before it are long-running leftovers, not arrivals of the replayed window."""


@dataclass(frozen=True)
class TraceJob:
    group: str
    """The trace's own grouping: the Philly virtual cluster (Gavel), one group for Alibaba's single cluster."""
    arrival_s: float
    """s since the start of the replayed window."""
    gpus: int
    """Gang size: GPUs the job holds all at once."""
    duration_s: float
    """s the job runs on its gang when never interrupted."""
    qos: str | None
    """Alibaba's class (LS latency-sensitive, BE best-effort), None where the trace has none."""


def training_jobs(traces: Path, trace: Trace) -> list[TraceJob]:
    """Every GPU job of the trace, in arrival order, with arrival times from the window's start."""
    rows = _gavel(traces) if trace == Trace.GAVEL else _alibaba(traces)
    return sorted(rows, key=lambda job: (job.arrival_s, job.group))


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as source:
            reader = csv.DictReader(source)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}: no column {', '.join(missing)} (the folder's README lists the columns)")
            yield from enumerate(reader, start=2)
    except OSError as error:
        raise TraceError(f"{path}: unreadable ({error.strerror or error})") from None


def _number(path: Path, line: int, row: dict[str, str], column: str, minimum: float = 0.0) -> float:
    text = row.get(column) or ""
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} {text!r} is not a number") from None
    if not value >= minimum or value == float("inf"):
        raise TraceError(f"{path}:{line}: {column} {text} must be finite and at least {minimum:g}")
    return value


def _gavel(traces: Path) -> Iterator[TraceJob]:
    # jobs.csv is derived from the raw .trace files by the folder's derive_jobs_csv.py: run time in s on a V100.
    path = traces / Trace.GAVEL / "jobs.csv"
    for line, row in _rows(path, ("vc", "arrival_time_s", "gang_size_gpus", "duration_s_v100")):
        yield TraceJob(row["vc"], _number(path, line, row, "arrival_time_s"),
                       int(_number(path, line, row, "gang_size_gpus", 1)),
                       _number(path, line, row, "duration_s_v100", 1), None)


def _alibaba(traces: Path) -> Iterator[TraceJob]:
    path = traces / Trace.ALIBABA / "openb_pod_list_default.csv"
    for line, row in _rows(path, ("num_gpu", "qos", "creation_time", "scheduled_time", "deletion_time")):
        gpus = int(_number(path, line, row, "num_gpu"))
        created = _number(path, line, row, "creation_time")
        # CPU-only pods need no GPU; Pending pods were never scheduled, so the trace gives no run time for them.
        if gpus == 0 or not row["scheduled_time"] or created < ALIBABA_WINDOW_START_S:
            continue
        run_s = _number(path, line, row, "deletion_time") - _number(path, line, row, "scheduled_time")
        if run_s <= 0:
            continue  # deleted as it was scheduled: nothing ran
        qos = row["qos"] if row["qos"] in ("LS", "BE") else None
        yield TraceJob("openb", created - ALIBABA_WINDOW_START_S, gpus, run_s, qos)


@dataclass(frozen=True)
class RateSeries:
    step_s: int
    """s each value holds for."""
    rates: dict[str, list[float]]
    """Request rate (req/s) per series, one value per step, in time order."""


def servegen_rates(traces: Path) -> RateSeries:
    path = traces / SERVEGEN
    rates: dict[str, list[float]] = {name: [] for name in SERVEGEN_SERIES}
    last = -1.0
    for line, row in _rows(path, ("t_s", *SERVEGEN_SERIES)):
        at = _number(path, line, row, "t_s")
        if at != last + SERVEGEN_STEP_S and last >= 0:
            raise TraceError(f"{path}:{line}: t_s {at:g} does not follow {last:g} by {SERVEGEN_STEP_S} s")
        last = at
        for name in SERVEGEN_SERIES:
            rates[name].append(_number(path, line, row, name))
    if last < 0:
        raise TraceError(f"{path}: no rows")
    return RateSeries(SERVEGEN_STEP_S, rates)
