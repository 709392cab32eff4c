"""`gpuctl simulate` on trace files a user wrote (issue 41): each is refused with exit 2 and an error naming the
file, the line and the limit, within seconds, never a traceback or the machine's memory (a 50-byte trace asked for
10^8 jobs, 2.7 GB, then MemoryError)."""

import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.simulate import traces
from runbooks.simulate.traces import SERVEGEN, Trace, trace_file
from tests.builders import REPO

HEADER = b"vc,arrival_time_s,gang_size_gpus,duration_s_v100\n"
PUBLISHED = REPO.parent / "shared" / "traces"


def simulate(tmp_path: Path, jobs: bytes) -> tuple[int, str, float]:
    """Replays `jobs` as the Gavel trace's jobs.csv (the published request rates for inference); exit code, the
    error output on one line, seconds taken."""
    path = trace_file(tmp_path, Trace.GAVEL)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jobs)
    (tmp_path / SERVEGEN).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(PUBLISHED / SERVEGEN, tmp_path / SERVEGEN)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["simulate", "--project-dir", str(REPO), "--traces", str(tmp_path), "--trace",
                                      "philly-gavel", "--days", "1"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, " ".join(result.output.split()), time.monotonic() - started


@pytest.mark.parametrize(("jobs", "said"), [
    pytest.param(HEADER + b"v,0,1,1\n", "copies of each (7.74e+06 jobs), over the limit of 1,000 copies and "
                 "5,000,000 jobs: replay more days", id="a 50-byte trace whose one job would be copied 10^7 times"),
    pytest.param(HEADER + b"v,0,1,1\x00\n", "jobs.csv:2: duration_s_v100 '1\\x00' is not a number",
                 id="a NUL byte"),
    pytest.param(HEADER + b"v" * 200_000 + b",0,1,1\n", "jobs.csv:2: not a CSV row (field larger than field limit "
                 "(131072))", id="a field of 200,000 characters"),
    pytest.param(HEADER + b"v,0,1,1\nv\xff,0,1,1\n", "jobs.csv:3: not UTF-8 text (invalid start byte at byte 58)",
                 id="bytes that are not UTF-8"),
    pytest.param(HEADER + b"v,0,1e12,3600\n", "jobs.csv:2: gang_size_gpus 1e12 is over the limit of 100000",
                 id="a gang of 10^12 GPUs"),
    pytest.param(HEADER + b"v,0,1,1e300\n", "jobs.csv:2: duration_s_v100 1e300 is over the limit of 3.16224e+08",
                 id="a job running 10^300 s"),
])
def test_should_refuse_a_hostile_trace_naming_file_line_and_limit(tmp_path: Path, jobs: bytes, said: str) -> None:
    code, output, took = simulate(tmp_path, jobs)
    assert code == ExitCode.INVALID and said in output, output
    assert took < 10


def test_should_refuse_a_trace_over_its_row_and_byte_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bounds as the published traces need them, scaled down: the same check at 3 rows and 100 bytes.
    monkeypatch.setattr(traces, "MAX_ROWS", 3)
    code, output, _ = simulate(tmp_path, HEADER + b"v,0,8,36000\n" * 4)
    assert code == ExitCode.INVALID and "jobs.csv:5: over the limit of 3 rows for a trace" in output, output
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 100)
    code, output, _ = simulate(tmp_path, HEADER + b"v,0,8,36000\n" * 10)
    assert code == ExitCode.INVALID and "jobs.csv: 169 bytes, over the limit of 100 for a trace file" in output, output
