"""gpuctl: the operator's command line, one sub-command per runbook.

Exit codes: runbooks.exit_codes.ExitCode, one table for every command (the README lists it).
"""

import typer

from runbooks.acceptance.cli import app as acceptance_app
from runbooks.flex.cli import app as flex_app
from runbooks.gateway.cli import app as gateway_app
from runbooks.health.cli import app as health_app
from runbooks.mirror.cli import app as mirror_app
from runbooks.plan.cli import plan
from runbooks.report.cli import report
from runbooks.rollout.cli import app as rollout_app
from runbooks.simulate.cli import simulate

app = typer.Typer(no_args_is_help=True, help="Deliver and operate the GPU cluster.")
app.command()(plan)
app.command()(simulate)
app.add_typer(rollout_app, name="rollout")
app.add_typer(flex_app, name="flex")
app.add_typer(gateway_app, name="gateway")
app.add_typer(health_app, name="health")
app.add_typer(acceptance_app, name="acceptance")
app.add_typer(mirror_app, name="mirror")
app.command()(report)


@app.callback()
def main() -> None:
    """Deliver and operate the GPU cluster."""
