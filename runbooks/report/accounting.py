"""Training jobs as Slurm accounting recorded them (sacct, from slurmdbd), and what the report computes from them.

Queue wait is Start - Submit of each job's allocation, from the accounting records themselves: no exporter histogram
that resets when its process restarts, no sampling.
"""

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
        return float(text)
    except ValueError:
        raise AccountingError(f"sacct printed {field}={text!r}, not epoch seconds, in {line!r}") from None


def _gpus(tres: str) -> int:
    """GPUs of an AllocTRES such as `billing=8,cpu=8,gres/gpu=8,mem=64G,node=1` (typed counts are not summed)."""
    counts = dict(part.split("=", 1) for part in tres.split(",") if "=" in part)
    return int(counts.get(GPU_TRES, "0"))


def parse_sacct(text: str) -> list[Job]:
    """`sacct --parsable2 --noheader --format=<FIELDS>` with SLURM_TIME_FORMAT=%s."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(FIELDS):
            raise AccountingError(f"sacct printed {len(values)} fields, not {len(FIELDS)} ({','.join(FIELDS)}): "
                                  f"{line!r}")
        row = dict(zip(FIELDS, values, strict=True))
        submit = _time(row["Submit"], "Submit", line)
        if submit is None:
            raise AccountingError(f"sacct printed no Submit time in {line!r}")
        jobs.append(Job(row["JobIDRaw"], row["Account"], row["User"], row["Partition"], submit,
                        _time(row["Start"], "Start", line), _time(row["End"], "End", line), _gpus(row["AllocTRES"])))
    return jobs


def sacct_jobs(since: datetime, until: datetime) -> list[Job]:
    """Every job allocation (all users) eligible or running at some time in [since, until]."""
    # sacct reads -S/-E in the local time of the machine it runs on; %s prints epoch seconds, free of time zones.
    local = "%Y-%m-%dT%H:%M:%S"
    args = ["sacct", "--allusers", "--allocations", "--noheader", "--parsable2", f"--format={','.join(FIELDS)}",
            f"--starttime={since.astimezone().strftime(local)}", f"--endtime={until.astimezone().strftime(local)}"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=SACCT_TIMEOUT_S,
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
