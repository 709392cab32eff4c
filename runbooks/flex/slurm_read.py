"""What a lend reads from Slurm, decoded and checked as untrusted input.

Any Slurm user writes fields that `squeue --json` prints (job names, comments, paths), and Slurm 22.05 passes the bytes
through as they came: a job name with a byte that is not UTF-8 is that byte inside the JSON (issue 41; json-c escapes
quotes and control characters, not encodings). So every command's output is decoded as UTF-8 with what does not decode
replaced (U+FFFD), and only the fields a lend acts on are read, each checked for its type and range:

- `squeue --json` (openapi v0.0.38): output with no job list, or a record with no job_id at all, is another Slurm's
  and fails the read; a record whose job_id is not a job id is skipped (nothing can act on it); one whose other
  fields fail (missing, mistyped, out of range) is kept as Unreadable, and its job as protected work.
- `squeue --format=%A|%q|%M` lines: %A is the job's own id, also for an element of a job array (%i would print
  `<array id>_<index>`, which no record has); a line that does not read is a job of unknown QoS, never preemptible.
- `scontrol show node`: a State that is not Slurm's `FLAG+FLAG` form reads as UNREADABLE_STATE, a node no lend takes
  and no reclaim resumes.

Whatever fails, the lend's answer is the same: it leaves the job alone and the node waiting.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MAX_JOB_ID = 2**32 - 1
"""Slurm job ids are uint32 (slurm.h, NO_VAL excluded below)."""
MAX_RESTARTS = 2**16 - 1
"""Slurm counts restarts in a uint16 (job_record_t restart_cnt)."""
MAX_COMMENT_CHARS = 4096
"""An AdminComment a lend writes back after its mark: longer ones (which only an administrator can set) are not
carried through a lend, and their job is left alone."""
MAX_LINE_CHARS = 1024
"""A squeue line of id, QoS and time used is under 100 characters; a longer one is not squeue's."""
MAX_ELAPSED_S = 366 * 86400 * 100
"""s; squeue's time used past a century is no time Slurm measured."""
JOB_LINE_FORMAT = "--format=%A|%q|%M"
"""squeue's job id (unique for each array element), QoS and time used since the job last started."""

_JOB_ID = re.compile(r"[1-9][0-9]{0,9}")  # and under MAX_JOB_ID: _is_job_id
# sacctmgr lowercases QoS names; Slurm allows letters, digits, '_', '-', '.' in them.
_QOS = re.compile(r"[a-z0-9_.-]{1,64}")
_STATE = re.compile(r"[A-Z_]{1,32}(\+[A-Z_]{1,32}){0,15}")
UNREADABLE_STATE = "UNREADABLE"
"""What node_state gives for a State that is not Slurm's; listed among the unhealthy flags (runbooks.flex.lending)."""


class UnreadableOutputError(ValueError):
    """A command's whole output is not what the lend reads (not JSON, no job list)."""


