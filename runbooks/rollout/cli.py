"""`gpuctl rollout`: status, request <stage>, wait, apply, rollback.

Exit codes (runbooks.exit_codes.ExitCode): 0 done; 1 the program failed; 2 the command does not apply (wrong stage,
nothing open, bad spec); 3 held (no passed acceptance campaign for the deployed stack, soak, gates or approvals: run
it again later); 4 the rollout ended without advancing (rejected, failed, rolled back). Secrets come from the
environment and are never printed: SLACK_BOT_TOKEN (chat:write, usergroups:read, channels:history), SLACK_USER_TOKEN
(the requester's own user token: Slack says who requests), SLACK_APP_TOKEN (Socket Mode, connections:write),
SLACK_SIGNING_SECRET (HTTP receiver), GPUCTL_AUDIT_KEY (the audit log's key; else the file GPUCTL_AUDIT_KEY_FILE
names, default /etc/gpucluster/audit.key, apart from the state dir);
SLACK_API_URL overrides the Web API base URL.
"""

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pulumi import automation as auto
from rich.markup import escape

from components.site.site import Site, SlackReceiver
from runbooks.console import err, out
from runbooks.exit_codes import ExitCode
from runbooks.failures import Ending, Endings, exit_on_failure
from runbooks.options import ProjectDirOption, StackContext, StackOption
from runbooks.rollout.approvals import IdentityError, SlackApprovals, token_owner, web_client
from runbooks.rollout.gates import PrometheusGates
from runbooks.rollout.machine import (
    RolloutHaltedError,
    RolloutMachine,
    RolloutRefusedError,
    StepEvent,
    StepHeldError,
)
from runbooks.rollout.receivers import ClickInbox, HttpReceiver, SocketModeReceiver
from runbooks.rollout.store import RolloutState, StateCorruptError, StateUnavailableError, Store
from runbooks.stack import deploy
from runbooks.stack.audit import AuditChainBrokenError, AuditKeyError, AuditLog, audit_key
from runbooks.stack.deploy import StackDeployer
from runbooks.stack.lock import StackLock

app = typer.Typer(no_args_is_help=True, help="Staged rollout canary -> half -> full with Slack approvals.")


def now() -> datetime:
    return datetime.now(UTC)


@app.callback()
def main(
    ctx: typer.Context,
    stack: StackOption = "prod",
    project_dir: ProjectDirOption = Path("."),
    state_dir: Annotated[Path | None, typer.Option(
        help="Rollout state (SQLite), audit log and saved plans; default <project>/.gpuctl/rollout-<stack>.")] = None,
) -> None:
    """Staged rollout canary -> half -> full with Slack approvals."""
    ctx.obj = StackContext(project_dir, stack, {"rollout": state_dir})


def _final_state(error: Exception) -> str:
    assert isinstance(error, RolloutHaltedError)
    return error.state.value


ENDINGS: Endings = {
    RolloutRefusedError: Ending(ExitCode.INVALID, "refused"),
    StepHeldError: Ending(ExitCode.HELD, "held", "yellow"),
    RolloutHaltedError: Ending(ExitCode.ENDED, _final_state),
    StateUnavailableError: Ending(ExitCode.INVALID, hint="--state-dir must be a directory gpuctl can write"),
    StateCorruptError: Ending(ExitCode.FAILED),
    AuditKeyError: Ending(ExitCode.INVALID),
    AuditChainBrokenError: Ending(ExitCode.FAILED, "audit log tampered"),
    IdentityError: Ending(ExitCode.INVALID),
}
"""How each rollout command ends on the errors it expects (runbooks/failures.py)."""


