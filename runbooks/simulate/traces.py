"""The public workload traces under ../shared/traces, read as they are published (each folder's README gives the
source, licence, columns and units): training jobs from the Philly-derived Gavel traces and Alibaba's GPU 2023 pods,
the LLM request-rate series of Alibaba ServeGen for inference.

A trace that is missing or malformed raises TraceError naming the file, the row and the column; one past a bound
(MAX_TRACE_BYTES, MAX_ROWS, a field over csv's 131,072 characters, MAX_GANG_GPUS, MAX_DURATION_S) names the bound
too. The published traces are at most 2 MB and 25,000 rows: the bounds leave them room and keep a hostile file from
taking the machine's memory.
"""

import csv
import io
import os
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

MAX_TRACE_BYTES = 64 * 2**20
"""bytes of one trace file at most (30 times the largest published one)."""
MAX_ROWS = 1_000_000
"""rows of one trace file at most (40 times the longest published one)."""
MAX_GANG_GPUS = 100_000
"""GPUs of one job's gang at most: past any site the simulator models."""
MAX_DURATION_S = 10 * 366 * 86400.0
"""s of one job's run time at most: ten years."""

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


def trace_file(traces: Path, trace: Trace) -> Path:
    """The file of the trace's jobs."""
    return traces / trace / ("jobs.csv" if trace == Trace.GAVEL else "openb_pod_list_default.csv")


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV trace with their line numbers; TraceError naming the file and the line for anything csv
    cannot read (a NUL byte, a field over its limit, text that is no UTF-8) and for a file past the bounds."""
    try:
        with path.open("rb") as source:
            size = os.fstat(source.fileno()).st_size
            if size > MAX_TRACE_BYTES:
                raise TraceError(f"{path}: {size:,} bytes, over the limit of {MAX_TRACE_BYTES:,} for a trace file")
            raw = source.read(MAX_TRACE_BYTES + 1)
    except OSError as error:
        raise TraceError(f"{path}: unreadable ({error.strerror or error})") from None
    try:
        # Whole, so that bytes that are no UTF-8 are found with their line.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: no column {', '.join(missing)} (the folder's README lists the columns)")
        for index, row in enumerate(reader):
            if index >= MAX_ROWS:
                raise TraceError(f"{path}:{reader.line_num}: over the limit of {MAX_ROWS:,} rows for a trace")
            yield reader.line_num, row
    except csv.Error as error:
        raise TraceError(f"{path}:{reader.line_num + 1}: not a CSV row ({error})") from None


def _number(path: Path, line: int, row: dict[str, str], column: str, minimum: float = 0.0,
            maximum: float = float("inf")) -> float:
    text = row.get(column) or ""
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} {text[:40]!r} is not a number") from None
    if not value >= minimum or value == float("inf"):
        raise TraceError(f"{path}:{line}: {column} {text} must be finite and at least {minimum:g}")
    if value > maximum:
        raise TraceError(f"{path}:{line}: {column} {text} is over the limit of {maximum:g}")
    return value


def _gavel(traces: Path) -> Iterator[TraceJob]:
    # jobs.csv is derived from the raw .trace files by the folder's derive_jobs_csv.py: run time in s on a V100.
    path = trace_file(traces, Trace.GAVEL)
    for line, row in _rows(path, ("vc", "arrival_time_s", "gang_size_gpus", "duration_s_v100")):
        yield TraceJob(row["vc"], _number(path, line, row, "arrival_time_s"),
                       int(_number(path, line, row, "gang_size_gpus", 1, MAX_GANG_GPUS)),
                       _number(path, line, row, "duration_s_v100", 1, MAX_DURATION_S), None)


def _alibaba(traces: Path) -> Iterator[TraceJob]:
    path = trace_file(traces, Trace.ALIBABA)
    for line, row in _rows(path, ("num_gpu", "qos", "creation_time", "scheduled_time", "deletion_time")):
        gpus = int(_number(path, line, row, "num_gpu", 0, MAX_GANG_GPUS))
        created = _number(path, line, row, "creation_time")
        # CPU-only pods need no GPU; Pending pods were never scheduled, so the trace gives no run time for them.
        if gpus == 0 or not row["scheduled_time"] or created < ALIBABA_WINDOW_START_S:
            continue
        run_s = _number(path, line, row, "deletion_time") - _number(path, line, row, "scheduled_time")
        if run_s <= 0:
            continue  # deleted as it was scheduled: nothing ran
        if run_s > MAX_DURATION_S:
            raise TraceError(f"{path}:{line}: deletion_time - scheduled_time {run_s:g} s is over the limit of "
                             f"{MAX_DURATION_S:g} s")
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
