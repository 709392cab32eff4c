"""How a gpuctl command ends on an error it expects: one line naming what failed, and the code of the one table
(runbooks/exit_codes.py, which the README lists).

A command runs under `exit_on_failure(endings)`. The errors any command may meet (the stack file, the site spec, the
program) are known here; a runbook names its own once, in a table beside its commands. An error no table names is a
bug and keeps its traceback."""

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import typer
from rich.markup import escape

from components.site.problems import SiteSpecError
from runbooks.console import err
from runbooks.exit_codes import ExitCode
from runbooks.offline.engine import ProgramError, StackConfigError


@dataclass(frozen=True)
class Ending:
    """How a command ends on one kind of error: `<label>: [<what>: ]<the error> [(<hint>)]`, then the exit code."""

    code: ExitCode
    label: str | Callable[[Exception], str] = "error"
    """How the line begins: `error`, `refused`, `held`; or read from the error (a rollout's final state)."""
    style: str = "red"
    what: str = ""
    """What was being done, when the error's own words do not say (`cannot write the plan to out`)."""
    hint: str = ""
    """What to do about it."""

    def line(self, error: Exception) -> str:
        label = self.label if isinstance(self.label, str) else self.label(error)
        said = f"{self.what}: {error}" if self.what else str(error)
        hint = f" ({self.hint})" if self.hint else ""
        return f"[{self.style}]{escape(label)}:[/] {escape(said)}{escape(hint)}"


Endings = Mapping[type[Exception], Ending]

SHARED: Endings = {
    StackConfigError: Ending(ExitCode.INVALID),
    ProgramError: Ending(ExitCode.FAILED, "the program failed"),
}
"""What every command that reads a stack may meet (a site spec's problems are listed: `print_spec_problems`)."""


def ending_of(error: Exception, endings: Endings) -> Ending | None:
    """The ending of the error's own class or its nearest base that has one: FileNotFoundError's before OSError's."""
    return next((endings[kind] for kind in type(error).__mro__ if kind in endings), None)


@contextmanager
def exit_on_failure(endings: Endings | None = None, stack: str = "") -> Iterator[None]:
    """Ends the command on an error the tables name, with its line on stderr and its exit code; `stack` names the
    stack file a site spec's problems are in. It decorates a command as well (`@exit_on_failure(ENDINGS)`)."""
    try:
        yield
    except typer.Exit:
        raise
    except SiteSpecError as error:
        print_spec_problems(error, stack)
        raise typer.Exit(ExitCode.INVALID) from None
    except Exception as error:
        ending = ending_of(error, {**SHARED, **(endings or {})})
        if ending is None:
            raise
        raise _ended(ending.line(error), ending.code) from None


def _ended(line: str, code: ExitCode) -> typer.Exit:
    err.print(line, highlight=False)
    return typer.Exit(code)


def print_spec_problems(error: SiteSpecError, stack: str) -> None:
    """Every problem of the spec, each with its field path and rule."""
    count = len(error.problems)
    where = f" in Pulumi.{stack}.yaml" if stack else ""
    err.print(f"[red]invalid site spec[/]{where} ({count} problem{'s' * (count != 1)}):")
    for problem in error.problems:
        err.print(f"  - {escape(str(problem))}", highlight=False)
