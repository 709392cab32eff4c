"""What every operator command shares about its stack: the --stack and --project-dir options, the site read once
(Pulumi.<stack>.yaml parsed, or exit 2 saying why), and where each runbook keeps the stack's state."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import typer

from components.site.site import Site
from components.validate import parse_site
from runbooks.console import err
from runbooks.exit_codes import ExitCode
from runbooks.failures import exit_on_failure
from runbooks.offline.engine import load_stack_config

StackOption = Annotated[str, typer.Option(help="Stack whose Pulumi.<stack>.yaml describes the site.")]
ProjectDirOption = Annotated[Path, typer.Option(help="Directory holding Pulumi.yaml.")]
StateKind = Literal["rollout", "acceptance"]


def site_or_exit(project_dir: Path, stack: str) -> Site:
    with exit_on_failure(stack=stack):
        site = parse_site(*load_stack_config(project_dir, stack).project_values())
    return site


def state_dir(project_dir: Path, stack: str, kind: StateKind) -> Path:
    """Where a runbook keeps a stack's state unless told otherwise (--state-dir): the rollout's store, audit log and
    saved plans; the acceptance campaign's store, failure log and reports."""
    return project_dir / ".gpuctl" / f"{kind}-{stack}"


@dataclass
class StackContext:
    """What a sub-app's callback hands its commands (ctx.obj): the project, the stack, the state dirs the command
    line named; the site is read when a command first asks, once."""

    project_dir: Path
    stack: str
    state_dirs: dict[StateKind, Path | None] = field(default_factory=dict)
    """A runbook's state dir given on the command line; `state_dir` is the default of one not given."""
    _site: Site | None = field(default=None, repr=False)

    @property
    def site(self) -> Site:
        if self._site is None:
            self._site = site_or_exit(self.project_dir, self.stack)
        return self._site

    def state_dir(self, kind: StateKind) -> Path:
        return self.state_dirs.get(kind) or state_dir(self.project_dir, self.stack, kind)


def stack_options(ctx: typer.Context, stack: StackOption = "prod", project_dir: ProjectDirOption = Path(".")) -> None:
    """The callback of a sub-app whose commands share --stack and --project-dir (typer.Typer(callback=...))."""
    ctx.obj = StackContext(project_dir, stack)


def find_project_dir(start: Path) -> Path:
    """The nearest directory at or above `start` holding Pulumi.yaml, as the Pulumi CLI finds it."""
    for directory in (start, *start.parents):
        if (directory / "Pulumi.yaml").exists():
            return directory
    err.print(f"[red]error:[/] no Pulumi.yaml in {start} or any directory above it")
    raise typer.Exit(ExitCode.INVALID)
