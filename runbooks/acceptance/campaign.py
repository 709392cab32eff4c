"""The acceptance campaign as named, recorded steps: the drills under the peak load, the shock, the rest of the soak.

run:  revert_left, peak, drill:<name> ..., shock, soak, verdict        -> passed | failed

The lending controller is not the campaign's to run: in production it is the service beside slurmctld, and among the
loads a ControllerSampler (runbooks.acceptance.lending) reads its /metrics at every look, so the verdict judges
whether it decided through the shock, and whether it lent when inference peaked while training on the flex node it took
yielded (a requeue there, from sacct) and inference was served.

The verdict judges what was measured (runbooks.acceptance.verdict): the inference load's latency and errors per phase,
the critical alerts' firing, the time under load by the monotonic clock (each step's run time, so a resume neither
resets nor skips the soak: the soak step runs what the finished steps left of soak_h) and the drills.

Each step is recorded started before it runs and finished after (runbooks.acceptance.store); a resumed `run` skips
finished steps and runs an unfinished one again from its start. A drill records its fault, with its undo and the
dead-man's switch armed for it on the node, before injecting it: a campaign killed mid-drill leaves a row that the
next `run` reverts first (`revert_left`), logging that it did, while the switch reverts it at its deadline even if no
`run` ever comes. While any step runs, a watcher reads Alertmanager: every alert that fires is logged as a failure
with the SOP it links to, and one with no SOP in docs/sop/ fails the campaign. Failures go to SQLite and to a
keyed, hash-chained JSONL log (runbooks.stack.audit). A passed campaign is also recorded in the rollout's audit
log, bound to the deployment it judged: the rollout's gate reads it there (runbooks.rollout.machine).
"""

import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from components.site.acceptance import Acceptance, Drill, Peak
from runbooks.acceptance.alerts import AlertmanagerError, FiringAlert, alert_sop, sop_missing
from runbooks.acceptance.faults import Fault, FaultError, Switches, run_commands
from runbooks.acceptance.lending import ControllerSampler
from runbooks.acceptance.load import JobRecord, RateLoad
from runbooks.acceptance.store import FAILED, PASSED, RUNNING, AlertSpan, Campaign, CampaignStore, Failure
from runbooks.acceptance.verdict import Measurements, judge, loaded_s
from runbooks.exit_codes import ExitCode
from runbooks.stack.audit import ACCEPTANCE_RECORD, AuditLog
from runbooks.stack.lock import StackLock, StackLockedError

POLL_S = 0.5
"""s between two looks at Alertmanager, a probe or a deadline: the campaign's resolution."""
WHERE_LABELS = ("Hostname", "instance")
"""Labels that say where an alert fired, shown beside its name in a drill's detail."""
INTERRUPTS = (Exception, KeyboardInterrupt, SystemExit)
"""What ends a drill early and still lets it revert its fault: an error, Ctrl-C, SIGTERM (runbooks.acceptance.cli)."""
ACCOUNTING_LAG_S = 5.0
"""s the verdict waits at most for sacct to know every job the training load submitted."""
VERDICT_STEP = "verdict"
"""The step row that holds the judged criteria (not a step that runs: written once, with the verdict)."""


@contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit in the main thread while this holds, as Ctrl-C raises KeyboardInterrupt: a drill then
    reverts its fault before the command exits (Python's default for SIGTERM is to die with the fault in place)."""

    def leave(_signum: int, _frame: object) -> None:
        # Ended before its verdict, the campaign counts as failed for now: the next run resumes it.
        raise SystemExit(ExitCode.FAILED)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class CampaignRefusedError(Exception):
    """The campaign cannot run as asked (SOPs missing, another run holds the lock); the message says why."""


@dataclass(frozen=True)
class Reaction:
    """One thing a drill expects to happen, measured."""

    name: str
    ok: bool
    detail: str


class Probe(Protocol):
    """What a drill measures beyond the alert: whether the fault shows, whether service is back, and the reactions
    (jobs requeued, requests failed, checkpoints intact)."""

    def detected(self) -> bool: ...
    def recovered(self) -> bool: ...
    def reactions(self) -> list[Reaction]: ...


@dataclass(frozen=True)
class Target:
    fault: Fault
    probe: Probe
    alert_labels: dict[str, str] = field(default_factory=dict)
    """Labels the drill's alert must carry to count (the node's Hostname): another node's alert detects nothing."""


class Load(Protocol):
    """A load generator bounded in rate and time: `run` at `factor` times the peak until `stop` is set or `until`
    (time.time()) passes, recording samples; it returns at once when `stop` is set."""

    name: str

    def run(self, factor: float, until: float, stop: threading.Event) -> None: ...
    def drain(self) -> dict[str, list[tuple[float, float]]]: ...


@dataclass
class Outcome:
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)


