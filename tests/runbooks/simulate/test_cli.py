"""`gpuctl simulate` end to end on a short slice of a real trace: the table, the plots, and bad input refused."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.simulate.plots import FILES

REPO = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def gpuctl(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["simulate", "--project-dir", str(REPO), *args])
    return result.exit_code, result.output


def test_prints_both_policies_and_writes_real_pngs(tmp_path: Path) -> None:
    code, output = gpuctl("--stack", "prod", "--trace", "alibaba-gpu-2023", "--days", "2", "--size-lending", "--out",
                          str(tmp_path))
    assert code == ExitCode.DONE, output
    assert "static" in output and "this stack" in output and "difference" in output
    for figure in ("GPU utilization", "slurm pool", "flex pool", "kubernetes pool", "queue wait p50, all teams",
                   "queue wait p95, speech", "still waiting at the end, speech", "inference requests served",
                   "inference served in full", "GPU-hours lost to preemption", "GPUs lent at peak", "GPU-hours lent",
                   "of them serving inference"):
        assert figure in output
    # Static lends nothing: the share of its lent GPU-hours that served is a dash, not a figure.
    (serving,) = [line for line in output.splitlines() if "of them serving inference" in line]
    assert serving.split("│")[2].strip() == "-", serving
    # The sizing table, one row per delay tried, and the spec's own delays named under it.
    assert "sizing lending" in output and output.count("1800 s") >= 2
    assert "the spec's delays: 30 s, 30 s" in " ".join(output.split())
    # The title says what was offered, as replayed (rich may wrap it).
    assert "training load offered 0." in " ".join(output.split()) and "seed 0" in output
    assert "static slices by fairshare" in " ".join(output.split())
    for name in FILES:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name  # a drawn figure, not an empty canvas


def test_a_sweep_prints_each_figure_as_mean_and_range_per_load() -> None:
    code, output = gpuctl("--days", "1", "--training-load", "0.5", "--training-load", "0.9", "--seeds", "2",
                          "--static-split", "demand")
    assert code == ExitCode.DONE, output
    text = " ".join(output.split())
    assert "static slices by demand" in text
    assert "--training-load 0.5 (offered" in text and "--training-load 0.9 (offered" in text
    assert text.count("seeds 0 to 1") == 2 and "mean (lowest to highest)" in text
    (row,) = [line for line in output.splitlines() if "GPU utilization" in line][:1]
    assert " to " in row.split("│")[2], row  # mean (lowest to highest)


@pytest.mark.parametrize(("args", "message"), [
    (["--days", "0"], "--days"),
    (["--trace", "philly"], "--trace"),
    (["--team-map", "speech"], "--team-map: 'speech' is not team=group"),
    (["--team-map", "nobody=2869ce"], "names no team of the site"),
    (["--stage", "beta"], "--stage: no stage named 'beta'"),
    (["--traces", "/nonexistent"], "unreadable"),
    (["--seeds", "2", "--out", "/tmp/x"], "--out: it reads one run; a sweep (1 loads, 2 seeds) has many"),
], ids=["rejects a window of no days", "rejects an unknown trace", "rejects a team map without =",
        "rejects a team map naming no team", "rejects an unknown stage", "rejects a missing trace folder",
        "rejects plots of a sweep"])
def test_rejects_bad_input_naming_the_option(args: list[str], message: str) -> None:
    code, output = gpuctl("--days", "1", *args)
    assert code == ExitCode.INVALID
    assert message in " ".join(output.split()), output
