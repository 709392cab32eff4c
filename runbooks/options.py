"""The site of a stack, for the operator commands: Pulumi.<stack>.yaml read and parsed, or exit 2 saying why."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from components.site.problems import SiteSpecError
from components.site.site import Site
from components.validate import parse_site
from runbooks.console import err
from runbooks.exit_codes import ExitCode
from runbooks.offline.engine import StackConfigError, load_stack_config

StackOption = Annotated[str, typer.Option(help="Stack whose Pulumi.<stack>.yaml describes the site.")]
ProjectDirOption = Annotated[Path, typer.Option(help="Directory holding Pulumi.yaml.")]


def site_or_exit(project_dir: Path, stack: str) -> Site:
    try:
        return parse_site(*load_stack_config(project_dir, stack).project_values())
    except StackConfigError as error:
        err.print(f"[red]error:[/] {escape(str(error))}")
        raise typer.Exit(ExitCode.INVALID) from None
    except SiteSpecError as error:
        print_spec_problems(error, stack)
        raise typer.Exit(ExitCode.INVALID) from None


def print_spec_problems(error: SiteSpecError, stack: str) -> None:
    """Every problem of the spec, each with its field path and rule."""
    count = len(error.problems)
    err.print(f"[red]invalid site spec[/] in Pulumi.{stack}.yaml ({count} problem{'s' * (count != 1)}):")
    for problem in error.problems:
        err.print(f"  - {escape(str(problem))}", highlight=False)


def find_project_dir(start: Path) -> Path:
    """The nearest directory at or above `start` holding Pulumi.yaml, as the Pulumi CLI finds it."""
    for directory in (start, *start.parents):
        if (directory / "Pulumi.yaml").exists():
            return directory
    err.print(f"[red]error:[/] no Pulumi.yaml in {start} or any directory above it")
    raise typer.Exit(ExitCode.INVALID)
