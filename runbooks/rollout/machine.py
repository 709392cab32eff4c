"""The rollout state machine: canary -> half -> full, one advance at a time, as named, recorded steps.

request <stage>: check_acceptance, then check_soak, check_gates, preview, post_request -> awaiting_approval
wait:            Slack clicks until approvals_required approve or one rejects -> approved | rejected
apply:           check_plan, check_approvals, check_gates, deploy, verify   -> done | rolled_back
rollback:        break-glass, no Slack: converge the stack on an earlier stage -> rolled_back

Each step is recorded started before it runs and finished (with its effect on the rollout, in the same
transaction) after; a resumed command skips finished steps, except the checks that guard a deploy: until
the deploy has finished, every `apply` runs them again, from the plan's bytes and the audit log as they are
now. The one step that must never run twice, deploy, looks for its own update in the stack history (by the
update's message) before running `up`, and deploys the very bytes it compared with the approved digest.
A temporary condition (soak not over, a gate failing or inconclusive, too few approvals, the stack locked by
another update) holds the step: the command exits and the step runs again next time. A permanent one ends
the rollout. `request`, `apply` and `rollback` hold the stack's lock while they run: one at a time.
Every outcome is in the audit log before the state records it.
"""

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from pulumi.automation import CommandError
from slack_sdk.errors import SlackApiError, SlackClientError

from components.site.acceptance import SHOCK_MINUTES, SOAK_H
from components.site.site import Site
from runbooks.rollout.approvals import SlackApprovals
from runbooks.rollout.gates import GateSnapshot, PrometheusGates, Verdict
from runbooks.rollout.receivers import ClickInbox
from runbooks.rollout.store import Rollout, RolloutState, Step, Store
from runbooks.stack.audit import ACCEPTANCE_RECORD, AuditChainBrokenError, AuditLog, ChainHead, ChainReport
from runbooks.stack.deploy import STACK_LOCKED, Deployment, StackDeployer, plan_digest
from runbooks.stack.lock import StackLock, StackLockedError

REQUEST_STEPS = ("check_soak", "check_gates", "preview", "post_request")
APPLY_STEPS = ("check_plan", "check_approvals", "check_gates_before_apply", "deploy", "verify")
APPLY_GUARDS = APPLY_STEPS[:3]
"""Run again by every `apply` until the deploy has finished: what they found last time proves nothing now."""
REQUIRED_CRITERIA = ("soak soak duration", "shock shock duration", "campaign continuity",
                     "soak inference p95 latency", "shock inference p95 latency", "soak inference errors",
                     "shock inference errors", "shock storage p99 latency", "shock lending controller",
                     "shock training yields to inference",
                     "shock inference load", "shock storage load", "shock training load",
                     "campaign training jobs refused", "campaign training jobs lost", "campaign training GPU-seconds")
"""Criteria (phase and name) a campaign's verdict must have judged, and passed, to count; with one per drill."""
ROLLBACK_STEP = "rollback"
BREAK_GLASS_PREFIX = "rollback-"


class RolloutRefusedError(Exception):
    """The command does not apply to the rollout as it stands (wrong stage, nothing to apply)."""


