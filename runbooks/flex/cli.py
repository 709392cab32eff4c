"""`gpuctl flex`: lend the flex pool to Kubernetes inference at a peak, take it back, see who has it.

Runs where an operator's `scontrol`/`squeue` reach slurmctld (SLURM_CONF as usual) and `kubectl` reaches the
cluster. Exit codes (runbooks.exit_codes.ExitCode): 0 every node asked for got there; 1 a command failed (Slurm or
kubectl unreachable); 2 bad input (not a flex node, bad spec); 3 some nodes did not get there yet (still draining,
pods not evicted, or drained by someone else: the output says which, and running the command again finishes it).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.flex.lending import CommandError, Flex, FlexError, NodeOutcome, run_command
from runbooks.options import ProjectDirOption, StackOption, site_or_exit

app = typer.Typer(no_args_is_help=True, help="Lend the flex pool to Kubernetes inference at a peak, and take it back.")

Nodes = Annotated[list[str] | None, typer.Option("--node", help="A flex node; repeat for more (default: all).")]
WaitMinutes = Annotated[float, typer.Option(min=0, help="How long to wait for jobs or pods to leave a node.")]


@dataclass
class Context:
    project_dir: Path
    stack: str


@app.callback()
def main(
    ctx: typer.Context,
    stack: StackOption = "prod",
    project_dir: ProjectDirOption = Path("."),
) -> None:
    """Lend the flex pool to Kubernetes inference at a peak, and take it back."""
    ctx.obj = Context(project_dir, stack)


def _flex(ctx: typer.Context) -> Flex:
    context: Context = ctx.obj
    site = site_or_exit(context.project_dir, context.stack)
    return Flex(site, run_command, run_command, lambda line: err.print(escape(line), highlight=False))


def _report(run: Callable[[], list[NodeOutcome]], require_done: bool = True) -> None:
    try:
        outcomes = run()
    except FlexError as error:
        err.print(f"[red]refused:[/] {escape(str(error))}")
        raise typer.Exit(ExitCode.INVALID) from None
    except CommandError as error:
        err.print(f"[red]failed:[/] {escape(str(error))}")
        raise typer.Exit(ExitCode.FAILED) from None
    for outcome in outcomes:
        out.print(f"{outcome.node}: {escape(outcome.detail)}", highlight=False)
    if require_done and not all(o.done for o in outcomes):
        raise typer.Exit(ExitCode.HELD)


@app.command()
def lend(ctx: typer.Context, node: Nodes = None, wait_minutes: WaitMinutes = 10) -> None:
    """Drain flex nodes in Slurm (requeueing the training inference preempts), then label them for inference."""
    flex = _flex(ctx)
    _report(lambda: flex.lend(node or [], wait_minutes * 60))


@app.command()
def reclaim(ctx: typer.Context, node: Nodes = None, wait_minutes: WaitMinutes = 10) -> None:
    """Unlabel lent nodes, evict their pods, then resume them in Slurm."""
    flex = _flex(ctx)
    _report(lambda: flex.reclaim(node or [], wait_minutes * 60))


@app.command()
def status(ctx: typer.Context) -> None:
    """Which scheduler has each flex node, with its Slurm state."""
    flex = _flex(ctx)
    _report(flex.status, require_done=False)
