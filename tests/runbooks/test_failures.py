"""One error-to-exit mapping for every gpuctl command: the error a table names ends the command with its code and one
line naming what failed; an error no table names is a bug and keeps its traceback."""

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from components.site.problems import Problem, SiteSpecError
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, ending_of, exit_on_failure
from runbooks.offline.engine import StackConfigError


class HeldError(Exception):
    pass


ENDINGS: Endings = {
    OSError: Ending(ExitCode.INVALID, what="cannot read the targets"),
    FileNotFoundError: Ending(ExitCode.FAILED, "failed", hint="install it"),
    HeldError: Ending(ExitCode.HELD, "held", "yellow"),
}


def _run(error: BaseException | None) -> tuple[int, str, BaseException | None]:
    app = typer.Typer()

    @app.command()
    @exit_on_failure(ENDINGS)
    def command(count: Annotated[int, typer.Option(help="How many.")] = 1) -> None:
        if error is not None:
            raise error
        print(f"done {count}")

    result = CliRunner().invoke(app, ["--count", "2"])
    return result.exit_code, result.output, result.exception


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (OSError("disk full"), ExitCode.INVALID, "error: cannot read the targets: disk full"),
        (FileNotFoundError("no pulumi"), ExitCode.FAILED, "failed: no pulumi (install it)"),
        (HeldError("soak: 2 of 7 days"), ExitCode.HELD, "held: soak: 2 of 7 days"),
        (StackConfigError("Pulumi.prod.yaml: not found"), ExitCode.INVALID, "error: Pulumi.prod.yaml: not found"),
        (OSError("[bold]not markup[/]"), ExitCode.INVALID, "error: cannot read the targets: [bold]not markup[/]"),
    ],
    ids=[
        "ends on a named error with its code and what failed",
        "ends on the nearest class: FileNotFoundError's",
        "ends held",
        "ends on an error every command may meet",
        "prints the error's words, not rich markup",
    ],
)
def test_should_end_on_a_named_error_with_its_code_and_one_line(error: Exception, code: ExitCode, line: str) -> None:
    exit_code, output, _ = _run(error)
    assert (exit_code, output) == (code, line + "\n")


def test_should_keep_the_traceback_of_an_error_no_table_names() -> None:
    exit_code, output, raised = _run(KeyError("bug"))
    assert exit_code == 1 and isinstance(raised, KeyError), output


def test_should_pass_an_exit_through_and_keep_the_commands_options() -> None:
    assert _run(typer.Exit(ExitCode.HELD))[0] == ExitCode.HELD
    assert _run(None)[:2] == (0, "done 2\n")


def test_should_list_every_spec_problem_naming_the_stack_file(capsys: pytest.CaptureFixture[str]) -> None:
    problems = [Problem("racks[0].power_kw", "must be > 0"), Problem("teams", "must not be empty")]
    with pytest.raises(typer.Exit) as ended, exit_on_failure(stack="prod"):
        raise SiteSpecError(problems)
    assert ended.value.exit_code == ExitCode.INVALID
    assert capsys.readouterr().err.splitlines() == [
        "invalid site spec in Pulumi.prod.yaml (2 problems):",
        f"  - {problems[0]}",
        f"  - {problems[1]}",
    ]


def test_should_find_no_ending_for_an_error_outside_the_table() -> None:
    assert ending_of(ValueError("x"), ENDINGS) is None
    assert ending_of(IsADirectoryError("x"), ENDINGS) is ENDINGS[OSError]
