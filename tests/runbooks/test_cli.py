"""gpuctl's command line: every runbook is a sub-command, and running one imports that runbook alone."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from runbooks.cli import RUNBOOKS, app
from tests.builders import REPO


def test_should_list_every_runbook_in_help() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    commands = result.output[result.output.index("Commands") :].splitlines()[1:]
    listed = [line.split()[1] for line in commands if len(line.split()) > 2 and line.split()[1].isalpha()]
    assert listed == list(RUNBOOKS)


@pytest.mark.parametrize("name", list(RUNBOOKS))
def test_should_load_each_runbook_when_asked(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"], prog_name="gpuctl")
    assert result.exit_code == 0, result.output
    assert f"gpuctl {name}" in " ".join(result.output.split())


def test_should_refuse_an_unknown_command() -> None:
    result = CliRunner().invoke(app, ["deploy"])
    assert result.exit_code == 2
    assert "No such command 'deploy'" in result.output


def test_should_import_no_other_runbook_for_plan() -> None:
    # The other runbooks' imports (matplotlib, slack-sdk, the Automation API, the simulator) took 0.6 s of CPU
    # (1.5 s on a loaded machine) of every `gpuctl plan`.
    probe = (
        "import sys; from runbooks.cli import app; app(['plan', '--help'], standalone_mode=False); "
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()[-1:] and set(done.stdout.splitlines()[-1].split())
    others = sorted(
        m
        for m in loaded
        if m.startswith(("runbooks.", "matplotlib", "slack_sdk"))
        and not m.startswith(
            (
                "runbooks.plan",
                "runbooks.offline",
                "runbooks.options",
                "runbooks.failures",
                "runbooks.console",
                "runbooks.exit_codes",
                "runbooks.children",
                "runbooks.cli",
            )
        )
    )
    assert "runbooks.plan.cli" in loaded
    assert others == []