def decode(raw: bytes) -> str:
    """A command's output as text: UTF-8, with every byte that does not decode replaced by U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def job_id(value: object) -> str | None:
    """A job id as squeue and scontrol take it, or None for anything else (text, a bool, zero, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_JOB_ID:
        return None
    return str(value)


def _is_job_id(word: str) -> bool:
    return _JOB_ID.fullmatch(word) is not None and int(word) < MAX_JOB_ID


@dataclass(frozen=True)
class JobRecord:
    """The fields of a job's `squeue --json` record that a lend reads."""

    id: str
    admin_comment: str
    """Only a Slurm administrator (or a lend) sets it: the lend's mark lives here."""
    restarts: int
    requeueable: bool
    """A batch job Slurm may requeue (`requeue` and `batch_flag`): not interactive, not --no-requeue."""
    heterogeneous: bool
    """A component of a heterogeneous job: a lend does not requeue part of one."""


@dataclass(frozen=True)
class Unreadable:
    """A job whose record fails a check: the lend leaves it alone."""

    id: str
    why: str
    """The field and the rule it broke."""


def _record(raw: dict[str, Any], job: str) -> JobRecord | Unreadable:
    comment, restarts = raw.get("admin_comment"), raw.get("restart_cnt")
    requeue, batch, het = raw.get("requeue"), raw.get("batch_flag"), raw.get("het_job_id", 0)
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        return Unreadable(job, f"admin_comment: not text of at most {MAX_COMMENT_CHARS} characters")
    if "\ufffd" in comment or any(not c.isprintable() for c in comment):
        # Written back after the requeue: it must be the administrator's exact text.
        return Unreadable(job, "admin_comment: holds bytes that are not UTF-8 or control characters")
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= MAX_RESTARTS:
        return Unreadable(job, f"restart_cnt: not a whole number from 0 to {MAX_RESTARTS}")
    if not isinstance(requeue, bool) or not isinstance(batch, bool):
        return Unreadable(job, "requeue, batch_flag: not true or false")
    if isinstance(het, bool) or not isinstance(het, int) or het < 0:
        return Unreadable(job, "het_job_id: not a job id or 0")
    return JobRecord(job, comment, restarts, requeue and batch, het != 0)


def job_records(text: str) -> dict[str, JobRecord | Unreadable]:
    """Each job `squeue --json` lists, by id; raises UnreadableOutputError when there is no job list at all."""
    try:
        # strict=False: a control character inside a string is text, not an error, whatever Slurm escapes.
        jobs = json.loads(text, strict=False)["jobs"]
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise UnreadableOutputError(f"{type(error).__name__}: {error}"[:200]) from None
    if not isinstance(jobs, list):
        raise UnreadableOutputError("jobs: not a list")
    records: dict[str, JobRecord | Unreadable] = {}
    for index, raw in enumerate(jobs):
        if not isinstance(raw, dict) or "job_id" not in raw:
            # Every record of Slurm 22.05 has one: this squeue speaks another version.
            raise UnreadableOutputError(f"jobs[{index}]: no job_id")
        job = job_id(raw["job_id"])
        if job is None:
            continue  # no id to act on or to look it up by
        # Two records of one id: neither is trusted.
        records[job] = _record(raw, job) if job not in records else Unreadable(job, "job_id: listed twice")
    return records


@dataclass(frozen=True)
class JobLine:
    """One job as `squeue --noheader` JOB_LINE_FORMAT prints it."""

    id: str
    qos: str
    used_s: float
    """s since the job last started; inf when squeue cannot tell."""
    readable: bool = True
    """False: the line is not squeue's; id and qos are safe placeholders and the job counts as protected."""


def elapsed_s(used: str) -> float:
    """squeue's %M (time used since the job last started: `[days-][hours:]minutes:seconds`, squeue(1)) in seconds;
    a time squeue cannot tell (`INVALID`) or out of range counts as the most a requeue could lose."""
    days, _, clock = used.rpartition("-")
    parts = clock.split(":")
    if not 1 <= len(parts) <= 3 or not all(_number(part) for part in parts) or days and not _number(days):
        return math.inf
    seconds = int(days or 0) * 86400 + sum(int(v) * 60 ** i for i, v in enumerate(reversed(parts)))
    return float(seconds) if seconds <= MAX_ELAPSED_S else math.inf


def _number(text: str) -> bool:
    return text.isascii() and text.isdecimal() and len(text) <= 6


def job_lines(text: str) -> list[JobLine]:
    """The jobs of squeue's JOB_LINE_FORMAT output; a line that is not squeue's stands for a job of unknown id."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|") if len(line) <= MAX_LINE_CHARS else []
        if len(fields) == 3 and _is_job_id(fields[0]) and _QOS.fullmatch(fields[1]):
            jobs.append(JobLine(fields[0], fields[1], elapsed_s(fields[2])))
        else:
            jobs.append(JobLine(f"unreadable-line-{number}", "unknown", math.inf, readable=False))
    return jobs


def job_ids(text: str) -> set[str]:
    """The job ids of squeue's `--format=%A` output (lines that are no job id are no job a lend acts on)."""
    return {word for word in text.split() if _is_job_id(word)}


def node_state(value: str) -> str:
    """A node's State as scontrol prints it (`MIXED+DRAIN`), or UNREADABLE_STATE."""
    return value if _STATE.fullmatch(value) else UNREADABLE_STATE
