"""Training jobs as Slurm accounting recorded them (sacct, from slurmdbd), and what the report computes from them.

Queue wait is Start - Submit of each job's allocation, from the accounting records themselves: no exporter histogram
that resets when its process restarts, no sampling.
"""

import math
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from runbooks.report.window import Window

SACCT_TIMEOUT_S = 120.0
"""seconds sacct may take: a month of a busy cluster's allocations is a few hundred thousand rows from slurmdbd."""
FIELDS = ("JobIDRaw", "Account", "User", "Partition", "Submit", "Start", "End", "AllocTRES")
GPU_TRES = "gres/gpu"
"""The GPU TRES the stack's slurm.conf accounts (AccountingStorageTRES=gres/gpu, components/slurm/conf.py)."""
NOT_YET = {"Unknown", "None", ""}
"""What sacct prints for a start or end that has not happened."""
MAX_ROWS = 2_000_000
"""Job allocations one report reads at most (a month of a busy cluster is a few hundred thousand)."""
MAX_GPUS = 100_000
"""GPUs of one allocation at most: past any cluster the report measures."""


class AccountingError(Exception):
    """sacct failed or printed what the report cannot read; the message says which."""


@dataclass(frozen=True)
class Job:
    job_id: str
    account: str
    user: str
    partition: str
    submit: float
    """epoch seconds, as are start and end."""
    start: float | None
    end: float | None
    """None while the job runs (or never started)."""
    gpus: int

    def held_s(self, window: Window, now: float) -> float:
        """Seconds of the window during which the job held its allocation."""
        if self.start is None:
            return 0.0
        return window.overlap_s(self.start, now if self.end is None else self.end)

    def wait_s(self, window: Window) -> float:
        """From submission to start, or to the window's end for a job not started by then (a lower bound)."""
        end = window.end.timestamp()
        return (end if self.start is None or self.start > end else self.start) - self.submit

    def started_by(self, window: Window) -> bool:
        return self.start is not None and self.start <= window.end.timestamp()


def _time(text: str, field: str, line: str) -> float | None:
    if text in NOT_YET:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise AccountingError(f"sacct printed {field}={text[:40]!r}, not epoch seconds, in {line[:200]!r}") from None
    return value


def _gpus(tres: str, line: str) -> int:
    """GPUs of an AllocTRES such as `billing=8,cpu=8,gres/gpu=8,mem=64G,node=1` (typed counts are not summed)."""
    counts = dict(part.split("=", 1) for part in tres.split(",") if "=" in part)
    text = counts.get(GPU_TRES, "0")
    if not (text.isascii() and text.isdecimal() and int(text) <= MAX_GPUS):
        raise AccountingError(f"sacct printed AllocTRES {GPU_TRES}={text[:40]!r}, not a count of at most {MAX_GPUS:,} "
                              f"GPUs, in {line[:200]!r}")
    return int(text)


def parse_sacct(text: str) -> list[Job]:
    """`sacct --parsable2 --noheader --format=<FIELDS>` with SLURM_TIME_FORMAT=%s."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if number > MAX_ROWS:
            raise AccountingError(f"sacct printed over {MAX_ROWS:,} lines, the limit of one report: measure a shorter "
                                  "window")
        values = line.split("|")
        if len(values) != len(FIELDS):
            raise AccountingError(f"sacct printed {len(values)} fields, not {len(FIELDS)} ({','.join(FIELDS)}), on "
                                  f"line {number}: {line[:200]!r}")
        row = dict(zip(FIELDS, values, strict=True))
        submit = _time(row["Submit"], "Submit", line)
        if submit is None:
            raise AccountingError(f"sacct printed no Submit time in {line[:200]!r}")
        jobs.append(Job(row["JobIDRaw"], row["Account"], row["User"], row["Partition"], submit,
                        _time(row["Start"], "Start", line), _time(row["End"], "End", line),
                        _gpus(row["AllocTRES"], line)))
    return jobs


def sacct_jobs(since: datetime, until: datetime) -> list[Job]:
    """Every job allocation (all users) eligible or running at some time in [since, until]."""
    # sacct reads -S/-E in the local time of the machine it runs on; %s prints epoch seconds, free of time zones.
    local = "%Y-%m-%dT%H:%M:%S"
    args = ["sacct", "--allusers", "--allocations", "--noheader", "--parsable2", f"--format={','.join(FIELDS)}",
            f"--starttime={since.astimezone().strftime(local)}", f"--endtime={until.astimezone().strftime(local)}"]
    try:
        # Names are any administrator's bytes: what is no UTF-8 is replaced, never a traceback.
        done = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=SACCT_TIMEOUT_S,
                              env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
    except FileNotFoundError:
        raise AccountingError("sacct is not installed here: run the report where Slurm's client commands "
                              "reach the cluster (SLURM_CONF)") from None
    except subprocess.TimeoutExpired:
        raise AccountingError(f"sacct did not answer within {SACCT_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise AccountingError(f"sacct exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return parse_sacct(done.stdout)


def submitted_in(jobs: Iterable[Job], window: Window) -> list[Job]:
    return [j for j in jobs if window.holds(j.submit)]
