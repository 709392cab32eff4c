"""Slurm accounting as the report reads it: sacct's parsable output, GPUs from AllocTRES, waits and held time clipped
to a window. (The real sacct against slurmdbd: test_report.py.)"""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from runbooks.report.accounting import AccountingError, Job, parse_sacct, sacct_jobs
from runbooks.report.window import Window

WINDOW = Window(datetime.fromtimestamp(1000, UTC), datetime.fromtimestamp(2000, UTC))
SACCT = """\
11|speech|alice|a800-train|900|950|1100|billing=8,cpu=8,gres/gpu:a800=8,gres/gpu=8,mem=64G,node=1
12|nlp-foundation|bob|a800-train|1500|1900|Unknown|billing=16,cpu=16,gres/gpu=16,node=2
13|speech|alice|a800-train|1800|Unknown|Unknown|billing=1,cpu=1,mem=8G,node=1
14|vision|carol|a800-flex|1200|1300|1400|cpu=2,mem=4G,node=1
"""


def test_should_read_each_allocation_with_its_gpus_and_times() -> None:
    jobs = parse_sacct(SACCT)
    assert jobs == [
        Job("11", "speech", "alice", "a800-train", 900.0, 950.0, 1100.0, 8),
        Job("12", "nlp-foundation", "bob", "a800-train", 1500.0, 1900.0, None, 16),
        Job("13", "speech", "alice", "a800-train", 1800.0, None, None, 0),
        Job("14", "vision", "carol", "a800-flex", 1200.0, 1300.0, 1400.0, 0),
    ]


def test_should_clip_held_time_to_the_window_and_count_a_running_job_until_now() -> None:
    done, running, pending, _ = parse_sacct(SACCT)
    assert done.held_s(WINDOW, now=5000) == 100  # started before the window
    assert running.held_s(WINDOW, now=5000) == 100  # still running: up to the window's end
    assert running.held_s(WINDOW, now=1950) == 50  # still running now, inside the window
    assert pending.held_s(WINDOW, now=5000) == 0


def test_should_count_a_wait_not_over_up_to_the_windows_end() -> None:
    done, running, pending, _ = parse_sacct(SACCT)
    assert (done.wait_s(WINDOW), running.wait_s(WINDOW), pending.wait_s(WINDOW)) == (50, 400, 200)
    assert (done.started_by(WINDOW), pending.started_by(WINDOW)) == (True, False)
    late = Job("15", "speech", "alice", "a800-train", 1900.0, 2500.0, None, 1)
    assert (late.wait_s(WINDOW), late.started_by(WINDOW)) == (100, False)


@pytest.mark.parametrize(("text", "error"), [
    pytest.param("11|speech|alice|900|950|1100|gres/gpu=8\n", "sacct printed 7 fields, not 8 (JobIDRaw,Account,User,"
                 "Partition,Submit,Start,End,AllocTRES)", id="rejects a row of other fields"),
    pytest.param("11|speech|alice|a800-train|2026-11-01T00:00:00|Unknown|Unknown|\n",
                 "sacct printed Submit='2026-11-01T00:00:00', not epoch seconds", id="rejects times not in epoch"),
    pytest.param("11|speech|alice|a800-train|Unknown|Unknown|Unknown|\n", "sacct printed no Submit time",
                 id="rejects a job without submit time"),
])
def test_should_reject_what_it_cannot_read(text: str, error: str) -> None:
    with pytest.raises(AccountingError) as raised:
        parse_sacct(text)
    assert str(raised.value).startswith(error)


def test_should_say_where_to_run_when_sacct_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AccountingError, match="sacct is not installed here: run the report where Slurm's client"):
        sacct_jobs(WINDOW.start, WINDOW.end)


def test_should_pass_on_what_a_failing_sacct_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sacct = tmp_path / "sacct"
    sacct.write_text("#!/bin/sh\necho 'sacct: error: Problem talking to the database: Connection refused' >&2\n"
                     "exit 1\n")
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AccountingError, match="^sacct exited 1: sacct: error: Problem talking to the database"):
        sacct_jobs(WINDOW.start, WINDOW.end)