class StepHeldError(Exception):
    """Temporary: the step waits for time, health or approvals; run the command again later."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f'held at "{step}" step: {reason}')
        self.step, self.reason = step, reason


class RolloutHaltedError(Exception):
    """Permanent: the rollout ended in `state`; a new request is needed."""

    def __init__(self, step: str, reason: str, state: RolloutState) -> None:
        super().__init__(f'failed "{step}" step: {reason}')
        self.step, self.reason, self.state = step, reason, state


class _HoldError(Exception):
    def __init__(self, reason: str, **changes: Any) -> None:
        super().__init__(reason)
        self.changes = changes


class _UpdateFailedError(Exception):
    pass


class _HaltError(Exception):
    def __init__(self, reason: str, state: RolloutState = RolloutState.FAILED) -> None:
        super().__init__(reason)
        self.state = state


@dataclass(frozen=True)
class StepEvent:
    rollout: str
    step: str
    phase: str
    """"begin" once the start is recorded; "end" once it ran, before the finish is recorded."""


@dataclass(frozen=True)
class StepResult:
    detail: dict[str, Any]
    changes: dict[str, Any] = dataclasses.field(default_factory=dict)
    rollback: str | None = None
    """Why the rollout must roll back (the deploy failed or did not verify)."""


class Receiver(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class Status:
    deployed_stage: str | None
    live_since: datetime | None
    soak_days: int
    next_stage: str | None
    rollout: Rollout | None
    steps: list[Step]
    approvers: list[str]
    approvals_required: int
    acceptance: str
    """Whether a passed acceptance campaign exists for the deployed stack, and which (or what to do)."""


class RolloutMachine:
    def __init__(self, site: Site, store: Store, audit: AuditLog, deployer: StackDeployer, gates: PrometheusGates,
                 approvals: SlackApprovals | None, plans_dir: Path, clock: Callable[[], datetime], lock: StackLock,
                 events: Callable[[StepEvent], None] = lambda _: None) -> None:
        self.site, self.store, self.audit, self.deployer = site, store, audit, deployer
        self.gates, self.approvals, self.plans_dir, self.clock, self.events = gates, approvals, plans_dir, clock, events
        self.lock = lock
        self.order = [s.name for s in site.stages]

    # --- commands ------------------------------------------------------------------------------

    def request(self, stage: str, requester: str) -> Rollout:
        """Start (or resume) the request to advance to `stage`; returns it awaiting approval.

        `requester` is the Slack user Slack says runs this (the owner of their token), never a name typed in."""
        if not requester.strip():
            raise RolloutRefusedError("a request needs the requester's Slack identity: none was given")
        with self._exclusive("request"):
            campaign, reason = self.acceptance()
            if campaign is None:
                self.audit.append(who=requester, what="rollout.request", decision="refused", stage=stage,
                                  detail={"reason": reason}, at=self.clock())
                # Held, not refused: the same request goes through once the campaign has passed (exit 3).
                raise StepHeldError("check_acceptance", f"no team is onboarded before acceptance: {reason}")
            rollout = self.store.open_rollout()
            if rollout is None or rollout.to_stage != stage or rollout.state != RolloutState.REQUESTING:
                rollout = self._new_rollout(stage, requester, superseding=rollout)
            steps = {"check_soak": self._check_soak, "check_gates": self._check_gates, "preview": self._preview,
                     "post_request": self._post_request}
            rollout = self._run(rollout, [(name, steps[name]) for name in REQUEST_STEPS])
        self._tell_slack(rollout.id)
        return rollout

    def wait(self, receiver: Receiver, timeout_s: float, poll_s: float = 0.2) -> Rollout:
        """Receive clicks until the open request is approved or rejected, or timeout_s passes."""
        approvals = self._slack()
        rollout = self._open({RolloutState.AWAITING_APPROVAL, RolloutState.APPROVED}, "wait for")
        inbox = ClickInbox(self.store, approvals, self.clock)
        # Clicks stored before a crash are decided first, and the message catches up with the state.
        inbox.decide_pending()
        approvals.refresh_message(self._get(rollout.id))
        deadline = time.monotonic() + timeout_s
        receiver.start()
        try:
            while self._get(rollout.id).state == RolloutState.AWAITING_APPROVAL and time.monotonic() < deadline:
                time.sleep(poll_s)
        finally:
            receiver.stop()
        rollout = self._get(rollout.id)
        if rollout.state == RolloutState.REJECTED:
            # The stack file still names the rejected stage since its preview; put the deployed one back.
            self.deployer.set_stage(rollout.from_stage)
            self.audit.append(who="gpuctl", what="stack.config", decision="restored", rollout=rollout.id,
                              stage=rollout.from_stage, detail={"reason": "request rejected"}, at=self.clock())
        return rollout

    def apply(self) -> Rollout:
        """Apply the approved plan (or resume an apply); done, rolled back, or held."""
        with self._exclusive("apply"):
            rollout = self._open({RolloutState.APPROVED, RolloutState.APPLYING}, "apply")
            steps = {"check_approvals": self._check_approvals, "check_plan": self._check_plan,
                     "check_gates_before_apply": self._check_gates_before_apply, "deploy": self._deploy,
                     "verify": self._verify}
            deployed = self.store.step(rollout.id, "deploy")
            rerun = () if deployed is not None and deployed.finished_at is not None else APPLY_GUARDS
            try:
                rollout = self._run(rollout, [(name, steps[name]) for name in APPLY_STEPS], rerun=rerun)
            except RolloutHaltedError:
                self._tell_slack(rollout.id)
                raise
        self._tell_slack(rollout.id)
        return rollout

    def rollback(self, stage: str, operator: str, reason: str) -> Rollout:
        """Break-glass: converge the stack on an earlier stage now, without Slack; audited. A request it
        supersedes is marked so in Slack when Slack is configured (and the audit says whether it was)."""
        if stage not in self.order:
            raise RolloutRefusedError(f'no stage named "{stage}" (stages: {", ".join(self.order)})')
        with self._exclusive("rollback"):
            open_rollout = self.store.open_rollout()
            if open_rollout is not None and open_rollout.id.startswith(BREAK_GLASS_PREFIX):
                rollout = open_rollout
            else:
                deployed = self.deployer.deployed_stage() or stage
                if self.order.index(stage) > self.order.index(deployed):
                    raise RolloutRefusedError(f"{stage} is not before the deployed stage {deployed}: "
                                              "rollback goes back")
                n = sum(r.id.startswith(BREAK_GLASS_PREFIX) for r in self.store.rollouts()) + 1
                rollout = Rollout(f"{BREAK_GLASS_PREFIX}{n}", deployed, stage, operator, self.clock(),
                                  RolloutState.APPLYING)
                superseded = [open_rollout.id] if open_rollout else []
                self.audit.append(who=operator, what="break_glass.rollback", decision="started", rollout=rollout.id,
                                  stage=stage, detail={"reason": reason, "from": deployed, "superseded": superseded},
                                  at=self.clock())
                self.store.add_rollout(rollout, supersede=superseded)
                self._tell_superseded(open_rollout)
            return self._run(rollout, [(ROLLBACK_STEP, self._converge_back)])

    def verify_audit(self, rollout: Rollout | None) -> ChainReport:
        """The audit chain checked against its head in the state and, where Slack can be read, the heads posted to
        `rollout`'s thread; AuditChainBrokenError if it does not hold."""
        anchors: list[tuple[str, ChainHead]] = []
        if self.approvals is not None and rollout is not None:
            try:
                heads = self.approvals.posted_heads(rollout)
            except (SlackClientError, OSError):
                heads = []  # Slack unreachable: the state's head still anchors the chain
            anchors = [(f"the Slack thread of {rollout.id}", head) for head in heads]
        return self.audit.verify(anchors)

    def acceptance(self) -> tuple[str | None, str]:
        """(the passed campaign for the deployed stack or None, why). A campaign counts when the audit log holds its
        authentic record bound to the deployment digest, and that record shows it passed every criterion over the
        durations the spec asks for, unscaled (a rehearsal proves the runbook, not the cluster)."""
        digest = self.deployer.deployment_digest()
        if digest is None:
            return None, "the stack has no successful update for a campaign to judge"
        refused = []
        for record in self.audit.authentic().values():
            if record.what != ACCEPTANCE_RECORD or record.decision != "passed" or record.plan_digest != digest:
                continue
            shortfalls = self._shortfalls(record.detail)
            if shortfalls:
                refused.append(f"{record.detail.get('campaign')}: {'; '.join(shortfalls)}")
                continue
            return str(record.detail.get("campaign")), (f"campaign {record.detail.get('campaign')} passed for the "
                                                        f"deployed stack {digest} at {record.at[:16]}")
        return None, (f"no passed acceptance campaign for the deployed stack {digest}: run `gpuctl acceptance run`"
                      + (f" (not counted: {' | '.join(refused)})" if refused else ""))

    def _shortfalls(self, detail: dict[str, Any]) -> list[str]:
        """Why a passed campaign's record does not count for go-live, or nothing. The durations are the spec's and at
        least the mission's (168 h of soak, an hour of 3x shock): a shorter spec is a rehearsal too."""
        spec = self.site.acceptance
        if detail.get("time_scale") != 1:
            return [f"a rehearsal at time scale {detail.get('time_scale')}"]
        criteria = detail.get("criteria")
        if not isinstance(criteria, list) or not all(isinstance(c, dict) for c in criteria):
            return ["its record holds no verdict criteria (recorded before verdicts were measured)"]
        judged = {f"{c.get('phase')} {c.get('name')}": c.get("passed") is True for c in criteria}
        needed = [*REQUIRED_CRITERIA, *(f"soak drill:{name}" for name, _ in spec.named_drills())]
        found = [f"{name} not judged" for name in needed if name not in judged]
        found += [f"{name} not passed" for name, passed in judged.items() if not passed]
        measured = _mapping(detail.get("measured"))
        soak_s = max(spec.soak_h, SOAK_H) * 3600
        shock_s = max(spec.shock_minutes, SHOCK_MINUTES) * 60
        if not _at_least(measured.get("soak_s"), soak_s):
            found.append(f"soak {measured.get('soak_s')} s under load, not the {soak_s} s asked")
        if not _at_least(measured.get("shock_s"), shock_s):
            found.append(f"shock {measured.get('shock_s')} s, not the {shock_s} s asked")
        holds = _mapping(measured.get("drill_hold_s"))
        found += [f"drill {name} held {holds.get(name)} s, not the {d.hold_s} s asked"
                  for name, d in spec.named_drills() if not _at_least(holds.get(name), d.hold_s)]
        return found

    def status(self) -> Status:
        deployed = self.deployer.deployed_stage()
        since = self.deployer.stage_since(deployed) if deployed else None
        current = next((s for s in self.site.stages if s.name == deployed), None)
        at = self.order.index(deployed) if deployed in self.order else -1
        rollout = self.latest()
        approvers = [a.user for a in self.approvals.counted(rollout.id)] if rollout and self.approvals else []
        return Status(
            deployed_stage=deployed, live_since=since, soak_days=current.min_soak_days if current else 0,
            next_stage=self.order[at + 1] if 0 <= at < len(self.order) - 1 else None, rollout=rollout,
            steps=self.store.steps(rollout.id) if rollout else [], approvers=approvers,
            approvals_required=self.site.slack.approvals_required, acceptance=self.acceptance()[1],
        )

    def latest(self) -> Rollout | None:
        """The open rollout, else the newest one."""
        return self.store.open_rollout() or next(iter(reversed(self.store.rollouts())), None)

    def teams_of(self, stage: str) -> tuple[list[str], list[str]]:
        """(teams `stage` onboards, all teams onboarded once it is live)."""
        upto = self.order.index(stage)
        total = [t.name for t in self.site.teams if self.order.index(t.stage) <= upto]
        return [t.name for t in self.site.teams if t.stage == stage], total

    # --- the runner ----------------------------------------------------------------------------

    @contextmanager
    def _exclusive(self, command: str) -> Iterator[None]:
        try:
            with self.lock.held(command):
                yield
        except StackLockedError as locked:
            self.audit.append(who="gpuctl", what=f"rollout.{command}", decision="held",
                              detail={"reason": str(locked)}, at=self.clock())
            raise StepHeldError("stack_lock", f"{locked}: one command changes the stack at a time") from None

    def _run(self, rollout: Rollout, steps: list[tuple[str, Callable[[Rollout], StepResult]]],
             rerun: tuple[str, ...] = ()) -> Rollout:
        for name, run in steps:
            recorded = self.store.step(rollout.id, name)
            if recorded is not None and recorded.finished_at is not None and name not in rerun:
                if recorded.detail.get("rollback"):
                    return self._run(rollout, [(ROLLBACK_STEP, self._roll_back)])
                continue
            self.store.step_started(rollout.id, name, self.clock())
            self.events(StepEvent(rollout.id, name, "begin"))
            try:
                result = run(rollout)
            except _HoldError as hold:
                self.audit.append(who="gpuctl", what=f"step.{name}", decision="held", rollout=rollout.id,
                                  stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                                  gates=hold.changes.get("gates"), detail={"reason": str(hold)}, at=self.clock())
                self.store.update_rollout(rollout.id, hold=f"{name}: {hold}", **hold.changes)
                raise StepHeldError(name, str(hold)) from None
            except _HaltError as halt:
                self.audit.append(who="gpuctl", what=f"step.{name}", decision=halt.state.value, rollout=rollout.id,
                                  stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                                  detail={"reason": str(halt)}, at=self.clock())
                self.store.update_rollout(rollout.id, state=halt.state, hold=f"{name}: {halt}")
                raise RolloutHaltedError(name, str(halt), halt.state) from None
            self.events(StepEvent(rollout.id, name, "end"))
            detail = {**result.detail, **({"rollback": result.rollback} if result.rollback else {})}
            self.store.step_finished(rollout.id, name, self.clock(), detail, **result.changes)
            rollout = self._get(rollout.id)
            if result.rollback:
                return self._run(rollout, [(ROLLBACK_STEP, self._roll_back)])
        return rollout

    # --- request steps -------------------------------------------------------------------------

    def _new_rollout(self, stage: str, requester: str, superseding: Rollout | None) -> Rollout:
        if stage not in self.order:
            raise RolloutRefusedError(f'no stage named "{stage}" (stages: {", ".join(self.order)})')
        deployed = self.deployer.deployed_stage()
        if deployed is None:
            raise RolloutRefusedError("the stack has no `stage` output: deploy the first stage with `pulumi up` first")
        if self.order.index(stage) != self.order.index(deployed) + 1:
            raise RolloutRefusedError(f"{deployed} is deployed: the next stage is "
                          f"{self.order[self.order.index(deployed) + 1] if deployed != self.order[-1] else 'none'}"
                          f", not {stage}")
        n = sum(r.to_stage == stage for r in self.store.rollouts()) + 1
        rollout = Rollout(f"{stage}-{n}", deployed, stage, requester, self.clock(), RolloutState.REQUESTING)
        superseded = [superseding.id] if superseding is not None else []
        self.audit.append(who=requester, what="rollout.request", decision="started", rollout=rollout.id, stage=stage,
                          detail={"from": deployed, "superseded": superseded}, at=self.clock())
        self.store.add_rollout(rollout, supersede=superseded)
        self._tell_superseded(superseding)
        return rollout

    def _check_soak(self, rollout: Rollout) -> StepResult:
        since = self.deployer.stage_since(rollout.from_stage)
        if since is None:
            raise _HoldError(f"no successful update of stage {rollout.from_stage} in the stack history")
        need = next(s.min_soak_days for s in self.site.stages if s.name == rollout.from_stage)
        soaked = self.clock() - since
        if soaked < timedelta(days=need):
            raise _HoldError(f"{rollout.from_stage} has soaked {soaked.total_seconds() / 86400:.1f} of {need} days "
                        f"(live since {since:%Y-%m-%d %H:%M} UTC; ready {since + timedelta(days=need):%Y-%m-%d %H:%M})")
        return StepResult({"live_since": since.isoformat(), "soaked_days": round(soaked.total_seconds() / 86400, 2)})

    def _gate(self) -> GateSnapshot:
        snapshot = self.gates.check()
        if not snapshot.passed:
            reasons = "; ".join(f"{r.gate} {r.verdict.value}: {r.reason}" for r in snapshot.holding())
            raise _HoldError(reasons, gates=snapshot.as_record())
        return snapshot

    def _check_gates(self, rollout: Rollout) -> StepResult:
        snapshot = self._gate()
        return StepResult({"passed": True}, {"gates": snapshot.as_record()})

    def _preview(self, rollout: Rollout) -> StepResult:
        saved = self.deployer.preview(rollout.to_stage, self.plans_dir / f"{rollout.id}.plan.json")
        return StepResult({"changes": saved.changes}, {"plan_path": str(saved.path), "plan_digest": saved.digest})

    def _post_request(self, rollout: Rollout) -> StepResult:
        awaiting = dataclasses.replace(rollout, state=RolloutState.AWAITING_APPROVAL)
        try:
            channel, ts = self._slack().post_request(awaiting)
        except SlackApiError as error:
            # invalid_auth, channel_not_found, ...: fix the app or token, then request again to resume here.
            raise _HoldError(f"Slack refused chat.postMessage: {error.response.get('error')}") from None
        self.audit.append(who=rollout.requester, what="rollout.request", decision="awaiting_approval",
                          rollout=rollout.id, stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                          gates=rollout.gates, detail={"channel": channel, "ts": ts}, at=self.clock())
        return StepResult({"channel": channel, "ts": ts},
                          {"channel": channel, "message_ts": ts, "state": RolloutState.AWAITING_APPROVAL})

    # --- apply steps ---------------------------------------------------------------------------

    def _plan(self, rollout: Rollout) -> bytes:
        """The plan's bytes as they are now, if they are the ones approved (else the rollout stops)."""
        path = Path(rollout.plan_path or "")
        plan = path.read_bytes() if path.is_file() else None
        actual = plan_digest(plan) if plan is not None else "missing"
        if plan is None or actual != rollout.plan_digest:
            raise _HaltError(f"plan digest mismatch: approved {rollout.plan_digest}, the plan file now is {actual}")
        return plan

    def _check_plan(self, rollout: Rollout) -> StepResult:
        return StepResult({"plan_digest": plan_digest(self._plan(rollout))})

    def _check_approvals(self, rollout: Rollout) -> StepResult:
        approvals = self._slack()
        try:
            self.verify_audit(rollout)
        except AuditChainBrokenError as broken:
            raise _HaltError(f"the audit log does not verify ({broken}): it cannot vouch for any approval") from None
        valid, dropped = approvals.approvers_before_apply(rollout, plan_digest(self._plan(rollout)))
        need = self.site.slack.approvals_required
        if len(valid) < need:
            raise _HoldError(f"{len(valid)} of {need} approvals still count"
                        + (f" ({'; '.join(dropped)})" if dropped else "") + ": request the stage again")
        return StepResult({"approvers": [a.user for a in valid], "dropped": dropped})

    def _check_gates_before_apply(self, rollout: Rollout) -> StepResult:
        return StepResult({"gates": self._gate().as_record()})

    def _deploy(self, rollout: Rollout) -> StepResult:
        message = f"gpuctl rollout {rollout.id}: {rollout.from_stage} -> {rollout.to_stage}"
        self.store.update_rollout(rollout.id, state=RolloutState.APPLYING)
        try:
            plan = self._plan(rollout)
            deployment = self._deploy_once(message, lambda: self.deployer.apply(plan, message))
        except _UpdateFailedError as failed:
            self.audit.append(who="gpuctl", what="pulumi.up", decision="failed", rollout=rollout.id,
                              stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                              detail={"error": str(failed)}, at=self.clock())
            return StepResult({"error": str(failed)}, rollback=f"pulumi up failed: {failed}")
        self.audit.append(who="gpuctl", what="pulumi.up", decision="deployed", rollout=rollout.id,
                          stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                          detail={"outputs": deployment.outputs, "summary": deployment.summary}, at=self.clock())
        return StepResult({"message": message}, {"outputs": deployment.outputs, "summary": deployment.summary})

    def _deploy_once(self, message: str, run: Callable[[], Deployment]) -> Deployment:
        """The update named `message`: the one in the stack history if a crashed run got that far, else a new one."""
        existing = self.deployer.update(message)
        try:
            if existing is None:
                return run()
            if existing.result == "in-progress":
                raise _HoldError(f'update "{message}" is still running (started {existing.start_time:%Y-%m-%d %H:%M})')
            if existing.result != "succeeded":
                raise _UpdateFailedError(f'update "{message}" ended {existing.result}')
            return self.deployer.finished(message)
        except STACK_LOCKED as locked:
            # Someone else's update holds the stack: ours did not run, so nothing failed and nothing rolls back.
            reason = _last_line(locked) if isinstance(locked, CommandError) else str(locked)
            raise _HoldError(f"the stack is locked by another update ({reason}): run this again once it is done") \
                from None
        except CommandError as error:
            raise _UpdateFailedError(_last_line(error)) from None

    def _verify(self, rollout: Rollout) -> StepResult:
        deployed = (rollout.outputs or {}).get("stage")
        if deployed != rollout.to_stage:
            return StepResult({"stage_output": deployed},
                              rollback=f"the stack reports stage {deployed}, not {rollout.to_stage}")
        alerts = next(r for r in self.gates.check().results if r.gate == "critical_alerts")
        if alerts.verdict == Verdict.INCONCLUSIVE:
            raise _HoldError(f"cannot verify: {alerts.reason}")
        if alerts.verdict == Verdict.FAIL:
            return StepResult({"critical_alerts": alerts.reason}, rollback=f"after deploy: {alerts.reason}")
        self.audit.append(who="gpuctl", what="rollout.verify", decision="done", rollout=rollout.id,
                          stage=rollout.to_stage, plan_digest=rollout.plan_digest,
                          detail={"outputs": rollout.outputs, "critical_alerts": alerts.reason}, at=self.clock())
        return StepResult({"stage_output": deployed, "critical_alerts": alerts.reason}, {"state": RolloutState.DONE})

    def _roll_back(self, rollout: Rollout) -> StepResult:
        message = f"gpuctl rollout {rollout.id}: roll back to {rollout.from_stage}"
        try:
            deployment = self._deploy_once(message, lambda: self.deployer.converge(rollout.from_stage, message))
        except _UpdateFailedError as failed:
            raise _HaltError(f"the rollback failed too ({failed}): use `gpuctl rollout rollback`") from None
        self.audit.append(who="gpuctl", what="rollout.rollback", decision="rolled_back", rollout=rollout.id,
                          stage=rollout.from_stage, plan_digest=rollout.plan_digest,
                          detail={"outputs": deployment.outputs, "summary": deployment.summary}, at=self.clock())
        return StepResult({"message": message}, {"state": RolloutState.ROLLED_BACK, "outputs": deployment.outputs})

    def _converge_back(self, rollout: Rollout) -> StepResult:
        message = f"gpuctl rollout {rollout.id}: break-glass rollback to {rollout.to_stage}"
        try:
            deployment = self._deploy_once(message, lambda: self.deployer.converge(rollout.to_stage, message))
        except _UpdateFailedError as failed:
            raise _HaltError(f"{failed}: fix the cause and run the rollback again") from None
        self.audit.append(who=rollout.requester, what="break_glass.rollback", decision="rolled_back",
                          rollout=rollout.id, stage=rollout.to_stage,
                          detail={"outputs": deployment.outputs, "summary": deployment.summary}, at=self.clock())
        return StepResult({"message": message}, {"state": RolloutState.ROLLED_BACK, "outputs": deployment.outputs,
                                                 "summary": deployment.summary})

    # --- helpers -------------------------------------------------------------------------------

    def _slack(self) -> SlackApprovals:
        if self.approvals is None:
            raise RolloutRefusedError("Slack is not configured (SLACK_BOT_TOKEN): approvals need it; rollback does not")
        return self.approvals

    def _tell_slack(self, rollout_id: str) -> str | None:
        """Bring the request's message up to date and post the audit chain's head to its thread. None once told,
        else why Slack could not be told: Slack being down never stops a deploy or a rollback."""
        rollout, head = self._get(rollout_id), self.audit.head()
        if self.approvals is None:
            return "Slack is not configured (SLACK_BOT_TOKEN)"
        if rollout.message_ts is None:
            return "the request has no Slack message"
        try:
            self.approvals.refresh_message(rollout)
            if head is not None:
                self.approvals.post_head(self._get(rollout_id), head)
        except SlackApiError as error:
            return f"Slack answered {error.response.get('error')}"
        except (SlackClientError, OSError) as error:
            return f"Slack could not be reached ({error.__class__.__name__})"
        return None

    def _tell_superseded(self, old: Rollout | None) -> None:
        """A request replaced before it was applied says so in Slack (its buttons go); the audit records whether."""
        if old is None or old.message_ts is None:
            return
        untold = self._tell_slack(old.id)
        self.audit.append(who="gpuctl", what="slack.superseded", decision="told" if untold is None else "not_told",
                          rollout=old.id, stage=old.to_stage, plan_digest=old.plan_digest,
                          detail={"by": self._get(old.id).superseded_by, **({"reason": untold} if untold else {})},
                          at=self.clock())

    def _open(self, states: set[RolloutState], verb: str) -> Rollout:
        rollout = self.store.open_rollout()
        if rollout is None or rollout.state not in states:
            state = rollout.state.value if rollout else "no open rollout"
            raise RolloutRefusedError(f"nothing to {verb}: {rollout.id + ' is ' if rollout else ''}{state}")
        return rollout

    def _get(self, rollout_id: str) -> Rollout:
        rollout = self.store.rollout(rollout_id)
        assert rollout is not None, rollout_id
        return rollout


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _at_least(value: Any, need: float) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= need


def _last_line(error: CommandError) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1][:500] if lines else "unknown error"

