"""`gpuctl simulate --replay-failures`: the failure table beside the trace replay's, its title naming the study and
every assumption, and bad options refused naming them."""

from pathlib import Path

from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.exit_codes import ExitCode

REPO = Path(__file__).resolve().parents[3]


def gpuctl(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["simulate", "--project-dir", str(REPO), "--stack", "prod", *args])
    return result.exit_code, result.output


def cells(output: str, figure: str) -> list[str]:
    (line,) = [line for line in output.splitlines() if line.startswith(f"│ {figure} ")]
    return [cell.strip() for cell in line.split("│")[2:-1]]  # static, this stack, difference


def test_should_print_both_worlds_failures_under_the_trace_replay() -> None:
    code, output = gpuctl("--days", "5", "--replay-failures", "--failure-rate", "0.001", "--response-minutes", "240")
    assert code == ExitCode.DONE, output
    words = " ".join(output.split())
    assert "GPU failures replayed over 5 days, seed 0: 0.001 per GPU-hour (--failure-rate); 50% persistent" in words
    assert "a human acts 240 min after a page or hand-off" in words and "dcgmi diag -r 3" in words
    faults = cells(output, "GPU faults")
    assert faults[0] == faults[1] and int(faults[0]) > 0
    static, ours, _ = (float(c.split()[0].replace(",", "")) for c in cells(output, "jobs failed"))
    assert ours < static  # four hours of a broken node failing jobs, against a drain within a minute
    assert "drain" in cells(output, "controller actions")[1]


def test_should_name_the_llama_3_study_by_default() -> None:
    code, output = gpuctl("--days", "1", "--replay-failures")
    assert code == ExitCode.DONE, output
    assert "1.16e-05 per GPU-hour (Dubey et al., The Llama 3 Herd of Models, arXiv:2407.21783" in " ".join(
        output.split())


def test_should_refuse_a_share_outside_0_to_1_naming_the_option() -> None:
    code, output = gpuctl("--days", "1", "--replay-failures", "--persistent-share", "1.5")
    assert code == ExitCode.INVALID and "--persistent-share" in output


def test_should_replay_failures_once_beside_a_sweep_of_loads() -> None:
    code, output = gpuctl("--days", "1", "--training-load", "0.5", "--training-load", "0.7", "--replay-failures")
    assert code == ExitCode.DONE, output
    assert " ".join(output.split()).count("GPU failures replayed over 1 days") == 1