def _machine(ctx: typer.Context, slack_required: bool = True) -> tuple[RolloutMachine, Site]:
    context: StackContext = ctx.obj
    site, state_dir = context.site, context.state_dir("rollout")
    store = Store(state_dir / "rollout.sqlite")
    ctx.call_on_close(store.close)
    audit = AuditLog(state_dir / "audit.jsonl", audit_key(state_dir), store)
    try:
        deployer = StackDeployer.open(context.project_dir, context.stack, site.rollout.policy_pack,
                                      deploy.pulumi_command())
    except FileNotFoundError:
        # The Automation API drives the real CLI; without it nothing about the stack can be known.
        err.print("[red]error:[/] the Pulumi CLI (`pulumi`) is not on PATH: `gpuctl rollout` reads and updates the "
                  "stack through it (https://www.pulumi.com/docs/install/). `gpuctl plan` works without it.")
        raise typer.Exit(ExitCode.INVALID) from None
    except auto.CommandError as error:
        err.print(f"[red]error:[/] pulumi could not open stack {context.stack}: {escape(str(error).strip()[-300:])}")
        raise typer.Exit(ExitCode.INVALID) from None
    gates = PrometheusGates(site.rollout.prometheus_url, site.rollout.gates, site.rollout.gate_window_minutes, now)
    token = os.environ.get("SLACK_BOT_TOKEN")
    if token is None and slack_required:
        err.print("[red]error:[/] SLACK_BOT_TOKEN is not set (approvals need Slack; `rollback` does not)")
        raise typer.Exit(ExitCode.INVALID)
    lock = StackLock(state_dir / f"{context.stack}.lock")
    machine = RolloutMachine(site, store, audit, deployer, gates, None, state_dir / "plans", now, lock, _progress)
    if token is not None:
        client = web_client(token, os.environ.get("SLACK_API_URL"))
        machine.approvals = SlackApprovals(client, site.slack, store, audit, now, machine.teams_of)
    return machine, site


def _progress(event: StepEvent) -> None:
    if event.phase == "begin":
        err.print(f"[dim]{event.rollout}:[/] {event.step} ...", highlight=False)


@app.command()
@exit_on_failure(ENDINGS)
def status(ctx: typer.Context) -> None:
    """Where the rollout stands: deployed stage and soak, the open request, approvals, gates, audit chain."""
    machine, site = _machine(ctx, slack_required=False)
    state = machine.status()
    clock = now()
    if state.deployed_stage is None:
        out.print(f"[bold]stack {ctx.obj.stack}[/]: no stage deployed yet")
    else:
        soaked = (clock - state.live_since).total_seconds() / 86400 if state.live_since else 0.0
        since = f"live since {state.live_since:%Y-%m-%d %H:%M} UTC" if state.live_since else "live since: unknown"
        out.print(f"[bold]stack {ctx.obj.stack}[/]: stage {state.deployed_stage} deployed, {since} "
                  f"({soaked:.1f} of {state.soak_days} soak days)", highlight=False)
    if state.next_stage is not None:
        new, total = machine.teams_of(state.next_stage)
        out.print(f"next stage: {state.next_stage} (onboards {', '.join(new)}; {len(total)} of "
                  f"{len(site.teams)} teams)", highlight=False)
    out.print(f"acceptance: {escape(state.acceptance)}", highlight=False)
    rollout = state.rollout
    if rollout is not None:
        out.print(f"rollout [bold]{rollout.id}[/] {rollout.from_stage} -> {rollout.to_stage}: {rollout.state.value}, "
                  f"requested by {rollout.requester} at {rollout.requested_at:%Y-%m-%d %H:%M} UTC", highlight=False)
        if rollout.plan_digest:
            out.print(f"  plan      {rollout.plan_digest}", highlight=False)
        if rollout.state in (RolloutState.AWAITING_APPROVAL, RolloutState.APPROVED, RolloutState.APPLYING,
                             RolloutState.DONE):
            out.print(f"  approvals {len(state.approvers)} of {state.approvals_required}"
                      f"{': ' + ', '.join(state.approvers) if state.approvers else ''}", highlight=False)
        if rollout.gates:
            out.print(f"  gates     at {rollout.gates['at'][:16].replace('T', ' ')} UTC", highlight=False)
            for gate in rollout.gates["results"]:
                out.print(f"    {gate['verdict']:<12} {gate['gate']:<21} {escape(gate['reason'])}", highlight=False)
        if state.steps:
            out.print("  steps     " + ", ".join(
                f"{s.step} {'done' if s.finished_at else 'started'}" for s in state.steps), highlight=False)
        if rollout.hold:
            out.print(f"  [yellow]held[/]      {escape(rollout.hold)}", highlight=False)
    report = machine.verify_audit(state.rollout)
    anchors = f"; matches {' and '.join(report.anchors)}" if report.anchors else ""
    out.print(f"audit: {report.records} records, keyed chain intact{anchors}", highlight=False)
    if report.torn_bytes:
        err.print(f"[yellow]audit:[/] the last line is torn ({report.torn_bytes} bytes: a write cut short, it never "
                  "counted); the next record sets it aside in audit.jsonl.torn", highlight=False)


