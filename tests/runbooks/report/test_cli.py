"""`gpuctl report`'s exits without a cluster: an option it cannot use (2), a Prometheus it cannot reach (1)."""

from pathlib import Path

from typer.testing import CliRunner

from runbooks.cli import app
from tests.builders import REPO
from tests.harness.daemons import free_ports

WEEK = "2020-11-08T00:00Z..2020-11-15T00:00Z"
WEEK_BEFORE = "2020-11-01T00:00Z..2020-11-08T00:00Z"


def _report(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["report", "--project-dir", str(REPO), "--out", str(tmp_path / "report"), *args])
    return result.exit_code, result.output


def test_should_fail_clearly_when_prometheus_cannot_be_reached(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    code, output = _report(tmp_path, "--window", WEEK, "--baseline", WEEK_BEFORE,
                           "--prometheus-url", f"http://127.0.0.1:{port}")
    assert code == 1, output
    assert output.startswith(f"error: Prometheus at http://127.0.0.1:{port} did not answer: "), output
    assert not (tmp_path / "report").exists()


def test_should_name_the_option_and_the_rule(tmp_path: Path) -> None:
    code, output = _report(tmp_path, "--window", WEEK_BEFORE, "--baseline", WEEK)
    assert code == 2, output
    assert output == ("error: --baseline: ends at 2020-11-15T00:00:00+00:00, after the window starts "
                      "(2020-11-01T00:00:00+00:00): the baseline is the period before\n")
    assert not (tmp_path / "report").exists()