class CampaignRunner:
    def __init__(self, spec: Acceptance, store: CampaignStore, log: AuditLog, rollout_log: AuditLog,
                 switches: Switches, sop_dir: Path, alerts: Callable[[], list[FiringAlert]],
                 targets: dict[str, Target], loads: list[Load], lock: StackLock,
                 training_jobs: Callable[[Sequence[str]], dict[str, JobRecord]],
                 peak: tuple[Peak, str] | None = None, clock: Callable[[], float] = time.time,
                 poll_s: float = POLL_S) -> None:
        self.spec, self.store, self.log, self.rollout_log = spec, store, log, rollout_log
        self.switches, self.sop_dir, self.alerts, self.targets, self.loads = switches, sop_dir, alerts, targets, loads
        self.lock, self.clock, self.poll_s = lock, clock, poll_s
        self.training_jobs = training_jobs
        """The state of each of the training load's jobs now, by id (runbooks.acceptance.load.job_states)."""
        self.peak = peak or (spec.peak, "declared")
        """The peak the loads were built at, and where it came from (runbooks.acceptance.peak)."""

    # --- plan ----------------------------------------------------------------------------------

    def plan(self) -> list[tuple[str, float, str]]:
        """(step, scaled seconds, what it does), or CampaignRefusedError naming every missing SOP or target."""
        missing = [f"drills[{i}].sop: {lacks}" for i, d in enumerate(self.spec.drills)
                   if (lacks := sop_missing(d.sop, self.sop_dir)) is not None]
        missing += [f"drills[{i}]: no target for {d.kind} (where its fault lands)"
                    for i, d in enumerate(self.spec.drills) if d.kind not in self.targets]
        if missing:
            raise CampaignRefusedError("; ".join(missing))
        scale = self.spec.scaled
        steps = [(f"drill:{name}", scale(d.hold_s + d.recover_within_s),
                  f"{d.kind} on {self.targets[d.kind].fault.where}: "
                  f"{'alert ' + d.alert if d.alert else 'measured'} within {scale(d.detect_within_s):g} s, recovery "
                  f"within {scale(d.recover_within_s):g} s, reverted by the node at {scale(d.revert_after_s):g} s; "
                  f"SOP docs/sop/{d.sop}.md") for name, d in self.spec.named_drills()]
        shock = scale(self.spec.shock_minutes * 60)
        steps.append(("shock", shock, f"every load at {self.spec.shock_factor:g}x the peak"))
        steps.append(("soak", max(scale(self.spec.soak_h * 3600) - shock - sum(s[1] for s in steps[:-1]), 0),
                      f"every load at the peak until {self.spec.soak_h} h (scaled) have passed"))
        return steps

    # --- run -----------------------------------------------------------------------------------

    def run(self, deployment: str, stage: str) -> Campaign:
        self.plan()
        try:
            with self.lock.held("run"):
                return self._run(deployment, stage)
        except StackLockedError as locked:
            raise CampaignRefusedError(f"{locked}: one campaign runs at a time") from None

    def _run(self, deployment: str, stage: str) -> Campaign:
        campaign = self.store.open_campaign()
        if campaign is not None and campaign.deployment != deployment:
            # The stack changed under an unfinished campaign: it judged nothing whole. Leave no fault of it behind.
            self._revert_left(campaign)
            self.store.finish_campaign(campaign.id, FAILED, f"superseded: the deployment is now {deployment}")
            self._log(campaign, "campaign.verdict", FAILED, {"reason": "superseded by another deployment"})
            campaign = None
        if campaign is None:
            campaign = Campaign(f"campaign-{uuid.uuid4().hex[:8]}", deployment, stage, self.spec.time_scale,
                                self.clock(), RUNNING, None, None)
            self.store.add_campaign(campaign)
            self._log(campaign, "campaign.start", "started", {"time_scale": self.spec.time_scale})
        else:
            self._log(campaign, "campaign.resume", "resumed", {"after_s": round(self.clock() - campaign.started_at, 1)})
        self._revert_left(campaign)
        steps: list[tuple[str, Callable[[Campaign], dict[str, Any]]]] = [("peak", self._peak)]
        steps += [(f"drill:{name}", self._drill_step(name, d)) for name, d in self.spec.named_drills()]
        steps += [("shock", self._shock), ("soak", self._soak)]
        with self._watching(campaign):
            for name, run in steps:
                recorded = self.store.steps(campaign.id).get(name)
                if recorded is not None and recorded[1] is not None:
                    continue
                self.store.step_started(campaign.id, name, self.clock())
                began = time.monotonic()
                detail = run(campaign)
                self.store.step_finished(campaign.id, name, self.clock(),
                                         {**detail, "ran_s": time.monotonic() - began})
        return self._verdict(campaign)

    @contextmanager
    def _watching(self, campaign: Campaign) -> Iterator[None]:
        stop = threading.Event()
        self._watch_once(campaign)  # what fires already is seen before the first fault, not blamed on it
        watcher = threading.Thread(target=self._watch, args=(campaign, stop), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join(timeout=10)
            self._watch_once(campaign)

    def _watch(self, campaign: Campaign, stop: threading.Event) -> None:
        while not stop.wait(self.poll_s):
            self._watch_once(campaign)

    def _watch_once(self, campaign: Campaign) -> None:
        try:
            firing = self.alerts()
        except AlertmanagerError as error:
            self.store.add_samples(campaign.id, "alertmanager_unreadable", [(self.clock(), 1.0)])
            self._log(campaign, "alertmanager.read", "failed", {"error": str(error)})
            return
        now = self.clock()
        for alert in firing:
            place = next((alert.labels[k] for k in WHERE_LABELS if k in alert.labels), "")
            self.store.alert_seen(campaign.id, f"{alert.fingerprint}:{alert.starts_at}", AlertSpan(
                alert.name, alert.labels.get("severity", ""), place, now, now))
            sop = alert_sop(alert.name, self.sop_dir)
            failure = Failure(self.clock(), "fired", alert.name, sop,
                              {"labels": alert.labels, "starts_at": alert.starts_at})
            if self.store.add_failure(campaign.id, f"alert:{alert.fingerprint}:{alert.starts_at}", failure):
                self._log(campaign, "failure.fired", "logged" if sop else "no_sop",
                          {"alert": alert.name, "sop": sop, "labels": alert.labels})

    # --- steps ---------------------------------------------------------------------------------

    def _peak(self, campaign: Campaign) -> dict[str, Any]:
        peak, source = self.peak
        return {"source": source, **peak.model_dump()}

    def _drill_step(self, name: str, drill: Drill) -> Callable[[Campaign], dict[str, Any]]:
        return lambda campaign: self._drill(campaign, name, drill)

    def _drill(self, campaign: Campaign, name: str, drill: Drill) -> dict[str, Any]:
        """The drill `name` (Acceptance.named_drills): its fault, recorded and logged under that name."""
        target, scale = self.targets[drill.kind], self.spec.scaled
        stop = threading.Event()
        with self._loading(campaign, 1.0, self.clock() + scale(drill.hold_s + drill.recover_within_s) + 60, stop):
            # A fault is injected into a steady system only: the drill's alert from an earlier fault must be gone.
            steady = self._until(lambda: not self._alerting(drill, target) and not target.probe.detected(),
                                 self.clock() + scale(drill.recover_within_s))
            if steady is None:
                shown = drill.alert or "its measurement"
                return {"verdict": FAILED, "sop": drill.sop, "error": "the system was not steady before the fault "
                        f"({shown} still showed a fault after {scale(drill.recover_within_s):g} s)"}
            started = self.clock()
            # A name of its own: the switch of a killed run's fault may still be watching its old name.
            armed = str(self.switches.directory / f"{campaign.id}-{drill.kind}-{uuid.uuid4().hex[:8]}.json")
            row = self.store.fault_armed(campaign.id, name, target.fault.as_record(), armed, started)
            try:
                self.switches.arm(target.fault, Path(armed).stem, started + scale(drill.revert_after_s))
                self.store.add_failure(campaign.id, f"drill:{name}:{row}", Failure(
                    started, "injected", drill.kind, drill.sop, {"where": target.fault.where}))
                self._log(campaign, f"drill.{name}", "inject",
                          {"where": target.fault.where, "armed": armed})
                injected = self.clock()
                try:
                    run_commands(target.fault.inject, target.fault.env)
                except FaultError as error:
                    self._revert(campaign, row, target.fault, armed, "drill")
                    self._log(campaign, f"drill.{name}", FAILED, {"error": str(error)})
                    return {"verdict": FAILED, "sop": drill.sop, "error": f"the fault could not be injected: {error}"}
                detected_at = self._until(lambda: self._detected(drill, target),
                                          injected + scale(drill.detect_within_s))
                # The drill's own measurement is read through the whole hold, as the fault develops (Slurm marks a
                # silent node NOT_RESPONDING, later DOWN): its reactions judge what it saw.
                measured_at = self._watch_probe(target.probe, injected + scale(drill.hold_s))
                # Which alerts fire while the fault still holds: the report names them, expected or not.
                seen = sorted({" ".join([a.name, *(f"{k}={a.labels[k]}" for k in WHERE_LABELS if k in a.labels)])
                               for a in self._firing()})
                if target.fault.stays:
                    self.switches.disarm(armed)
                    self.store.fault_reverted(row, self.clock(), "kept: a change meant to stay")
                else:
                    self._revert(campaign, row, target.fault, armed, "drill")
            except INTERRUPTS:
                # Ctrl-C, SIGTERM (the CLI turns it into SystemExit) or a bug: the fault goes before the command
                # exits. The switch stays the last resort, for a death nothing can catch (SIGKILL, power).
                self._revert(campaign, row, target.fault, armed, "interrupted")
                raise
            reverted = self.clock()
            recovered_at = self._until(lambda: self._recovered(drill, target),
                                       reverted + scale(drill.recover_within_s))
            reactions = target.probe.reactions()  # before the loads stop and hand their samples to the store
        detected = detected_at is not None
        recovered = recovered_at is not None
        passed = detected and recovered and all(r.ok for r in reactions)
        verdict = PASSED if passed else FAILED
        detail: dict[str, Any] = {
            "verdict": verdict, "sop": drill.sop, "alert": drill.alert,
            "where": target.fault.where, "injected_at": injected, "reverted_at": reverted,
            "held_s": round(reverted - injected, 2),
            "detection_s": round(detected_at - injected, 2) if detected_at is not None else None,
            "measured_s": round(measured_at - injected, 2) if measured_at is not None else None,
            "recovery_s": round(recovered_at - reverted, 2) if recovered_at is not None else None,
            "detect_within_s": scale(drill.detect_within_s), "recover_within_s": scale(drill.recover_within_s),
            "reactions": [r.__dict__ for r in reactions], "alerts_at_end_of_hold": seen,
        }
        self._log(campaign, f"drill.{name}", verdict, detail)
        return detail

    def _detected(self, drill: Drill, target: Target) -> bool:
        if drill.alert is None:
            return target.probe.detected()
        return self._alerting(drill, target)

    def _recovered(self, drill: Drill, target: Target) -> bool:
        cleared = drill.alert is None or not self._alerting(drill, target)
        return cleared and target.probe.recovered()

    def _alerting(self, drill: Drill, target: Target) -> bool:
        return any(a.name == drill.alert and target.alert_labels.items() <= a.labels.items() for a in self._firing())

    def _firing(self) -> list[FiringAlert]:
        try:
            return self.alerts()
        except AlertmanagerError:
            return []  # unreadable is not proof of anything: the watcher logs it

    def _shock(self, campaign: Campaign) -> dict[str, Any]:
        seconds = self.spec.scaled(self.spec.shock_minutes * 60)
        self._load_for(campaign, self.spec.shock_factor, seconds)
        return {"factor": self.spec.shock_factor, "seconds": seconds}

    def _soak(self, campaign: Campaign) -> dict[str, Any]:
        # What the finished steps ran under load, by the monotonic clock: a resume neither resets nor skips the soak.
        before = loaded_s(self.store.steps(campaign.id))
        seconds = max(self.spec.scaled(self.spec.soak_h * 3600) - before, 0)
        self._load_for(campaign, 1.0, seconds)
        return {"loaded_before_s": before, "seconds": seconds}

    def _load_for(self, campaign: Campaign, factor: float, seconds: float) -> None:
        stop = threading.Event()
        with self._loading(campaign, factor, self.clock() + seconds, stop):
            end = time.monotonic() + seconds  # a step of the wall clock neither cuts nor stretches the load
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(left, self.poll_s))

    @contextmanager
    def _loading(self, campaign: Campaign, factor: float, until: float, stop: threading.Event) -> Iterator[None]:
        threads = [threading.Thread(target=load.run, args=(factor, until, stop), daemon=True) for load in self.loads]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            for load in self.loads:
                for series, points in load.drain().items():
                    self.store.add_samples(campaign.id, series, points)

    # --- faults --------------------------------------------------------------------------------

    def _revert(self, campaign: Campaign, row: int, fault: Fault, armed: str, by: str) -> None:
        # Undo first, disarm after: a revert cut short (a second Ctrl-C, a hung command) leaves the switch armed.
        codes = run_commands(fault.undo, fault.env, check=False)
        still_armed = self.switches.disarm(armed)
        fired = None if still_armed else self.switches.fired(armed)
        self.store.fault_reverted(row, self.clock(), by if still_armed else f"{by} (after the switch fired)")
        self._log(campaign, f"drill.{fault.drill}", "reverted",
                  {"by": by, "where": fault.where, "undo_exit": codes, "switch_fired": fired})

    def _revert_left(self, campaign: Campaign) -> None:
        """Faults a dead run left in place: undo each, logged, before anything else runs."""
        for left in self.store.faults(campaign.id, in_place_only=True):
            fault = Fault.from_record(left.fault)
            self.store.add_failure(campaign.id, f"left:{left.rowid}", Failure(
                self.clock(), "injected", fault.drill, self._sop(left.drill),
                {"where": fault.where, "left_by": "a run that died mid-drill"}))
            self._revert(campaign, left.rowid, fault, left.armed, "resume")

    def _sop(self, name: str) -> str | None:
        return next((d.sop for n, d in self.spec.named_drills() if n == name), None)

    # --- verdict -------------------------------------------------------------------------------

    def _verdict(self, campaign: Campaign) -> Campaign:
        ended = self.clock()
        steps = self.store.steps(campaign.id)
        samples = self.store.samples(campaign.id)
        jobs = sorted({str(int(v)) for _, v in samples.get("training_job", [])})
        try:
            states = self.training_jobs(jobs)
            # slurmdbd records a job a moment after sbatch accepted it: one submitted as the last step ended may not be
            # in sacct yet. Asked again for ACCOUNTING_LAG_S at most; still missing, it is unaccounted for.
            waited = time.monotonic() + ACCOUNTING_LAG_S
            while set(jobs) - states.keys() and time.monotonic() < waited:
                time.sleep(self.poll_s)
                states = self.training_jobs(jobs)
        except (OSError, subprocess.SubprocessError) as error:
            states = {}  # every job then has no record: the training criterion fails, naming them
            self._log(campaign, "training.states", "failed", {"error": str(error)[-300:]})
        # Each requeue sacct accounted, at the end of the run it cut: the report's timeline (training_requeue: job id).
        self.store.add_samples(campaign.id, "training_requeue", sorted(
            (at, float(job)) for job, record in states.items() for at, *_ in record.requeues))
        criteria = judge(self.spec, Measurements(
            campaign.started_at, ended, steps, samples, self.store.faults(campaign.id),
            self.store.alert_spans(campaign.id), self.store.failures(campaign.id), self.poll_s,
            next(((load.peak_per_s, load.bound_per_s) for load in self.loads
                  if isinstance(load, RateLoad) and load.name == "storage"), None),
            states,
            next(((load.where, load.stale_s, load.pool) for load in self.loads
                  if isinstance(load, ControllerSampler)), None)))
        failing = [c for c in criteria if not c.passed]
        verdict = FAILED if failing else PASSED
        reason = ("; ".join(f"{c.phase} {c.name}: {c.measured} (objective {c.objective})" for c in failing)
                  or f"every criterion met ({len(criteria)})")
        records = [c.as_record() for c in criteria]
        self.store.step_started(campaign.id, VERDICT_STEP, ended)
        self.store.step_finished(campaign.id, VERDICT_STEP, ended, {"verdict": verdict, "criteria": records})
        self.store.finish_campaign(campaign.id, verdict, reason)
        self._log(campaign, "campaign.verdict", verdict, {"reason": reason, "criteria": records})
        if verdict == PASSED:
            # What the rollout's gate judges (runbooks.rollout.machine.RolloutMachine.acceptance): every criterion,
            # and the durations measured, which it holds to the spec's unscaled ones.
            holds = {name[len("drill:"):]: detail.get("held_s") for name, (_, _, detail) in steps.items()
                     if name.startswith("drill:")}
            shock = steps.get("shock", (0, None, {}))[2]
            self.rollout_log.append(who="gpuctl acceptance", what=ACCEPTANCE_RECORD, decision=PASSED,
                                    stage=campaign.stage, plan_digest=campaign.deployment,
                                    detail={"campaign": campaign.id, "time_scale": campaign.time_scale,
                                            "criteria": records, "measured": {
                                                "soak_s": loaded_s(steps),
                                                "shock_s": shock.get("ran_s"), "drill_hold_s": holds}})
        done = self.store.campaign(campaign.id)
        assert done is not None
        return done

    # --- helpers -------------------------------------------------------------------------------

    def _log(self, campaign: Campaign, what: str, decision: str, detail: dict[str, Any]) -> None:
        self.log.append(who="gpuctl acceptance", what=what, decision=decision, stage=campaign.stage,
                        plan_digest=campaign.deployment, detail={"campaign": campaign.id, **detail})

    def _until(self, check: Callable[[], bool], deadline: float) -> float | None:
        """When `check` first held (time.time()), or None if not by `deadline`."""
        while True:
            if check():
                return self.clock()
            if self.clock() >= deadline:
                return None
            time.sleep(self.poll_s)

    def _watch_probe(self, probe: Probe, until: float) -> float | None:
        """Reads the probe until `until` (time.time()); when it first showed the fault, or None."""
        first = None
        while self.clock() < until:
            if probe.detected() and first is None:
                first = self.clock()
            self._sleep_until(min(self.clock() + self.poll_s, until))
        return first

    def _sleep_until(self, moment: float) -> None:
        while (left := moment - self.clock()) > 0:
            time.sleep(min(left, self.poll_s))