@app.command()
@exit_on_failure(ENDINGS)
def request(
    ctx: typer.Context,
    stage: Annotated[str, typer.Argument(help="The stage to advance to (the one after the deployed stage).")],
) -> None:
    """Check soak and gates, preview and save the plan, post the approval request to Slack (resumable).

    The requester is whoever owns SLACK_USER_TOKEN (your own Slack user token), as Slack says: you cannot
    approve your own request."""
    machine, site = _machine(ctx)
    user_token = os.environ.get("SLACK_USER_TOKEN")
    if not user_token:
        err.print("[red]error:[/] SLACK_USER_TOKEN is not set: `request` runs with your own Slack user token, so "
                  "that Slack, not a flag, says who requests")
        raise typer.Exit(ExitCode.INVALID)
    requester = token_owner(web_client(user_token, os.environ.get("SLACK_API_URL")), site.slack.workspace_id,
                            "SLACK_USER_TOKEN")
    rollout = machine.request(stage, requester)
    out.print(f"{rollout.id}: awaiting approval in {rollout.channel} (plan {rollout.plan_digest})", highlight=False)


def _listen_address(value: str | None) -> str | None:
    """host:port, the port a number from 1 to 65535 (an IPv6 host in brackets)."""
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise typer.BadParameter(f"{value!r} is not host:port with a port from 1 to 65535")
    return value


def _said(value: str) -> str:
    """A name or a reason the audit log keeps: not empty, one line."""
    if not value.strip() or "\n" in value or "\r" in value:
        raise typer.BadParameter("must be one non-empty line: the audit log records it")
    return value


@app.command()
@exit_on_failure(ENDINGS)
def wait(
    ctx: typer.Context,
    timeout_s: Annotated[float, typer.Option("--timeout", help="seconds to wait for the decision.")] = 3600,
    listen: Annotated[str | None, typer.Option(help="host:port for the HTTP receiver, behind the TLS ingress "
                                                    "(default: the spec's slack.receiver_address and receiver_port).",
                                               callback=_listen_address)] = None,
) -> None:
    """Receive Approve/Reject clicks (Socket Mode or HTTP, per slack.receiver) until the request is decided."""
    machine, site = _machine(ctx)
    assert machine.approvals is not None
    inbox = ClickInbox(machine.store, machine.approvals, now)
    receiver: SocketModeReceiver | HttpReceiver
    if site.slack.receiver == SlackReceiver.SOCKET_MODE:
        app_token = os.environ.get("SLACK_APP_TOKEN")
        if app_token is None:
            err.print("[red]error:[/] SLACK_APP_TOKEN is not set (Socket Mode needs an app-level token)")
            raise typer.Exit(ExitCode.INVALID)
        receiver = SocketModeReceiver(app_token, machine.approvals.client, inbox)
    else:
        secret = os.environ.get("SLACK_SIGNING_SECRET")
        if secret is None:
            err.print("[red]error:[/] SLACK_SIGNING_SECRET is not set (the HTTP receiver verifies every request)")
            raise typer.Exit(ExitCode.INVALID)
        host, _, port = listen.rpartition(":") if listen else (site.slack.receiver_address, ":",
                                                                 str(site.slack.receiver_port))
        with exit_on_failure({OSError: Ending(ExitCode.FAILED, what=f"cannot listen on {host}:{port}")}):
            receiver = HttpReceiver(secret, inbox, machine.store, machine.audit, host.strip("[]"), int(port))
        err.print(f"listening on {receiver.url}")
    rollout = machine.wait(receiver, timeout_s)
    out.print(f"{rollout.id}: {rollout.state.value}", highlight=False)
    if rollout.state == RolloutState.REJECTED:
        raise typer.Exit(ExitCode.ENDED)
    if rollout.state == RolloutState.AWAITING_APPROVAL:
        raise typer.Exit(ExitCode.HELD)


@app.command()
@exit_on_failure(ENDINGS)
def apply(ctx: typer.Context) -> None:
    """Re-check approvers, plan digest and gates, then `pulumi up` the approved plan with the policy pack."""
    machine, _ = _machine(ctx)
    rollout = machine.apply()
    out.print(f"{rollout.id}: {rollout.state.value}; outputs {rollout.outputs}", highlight=False)
    if rollout.state != RolloutState.DONE:
        raise typer.Exit(ExitCode.ENDED)


@app.command()
@exit_on_failure(ENDINGS)
def rollback(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", help="The earlier stage to go back to.")],
    operator: Annotated[str, typer.Option(help="Who is breaking the glass (recorded in the audit log).",
                                          callback=_said)],
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).", callback=_said)],
) -> None:
    """Break-glass: deploy an earlier stage now, without Slack; audited."""
    machine, _ = _machine(ctx, slack_required=False)
    rollout = machine.rollback(to, operator, reason)
    out.print(f"{rollout.id}: {rollout.state.value} to {to}; outputs {rollout.outputs}", highlight=False)
