"""`gpuctl health`: the node health controller (`control`, runbooks/health/controller.py) and what it holds
(`status`).

`control` runs on the Slurm controller (the stack's unit: docs/health.md), where `scontrol` reaches slurmctld, kubectl
reaches the cluster with health.kubeconfig and ssh reaches the nodes with health.ssh_key. Exit codes
(runbooks.exit_codes.ExitCode): 0 done; 1 a command failed or a file did not read; 2 bad input (bad spec).
"""

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, exit_on_failure
from runbooks.flex.controller import MOVES_LOCK
from runbooks.flex.lease import Lease, holder_line
from runbooks.flex.lending import run_command
from runbooks.flex.metrics import serve
from runbooks.health.controller import AUDIT, LOCK, Controller, Store
from runbooks.health.diagnose import Diagnoser, ssh_command
from runbooks.health.metrics import Metrics
from runbooks.health.nodes import Nodes
from runbooks.health.signals import read_findings
from runbooks.options import StackContext, stack_options

app = typer.Typer(no_args_is_help=True, help="Drain, diagnose and return GPU nodes on their DCGM signals.",
                  callback=stack_options)

StateDir = Annotated[Path | None, typer.Option(help="The controller's state dir (default: the spec's "
                                                    "health.state_dir).")]


@app.command()
def control(ctx: typer.Context, dry_run: Annotated[bool, typer.Option(help="Decide and audit, move nothing.")] = False,
            listen: Annotated[str | None, typer.Option(help="Address /metrics is served on (default: the spec's "
                                                          "health.metrics_address).")] = None,
            port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port /metrics is served on (default: "
                                                     "the spec's health.metrics_port).")] = None,
            state_dir: StateDir = None) -> None:
    """Watch every GPU node and drain, diagnose, return or hand it to a human, one instance at a time (the stack runs
    it on the Slurm controller: docs/health.md)."""
    context: StackContext = ctx.obj
    site = context.site
    health = site.health
    store = Store(state_dir or Path(health.state_dir))
    lease, told = Lease(store.directory / LOCK), ""
    while (holder := lease.try_acquire(holder_line("the health controller"))) is not None:
        if holder != told:
            err.print(escape(f"waiting: {holder} holds {lease.path}"), highlight=False)
            told = holder
        time.sleep(1.0)
    metrics = Metrics()
    serve(metrics.render, listen or health.metrics_address, port or health.metrics_port)

    def say(line: str) -> None:
        print(line, flush=True)  # the journal keeps audit lines whole

    nodes = Nodes(site, run_command, run_command, say)
    controller = Controller(site, nodes, lambda: read_findings(site, health.prometheus_url),
                            Diagnoser(site, store.directory, ssh_command(site)), store, metrics, dry_run, say,
                            moves_lock=Path(site.lending.state_dir) / MOVES_LOCK)
    controller.run(stop=lambda: False)


@app.command()
def status(ctx: typer.Context, state_dir: StateDir = None) -> None:
    """What the controller decided last for each node it watches, and why."""
    context: StackContext = ctx.obj
    path = (state_dir or Path(context.site.health.state_dir)) / AUDIT
    unreadable = Ending(ExitCode.FAILED, what=str(path))
    with exit_on_failure({OSError: unreadable, ValueError: unreadable}):
        last = _last_step(path)
    if not isinstance(last, dict):
        out.print(f"controller: no decision recorded in {path}", highlight=False)
        return
    out.print(f"controller: last step at {last.get('at')} ({last.get('mode')}): {escape(str(last.get('detail')))}",
              highlight=False)
    for node in last.get("nodes") or []:
        if isinstance(node, dict):
            out.print(f"{escape(str(node.get('node')))}: {node.get('action')} ({node.get('reason')}): "
                      f"{escape(str(node.get('detail')))}", highlight=False)


def _last_step(path: Path) -> Any:
    """The audit's last line, parsed; None before the controller's first step."""
    try:
        with path.open("rb") as audit:
            audit.seek(max(0, audit.seek(0, 2) - (1 << 20)))  # the last MiB holds the last step
            lines = audit.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    return json.loads(lines[-1]) if lines else None
