"""`gpuctl flex`: lend the flex pool to Kubernetes inference at a peak, take it back, see who has it; `control` does
it on its own from live demand (runbooks/flex/controller.py), `pause` and `resume` stop and restart its moves.

Runs where an operator's `scontrol`/`squeue` reach slurmctld (SLURM_CONF as usual) and `kubectl` reaches the
cluster. Exit codes (runbooks.exit_codes.ExitCode): 0 every node asked for got there; 1 a command failed (Slurm or
kubectl unreachable); 2 bad input (not a flex node, bad spec); 3 some nodes did not get there yet (still draining,
pods not evicted, or drained by someone else: the output says which, and running the command again finishes it), or
a lend or reclaim was refused while the controller (or another operator) moves flex nodes (the output names who).
lend and reclaim hold the controller's moves lock while they run and write an audit line to its decisions.jsonl.
"""

import getpass
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from components.scheduling.lending_decision import Signals, lent_models
from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.flex.controller import LOCK, MOVES_LOCK, Controller, Store
from runbooks.flex.lease import Lease, holder_line
from runbooks.flex.lending import CommandError, Flex, FlexError, NodeOutcome, run_command
from runbooks.flex.metrics import Metrics, serve
from runbooks.flex.signals import PrometheusDemand
from runbooks.options import StackContext, stack_options

app = typer.Typer(no_args_is_help=True, help="Lend the flex pool to Kubernetes inference at a peak, and take it back.",
                  callback=stack_options)

Nodes = Annotated[list[str] | None, typer.Option("--node", help="A flex node; repeat for more (default: all).")]
WaitMinutes = Annotated[float, typer.Option(min=0, help="How long to wait for jobs or pods to leave a node.")]
StateDir = Annotated[Path | None, typer.Option(help="The controller's state dir (default: the spec's "
                                                    "lending.state_dir).")]


MOVES: Endings = {
    FlexError: Ending(ExitCode.INVALID, "refused"),
    CommandError: Ending(ExitCode.FAILED, "failed"),
}
"""How a move or a look at the flex nodes ends on the errors it expects (runbooks/failures.py)."""


def _flex(ctx: typer.Context) -> Flex:
    context: StackContext = ctx.obj
    return Flex(context.site, run_command, run_command, lambda line: err.print(escape(line), highlight=False))


def _report(run: Callable[[], list[NodeOutcome]], require_done: bool = True) -> None:
    with exit_on_failure(MOVES):
        outcomes = run()
    for outcome in outcomes:
        out.print(f"{outcome.node}: {escape(outcome.detail)}", highlight=False)
    if require_done and not all(o.done for o in outcomes):
        raise typer.Exit(ExitCode.HELD)


def _manual(ctx: typer.Context, action: str, move: Callable[[Flex], list[NodeOutcome]],
            state_dir: Path | None, nodes: list[str]) -> None:
    """Runs a move by hand under the controller's moves lock, or refuses (exit 3) naming who holds it; audits it."""
    flex = _flex(ctx)
    store, by = _store(flex, state_dir), getpass.getuser()
    lease = Lease(store.directory / MOVES_LOCK)
    holder = lease.try_acquire(holder_line(f"gpuctl flex {action} by {by}"))
    if holder is not None:
        err.print(f"[red]refused:[/] {escape(holder)} is moving flex nodes ({lease.path}): run it again once that "
                  "is done, or `gpuctl flex pause` the controller first")
        raise typer.Exit(ExitCode.HELD)

    def audited() -> list[NodeOutcome]:
        try:
            outcomes = move(flex)
        except (FlexError, CommandError) as error:
            store.audit_manual(action, by, nodes, [], str(error))
            raise
        store.audit_manual(action, by, [o.node for o in outcomes], outcomes)
        return outcomes

    try:
        _report(audited)
    finally:
        lease.release()


@app.command()
def lend(ctx: typer.Context, node: Nodes = None, wait_minutes: WaitMinutes = 10, state_dir: StateDir = None) -> None:
    """Drain flex nodes in Slurm (requeueing the training inference preempts), then label them for inference."""
    _manual(ctx, "lend", lambda flex: flex.lend(node or [], wait_minutes * 60), state_dir, node or [])


