"""`gpuctl gateway ensure-team|remove-team|rotate-key`: what `pulumi up` runs when a team is onboarded, changed or
rolled back, and the operators' key rotation.

The master key comes from the environment (LITELLM_MASTER_KEY, a Pulumi secret the stack passes), never a flag, so
it stays out of process listings and logs. ensure-team prints only the team's key on stdout (the stack keeps it as a
secret and writes it into the team's namespace); on an update it keeps the key the team's workloads hold (the one the
stack's last run printed, which pulumi-command hands back as PULUMI_COMMAND_STDOUT, or one a rotation wrote into the
team's Secret since), so a budget change revokes nothing. rotate-key is the only command that replaces a live key,
and it writes a record to the rollout's audit log. An in-cluster URL is reached through `kubectl port-forward`
(runbooks/gateway/reach.py). Exit codes: 0 done, 1 the gateway or kubectl failed or could not be reached, 2 bad input.
"""

import getpass
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from components.inference.values import NAMESPACE, PLATFORM_KEY_SECRET, TEAM_KEY_SECRET
from components.site.wellknown import PLATFORM_ACCOUNT
from runbooks.console import err
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.gateway.key_secret import read_key, write_key
from runbooks.gateway.reach import reachable
from runbooks.gateway.teams import GatewayAdmin, GatewayError, TeamAccount
from runbooks.options import ProjectDirOption, StackOption, state_dir
from runbooks.rollout.store import StateUnavailableError, private_state_dir
from runbooks.stack.audit import AuditKeyError, AuditLog, audit_key

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
PREVIOUS_KEY_ENV = "PULUMI_COMMAND_STDOUT"
"""pulumi-command's copy of the last create or update's stdout, in an update's environment (its
add_previous_output_in_env, on by default): the key the stack handed out last."""

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


def _on_the_gateway(team: str) -> Endings:
    """A gateway or kubectl that failed ends the command naming the team (runbooks/failures.py)."""
    return {GatewayError: Ending(ExitCode.FAILED, what=f"team {team}")}


def key_secret(team: str) -> tuple[str, str]:
    """(name, namespace) of the Secret the account's workloads read its key from (components/inference/component.py)."""
    return (PLATFORM_KEY_SECRET, NAMESPACE) if team == PLATFORM_ACCOUNT else (TEAM_KEY_SECRET, team)


def _held(team: str) -> Iterator[str]:
    """The keys the team's workloads may hold, newest source last; nothing on a create (no key was handed out)."""
    previous = os.environ.get(PREVIOUS_KEY_ENV, "")
    if not previous:
        return
    yield previous
    # Asked only when the stack's key is no longer live: a rotation has written a newer one into the Secret.
    current = read_key(*key_secret(team))
    if current and current != previous:
        yield current


@app.command("ensure-team")
def ensure_team(
    url: Url,
    team: TeamName,
    budget_usd: Annotated[float, typer.Option(min=0, help="USD the team may spend per period.")],
    budget_days: Annotated[int, typer.Option(min=1, help="days of a budget period.")],
    model: Annotated[list[str], typer.Option("--model", help="A model the team may call; repeat for more.")],
) -> None:
    """Create or update the team with its budget and models in place, keep its live key (or make one), print it."""
    master_key = _master_key()
    with exit_on_failure(_on_the_gateway(team)), reachable(url) as reached:
        key, new = GatewayAdmin(reached, master_key).ensure(
            TeamAccount(team, budget_usd, budget_days, tuple(model)), _held(team))
    err.print(f"team {team}: budget {budget_usd:g} USD per {budget_days} d, {len(model)} models; "
              f"{'a new key (none of its keys was live)' if new else 'its key kept'}")
    print(key, end="")


@app.command("remove-team")
def remove_team(url: Url, team: TeamName) -> None:
    """Delete the team and its keys (nothing to do when it is not there)."""
    master_key = _master_key()
    with exit_on_failure(_on_the_gateway(team)), reachable(url) as reached:
        removed = GatewayAdmin(reached, master_key).remove(team)
    err.print(f"team {team}: {'removed' if removed else 'was not on the gateway'}")


@app.command("rotate-key")
def rotate_key(
    url: Url,
    team: TeamName,
    stack: StackOption = "prod",
    project_dir: ProjectDirOption = Path("."),
    rollout_state_dir: Annotated[Path | None, typer.Option(
        help="The rollout's state dir, whose audit log records the rotation; default <project>/.gpuctl/rollout-"
             "<stack>.")] = None,
) -> None:
    """Give the team a new key, write it into the Secret its workloads read, then revoke the old one; audited."""
    master_key = _master_key()
    audited = rollout_state_dir or state_dir(project_dir, stack, "rollout")
    unusable = Ending(ExitCode.INVALID)
    with exit_on_failure({AuditKeyError: unusable, StateUnavailableError: unusable, OSError: unusable}):
        private_state_dir(audited)  # the rollout's own rule: a folder only its owner can put names in
        audit = AuditLog(audited / "audit.jsonl", audit_key(audited))
    who, (name, namespace) = getpass.getuser(), key_secret(team)
    where = {"team": team, "secret": f"{namespace}/{name}"}
    with exit_on_failure(_on_the_gateway(team)):
        try:
            with reachable(url) as reached:
                admin = GatewayAdmin(reached, master_key)
                key = admin.start_rotation(team)
                try:
                    write_key(name, namespace, key)
                except GatewayError:
                    admin.abort_rotation(team)  # the old key stays the team's: nothing half-done
                    raise
                revoked = admin.finish_rotation(team, key)
        except GatewayError as error:
            audit.append(who=who, what="gateway.rotate_key", decision="failed", detail={**where, "error": str(error)})
            raise
    # The key's hash prefix, as LiteLLM's hashed_api_key label starts: which key is meant, never the key.
    audit.append(who=who, what="gateway.rotate_key", decision="rotated", detail={
        **where, "revoked_keys": revoked, "key_sha256": hashlib.sha256(key.encode()).hexdigest()[:12]})
    err.print(f"team {team}: a new key is in Secret {namespace}/{name}; {revoked} old key(s) revoked")
