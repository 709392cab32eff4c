"""gpuctl: the operator's command line, one sub-command per runbook.

Exit codes: runbooks.exit_codes.ExitCode, one table for every command (the README lists it).
"""

import importlib
from typing import Any

import typer
from typer import _click as click  # typer 0.29 runs its own copy of click; its classes are these, not the package's
from typer.core import TyperGroup

RUNBOOKS = {
    # name: (module, attribute): a command function, or a Typer app of sub-commands.
    "plan": ("runbooks.plan.cli", "plan"),
    "simulate": ("runbooks.simulate.cli", "simulate"),
    "report": ("runbooks.report.cli", "report"),
    "rollout": ("runbooks.rollout.cli", "app"),
    "flex": ("runbooks.flex.cli", "app"),
    "gateway": ("runbooks.gateway.cli", "app"),
    "health": ("runbooks.health.cli", "app"),
    "acceptance": ("runbooks.acceptance.cli", "app"),
    "mirror": ("runbooks.mirror.cli", "app"),
}
"""Each sub-command and where it lives, in the order --help lists them."""


class Runbooks(TyperGroup):
    """Imports a sub-command's runbook when it runs (all of them for --help): each imports its own dependencies, and
    all of them together took 1.7 s of CPU, 0.6 s more than `gpuctl plan` needs (matplotlib, slack-sdk, the
    Automation API, the simulator)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(RUNBOOKS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in RUNBOOKS:
            return None
        module, attribute = RUNBOOKS[cmd_name]
        runbook: Any = getattr(importlib.import_module(module), attribute)
        if isinstance(runbook, typer.Typer):
            group = typer.main.get_group(runbook)
            group.name = cmd_name
            return group
        single = typer.Typer(add_completion=False)
        single.command(name=cmd_name)(runbook)
        return typer.main.get_command(single)


app = typer.Typer(cls=Runbooks, no_args_is_help=True, help="Deliver and operate the GPU cluster.")


@app.callback()
def main() -> None:
    """Deliver and operate the GPU cluster."""
