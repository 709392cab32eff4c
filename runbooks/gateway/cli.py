"""`gpuctl gateway ensure-team|remove-team`: what `pulumi up` runs when a team is onboarded or rolled back.

The master key comes from the environment (LITELLM_MASTER_KEY, a Pulumi secret the stack passes), never a flag, so
it stays out of process listings and logs. ensure-team prints only the team's new key on stdout (the stack keeps it
as a secret and writes it into the team's namespace). An in-cluster URL is reached through `kubectl port-forward`
(runbooks/gateway/reach.py). Exit codes: 0 done, 1 the gateway failed or could not be reached, 2 bad input.
"""

import os
from typing import Annotated

import typer

from runbooks.console import err
from runbooks.exit_codes import ExitCode
from runbooks.gateway.reach import reachable
from runbooks.gateway.teams import GatewayAdmin, GatewayError, TeamAccount

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"

app = typer.Typer(no_args_is_help=True, help="A team's account (team, budget, key) on the LLM gateway.")

Url = Annotated[str, typer.Option("--url", help="The gateway's admin URL (inference.gateway.admin_url); an in-cluster "
                                                 "Service's is reached through `kubectl port-forward`.")]
TeamName = Annotated[str, typer.Option("--team", help="The team (teams[].name).")]


def _master_key() -> str:
    key = os.environ.get(MASTER_KEY_ENV, "")
    if not key:
        err.print(f"error: {MASTER_KEY_ENV} is not set (the gateway's master key)")
        raise typer.Exit(ExitCode.INVALID)
    return key


@app.command("ensure-team")
def ensure_team(
    url: Url,
    team: TeamName,
    budget_usd: Annotated[float, typer.Option(min=0, help="USD the team may spend per period.")],
    budget_days: Annotated[int, typer.Option(min=1, help="days of a budget period.")],
    model: Annotated[list[str], typer.Option("--model", help="A model the team may call; repeat for more.")],
) -> None:
    """Create or update the team with its budget and models, replace its key, print the key."""
    master_key = _master_key()
    try:
        with reachable(url) as reached:
            key = GatewayAdmin(reached, master_key).ensure(TeamAccount(team, budget_usd, budget_days, tuple(model)))
    except GatewayError as error:
        err.print(f"error: team {team}: {error}")
        raise typer.Exit(ExitCode.FAILED) from None
    print(key, end="")


@app.command("remove-team")
def remove_team(url: Url, team: TeamName) -> None:
    """Delete the team and its keys (nothing to do when it is not there)."""
    master_key = _master_key()
    try:
        with reachable(url) as reached:
            removed = GatewayAdmin(reached, master_key).remove(team)
    except GatewayError as error:
        err.print(f"error: team {team}: {error}")
        raise typer.Exit(ExitCode.FAILED) from None
    err.print(f"team {team}: {'removed' if removed else 'was not on the gateway'}")