@app.command()
def reclaim(ctx: typer.Context, node: Nodes = None, wait_minutes: WaitMinutes = 10,
            state_dir: StateDir = None) -> None:
    """Unlabel lent nodes, evict their pods, then resume them in Slurm."""
    _manual(ctx, "reclaim", lambda flex: flex.reclaim(node or [], wait_minutes * 60), state_dir, node or [])


@app.command()
def status(ctx: typer.Context, state_dir: StateDir = None) -> None:
    """Which scheduler has each flex node, with its Slurm state; what the controller decided last, and why."""
    flex = _flex(ctx)
    _report(flex.status, require_done=False)
    store = _store(flex, state_dir)
    paused = store.paused()
    if paused:
        out.print(f"controller: paused by {escape(str(paused.get('by')))} at {paused.get('at', '?')}: "
                  f"{escape(str(paused.get('reason')))}", highlight=False)
    with exit_on_failure({ValueError: Ending(ExitCode.FAILED)}):
        last = store.last()
    if last is None:
        out.print(f"controller: no decision recorded in {store.directory}", highlight=False)
        return
    nodes = f" {', '.join(last['nodes'])}" if last.get("nodes") else ""
    out.print(f"controller: last decision at {last.get('at')} ({last.get('mode')}): {last.get('action')}{nodes} "
              f"({last.get('reason')}): {escape(str(last.get('detail')))}", highlight=False)


def _store(flex: Flex, state_dir: Path | None) -> Store:
    return Store(state_dir or Path(flex.site.lending.state_dir))


@app.command()
def control(ctx: typer.Context, dry_run: Annotated[bool, typer.Option(help="Decide and audit, move nothing.")] = False,
            listen: Annotated[str | None, typer.Option(help="Address /metrics is served on (default: the spec's "
                                                          "lending.metrics_address).")] = None,
            port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port /metrics is served on (default: "
                                                     "the spec's lending.metrics_port).")] = None,
            state_dir: StateDir = None) -> None:
    """Lend and reclaim on its own from live demand, one instance at a time (the stack runs it on the Slurm
    controller: docs/scheduling.md)."""
    flex = _flex(ctx)
    store = _store(flex, state_dir)
    Lease(store.directory / LOCK).acquire(lambda line: err.print(escape(line), highlight=False))
    metrics = Metrics()
    serve(metrics.render, listen or flex.site.lending.metrics_address, port or flex.site.lending.metrics_port)
    lending = flex.site.lending
    reader = PrometheusDemand(lending.prometheus_url, latency=lending.ttft_objective_s is not None,
                              models=lent_models(flex.site))

    def demand() -> Signals:
        signals = reader.read()
        for why in reader.errors:
            err.print(f"no data: {escape(why)}", highlight=False)
        return signals

    # Audit lines go to stdout unwrapped (the journal keeps them whole).
    controller = Controller(flex.site, flex, demand, store, metrics, dry_run, say=lambda line: print(line, flush=True))
    controller.run(stop=lambda: False)


@app.command()
def pause(ctx: typer.Context, reason: Annotated[str, typer.Option(help="Why, for status and the audit.")],
          state_dir: StateDir = None) -> None:
    """Keep the controller deciding and auditing, but moving nothing, until `resume`."""
    if not reason.strip() or "\n" in reason:
        err.print("[red]refused:[/] --reason must be one non-empty line")
        raise typer.Exit(ExitCode.INVALID)
    store = _store(_flex(ctx), state_dir)
    store.pause(getpass.getuser(), reason.strip())
    out.print(f"paused: the controller moves nothing until `gpuctl flex resume` ({store.directory})",
              highlight=False)


@app.command()
def resume(ctx: typer.Context, state_dir: StateDir = None) -> None:
    """Let a paused controller move again."""
    store = _store(_flex(ctx), state_dir)
    out.print("resumed" if store.resume() else "the controller was not paused", highlight=False)
