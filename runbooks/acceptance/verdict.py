"""The campaign's verdict from what it measured: each criterion with its measured value, its objective and where the
value comes from, per phase where the load differs (soak: the drills and the soak at the peak; shock: the shock at
shock_factor x the peak; campaign: both).

- inference p95 latency and error rate, from the load generator's own timings (runbooks.acceptance.load.RateLoad:
  `inference_latency_s`, `inference_error` per request), against inference_p95_ms (outside fault windows) and the
  error budget inference_error_pct (drills included); a phase without a single request fails: a load that did
  nothing measured nothing;
- health: every critical alert's firing, as the campaign's watcher saw it, within critical_alert_max_s, or, when it
  started during drills' fault windows, cleared by the last of their recovery deadlines;
- duration: the monotonic time the steps ran under load (a step a dead run left is run again and counted once),
  against soak_h and shock_minutes, and the wall time the campaign spent without load (resumes) within
  max_interruption_s; all scaled by time_scale, nothing else;
- loads (soak, shock): each load (inference, storage, training) put in flight at least DELIVERED_SHARE of what the phase
  asked of it (its peak x the phase's factor, per s of the phase): a load bounded below the shock's rate, its workers
  all busy (ticks skipped) or past its job limit did not offer the phase, so the shock did not peak all three together;
- storage: the p99 of the storage load's checkpoint chunk (written whole, fsynced, read back on the hot tier, from the
  node the storage-jitter drill delays) under the shock, outside fault windows, within the time WORKERS writes in flight
  allow at the phase's rate: slower, the load can no longer deliver the phase's MiB/s (Little's law), whatever the
  site's disks; and none of those chunks failed; its measured value carries the MiB/s written;
- training: every sbatch of the load accepted, and no job of it lost (its last run ended without completing or a
  requeue, as sacct tells at the verdict, every run of it read: the requeues are listed); a campaign that submitted no
  job fails; the GPU-seconds Slurm accounted (AllocTRES gres/gpu x elapsed, over its runs) against those requested
  (ReqTRES gres/gpu x the s each job runs), where every completed job must have had them: one that got no GPU, or
  ended short of its time, fails it;
- lending controller (shock): its /metrics answered at every look of the shock (runbooks.acceptance.lending), its
  last decision never older than LendingControllerDown's threshold, never paused, at least one decision on demand
  data (not no-data), and, where it started a lend during the shock, a node lent to inference by the shock's end:
  the decisions, lends and reclaims are listed in its measured value;
- training yields to inference (shock): the controller's lends counter rose at a look of the shock, a run of a
  training job of the load ended in a requeue on one of its flex nodes within the shock (sacct's End and NodeList),
  and the shock's inference criteria passed: inference won the peak while training gave way;
- the drills' own verdicts, every failure with its SOP, and Alertmanager read at every look.

Pure: the runbook hands in what its store holds (runbooks.acceptance.campaign).
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import quantiles
from typing import Any

from components.scheduling.lending_decision import Reason
from components.site.acceptance import Acceptance
from runbooks.acceptance.lending import DECISION_SERIES, rises
from runbooks.acceptance.load import LOST_STATES, WORKERS, JobRecord
from runbooks.acceptance.store import FAILED, AlertSpan, Failure, FaultRecord

LOADS = {"inference": ("requests/s", 1.0), "storage": ("MiB/s", 1.0), "training": ("jobs/h", 3600.0)}
"""Each load the campaign runs (runbooks.acceptance.load), the unit its rate is shown in, and s per that unit's time."""
DELIVERED_SHARE = 0.9
"""Share of what a phase asked of a load (its rate x the s it ran) that it must have put in flight: a load that kept
its rate issues a tick at its start and every 1/rate s after, at least the whole; a skipped tick (every worker busy),
a bound below the phase's rate or a job limit shows far under."""
CLOCK_SLACK_S = 2.0
"""s a completed training job may fall short of the time it runs: its end is read off a 1 s clock (date +%s) and
sacct's ElapsedRaw counts whole seconds."""
LOADED_STEPS = ("drill:", "shock", "soak")
"""Steps (prefixes) that run under load: their monotonic run time is the soak's measured duration."""
CRITICAL = "critical"
Intervals = list[tuple[float, float]]


@dataclass(frozen=True)
class Criterion:
    name: str
    phase: str
    """soak, shock or campaign."""
    passed: bool
    measured: str
    objective: str
    source: str

    def line(self) -> str:
        return (f"{self.phase} {self.name}: {'PASS' if self.passed else 'FAIL'} - measured {self.measured}; "
                f"objective {self.objective}; source: {self.source}")

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Measurements:
    """What one campaign's store holds, as the verdict reads it."""

    started_at: float
    """time.time() the campaign started (its first run)."""
    ended_at: float
    """time.time() of the verdict."""
    steps: dict[str, tuple[float, float | None, dict[str, Any]]]
    samples: dict[str, list[tuple[float, float]]]
    faults: list[FaultRecord]
    alerts: list[AlertSpan]
    failures: list[Failure]
    poll_s: float
    """s between two looks of the watcher."""
    storage_rate: tuple[float, float] | None
    """The storage load's chunks per second at the peak and its bound (runbooks.acceptance.load.storage_load), or
    None: no storage load ran."""
    training_states: dict[str, JobRecord]
    """The training load's jobs (runbooks.acceptance.load `training_job` samples) by id: their sacct state and
    GPU-seconds at the verdict; a job Slurm has no record of is absent."""
    lending: tuple[str, float, tuple[str, ...]] | None
    """Where the lending controller's /metrics were read, after how many s without a decision it counts as down, and
    the flex nodes it lends from (runbooks.acceptance.lending.ControllerSampler), or None: the campaign did not watch
    it."""


def judge(spec: Acceptance, measured: Measurements) -> list[Criterion]:
    windows = _fault_windows(spec, measured)
    criteria = []
    faults = [(s, e) for _, s, e in windows]
    for phase, intervals in _phases(measured.steps).items():
        served = _inference(spec, phase, intervals, measured.samples, faults)
        criteria += served
        if phase != "campaign":
            criteria += [_delivery(load, phase, intervals, measured.samples) for load in LOADS]
        if phase == "shock":
            # Judged under the shock, where the hot tier takes 3x the peak: the scaled test campaign's soak is all
            # drills, the partition among them cutting the very storage path (a soak with steady time is future work).
            criteria.append(_storage(phase, spec.shock_factor, intervals, measured, faults))
            criteria.append(_lending(intervals, measured))
            criteria.append(_yielded(intervals, measured, served))
    criteria += _health(spec, measured, windows)
    criteria += _training(measured)
    criteria += _duration(spec, measured)
    criteria += _drills(measured)
    return criteria


def loaded_s(steps: dict[str, tuple[float, float | None, dict[str, Any]]]) -> float:
    """s the finished steps ran under load, by the monotonic clock of the run that finished each."""
    return sum(float(detail.get("ran_s", 0)) for name, (_, finished, detail) in steps.items()
               if finished is not None and name.startswith(LOADED_STEPS))


# --- phases ------------------------------------------------------------------------------------


def _phases(steps: dict[str, tuple[float, float | None, dict[str, Any]]]) -> dict[str, Intervals]:
    loaded = {name: (started, finished) for name, (started, finished, _) in steps.items()
              if finished is not None and name.startswith(LOADED_STEPS)}
    return {"soak": [v for k, v in loaded.items() if k != "shock"],
            "shock": [v for k, v in loaded.items() if k == "shock"],
            "campaign": list(loaded.values())}


def _within(at: float, intervals: Intervals) -> bool:
    return any(start <= at <= end for start, end in intervals)


def _fault_windows(spec: Acceptance, measured: Measurements) -> list[tuple[str, float, float]]:
    """(drill, injected, recovery deadline) of every fault: its injection until its revert plus recover_within_s."""
    recover = {name: spec.scaled(d.recover_within_s) for name, d in spec.named_drills()}
    return [(f.drill, f.injected_at, (f.reverted_at or measured.ended_at) + recover.get(f.drill, 0))
            for f in measured.faults]


# --- criteria ----------------------------------------------------------------------------------


def _p95(values: Sequence[float]) -> float:
    return quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def _inference(spec: Acceptance, phase: str, intervals: Intervals, samples: dict[str, list[tuple[float, float]]],
               faults: Intervals) -> list[Criterion]:
    in_phase = [(at, v) for at, v in samples.get("inference_latency_s", []) if _within(at, intervals)]
    errors = [v for at, v in samples.get("inference_error", []) if _within(at, intervals)]
    source = "the inference load's own timings through the gateway"
    p95_objective = f"p95 <= {spec.inference_p95_ms} ms (inference_p95_ms)"
    error_objective = f"<= {spec.inference_error_pct:g} % failed (inference_error_pct)"
    # Where every request of the phase fell in a fault window (drills that fill the phase), all of them are judged:
    # a fault can only raise the p95, so this is the stricter reading, never a pass for want of data.
    steady = [v for at, v in in_phase if not _within(at, faults)]
    latencies = steady or [v for _, v in in_phase]
    if not latencies:
        p95 = Criterion("inference p95 latency", phase, False, "no request measured", p95_objective, source)
    else:
        ms = 1000 * _p95(latencies)
        p95 = Criterion("inference p95 latency", phase, ms <= spec.inference_p95_ms,
                        f"{ms:.0f} ms over {len(latencies)} requests", p95_objective,
                        f"{source}, {'outside fault windows' if steady else 'fault windows included'}")
    if not errors:
        failed = Criterion("inference errors", phase, False, "no request measured", error_objective, source)
    else:
        pct = 100 * sum(errors) / len(errors)
        failed = Criterion("inference errors", phase, pct <= spec.inference_error_pct,
                           f"{pct:.2f} % of {len(errors)} requests failed", error_objective,
                           f"{source}, drills included")
    return [p95, failed]


def _health(spec: Acceptance, measured: Measurements, windows: list[tuple[str, float, float]]) -> list[Criterion]:
    source = f"Alertmanager's active alerts, as the campaign's watcher saw them (every {measured.poll_s:g} s)"
    critical = [a for a in measured.alerts if a.severity == CRITICAL]
    if not critical:
        return [Criterion("critical alerts", "campaign", True, "none fired", "none firing longer than allowed",
                          source)]
    criteria = []
    for alert in critical:
        fired = alert.last_seen - alert.first_seen
        # Drills follow each other within a recovery deadline, so a fault's alert can start inside the window of the
        # one before: an alert raised while faults hold or recover must clear by the last of their deadlines.
        during = [(end, drill) for drill, start, end in windows if start <= alert.first_seen <= end]
        if not during:
            allowed, why = spec.scaled(spec.critical_alert_max_s), "critical_alert_max_s: no drill raised it"
        else:
            allowed = max(during)[0] - alert.first_seen
            why = f"raised during {', '.join(f'drill:{d}' for _, d in sorted(during))}: clear by the last recovery " \
                  "deadline"
        where = f" on {alert.place}" if alert.place else ""
        criteria.append(Criterion(f"critical alert {alert.name}{where}", "campaign", fired <= allowed,
                                  f"fired {fired:.1f} s", f"<= {allowed:.1f} s ({why})", source))
    return criteria


def _seconds(intervals: Intervals) -> float:
    return sum(end - start for start, end in intervals)


def _unit_size(load: str, samples: dict[str, list[tuple[float, float]]]) -> float:
    """What one request of the load carries in its unit (a storage chunk's MiB; 1 otherwise), as the load said."""
    return max((v for _, v in samples.get(f"{load}_unit_size", [])), default=1.0)


def _figure(value: float) -> str:
    """Four significant digits, never in e-notation (216,000 jobs/h, 0.3 requests/s)."""
    return f"{value:.4g}" if value < 10_000 else f"{value:,.0f}"


def _delivery(load: str, phase: str, intervals: Intervals, samples: dict[str, list[tuple[float, float]]]
              ) -> Criterion:
    """What the phase asked of the load against what it put in flight: the offered and measured rates of the report."""
    unit, per = LOADS[load]
    size = _unit_size(load, samples) * per
    asked = max((v for at, v in samples.get(f"{load}_asked_per_s", []) if _within(at, intervals)), default=None)
    seconds = sum(v for at, v in samples.get(f"{load}_ran_s", []) if _within(at, intervals))
    issued = sum(1 for at, _ in samples.get(f"{load}_latency_s", []) if _within(at, intervals))
    skipped = sum(1 for at, _ in samples.get(f"{load}_skipped", []) if _within(at, intervals))
    objective = f">= {DELIVERED_SHARE:.0%} of the rate the phase asked, over the s it ran"
    source = (f"the {load} load's requests put in flight (by their start), the rate each step asked of it (peak x the "
              "phase's factor) and the s it ran")
    if asked is None or seconds <= 0:
        return Criterion(f"{load} load", phase, False, "never ran (no load)", objective, source)
    rate = issued / seconds
    return Criterion(f"{load} load", phase, rate >= DELIVERED_SHARE * asked,
                     f"{_figure(rate * size)} {unit} offered of {_figure(asked * size)} asked over {seconds:.1f} s "
                     f"({issued} requests, {skipped} ticks skipped)", objective, source)


def _storage(phase: str, factor: float, intervals: Intervals, measured: Measurements,
             faults: Intervals) -> Criterion:
    in_phase = [(at, v) for at, v in measured.samples.get("storage_latency_s", []) if _within(at, intervals)]
    steady = [v for at, v in in_phase if not _within(at, faults)]
    latencies = steady or [v for _, v in in_phase]  # as for inference: the stricter reading, never a pass by default
    outcomes = [(at, v) for at, v in measured.samples.get("storage_error", []) if _within(at, intervals)]
    failed = int(sum(v for at, v in outcomes if not (steady and _within(at, faults))))
    # Over the whole phase: what the hot tier took, fault windows and all.
    written = (sum(1 for _, v in outcomes if not v) * _unit_size("storage", measured.samples)
               / max(_seconds(intervals), 1e-9))
    skipped = sum(1 for at, _ in measured.samples.get("storage_skipped", []) if _within(at, intervals))
    source = "the storage load's checkpoint chunks on the hot tier (written whole, fsynced, read back), " + (
        "outside fault windows" if steady else "fault windows included")
    if measured.storage_rate is None or not latencies:
        return Criterion("storage p99 latency", phase, False, "no checkpoint write measured",
                         "p99 within what the phase's rate allows, none failed", source)
    per_s = min(measured.storage_rate[0] * factor, measured.storage_rate[1])
    allowed = WORKERS / per_s
    p99 = quantiles(latencies, n=100, method="inclusive")[-1] if len(latencies) > 1 else latencies[0]
    return Criterion("storage p99 latency", phase, p99 <= allowed and not failed,
                     f"{p99:.3f} s over {len(latencies)} chunks, {failed} failed; {written:.3g} MiB/s written in "
                     f"the phase ({skipped} ticks skipped with {WORKERS} in flight)",
                     f"p99 <= {allowed:.3f} s ({WORKERS} chunks in flight at {per_s:g}/s: slower, the load cannot "
                     "deliver the phase's MiB/s), none failed", source)


def _increase(points: list[tuple[float, float]]) -> float:
    """A counter's increase over its points in time order; a drop is a restarted controller counting from 0 again
    (as Prometheus's increase() reads it)."""
    return sum(b if b < a else b - a for (_, a), (_, b) in zip(points, points[1:], strict=False))


def _lending(intervals: Intervals, measured: Measurements) -> Criterion:
    """Whether the controller decided through the shock, on data, and when it lent, whether a node reached inference.
    Counters are read from the last look before the shock (the drills' loads sample it too) to the shock's last."""
    where, stale_s, _ = measured.lending or ("nowhere", 0.0, ())
    objective = (f"read at every look; its last decision at most {stale_s:g} s old (LendingControllerDown's "
                 "threshold); not paused; deciding on demand data; every lend started reaching inference")
    source = f"the lending controller's /metrics at {where}, read by the campaign every look of the shock"
    if measured.lending is None:
        return Criterion("lending controller", "shock", False, "not watched (no /metrics to read)", objective, source)
    samples, start = measured.samples, min(s for s, _ in intervals) if intervals else 0.0
    answered = sorted(at for at, _ in samples.get("lending_decision_age_s", []))
    # Each answered look of the shock, and the last one before it as the counters' baseline. A counter the renderer
    # has not shown yet (nothing counted since the controller started) is 0 at that look.
    window = [at for at in answered if at < start][-1:] + [at for at in answered if _within(at, intervals)]

    def in_shock(series: str) -> list[tuple[float, float]]:
        return sorted((at, v) for at, v in samples.get(series, []) if _within(at, intervals))

    def over_shock(series: str) -> list[tuple[float, float]]:
        seen = dict(samples.get(series, []))
        return [(at, seen.get(at, 0.0)) for at in window]

    ages = [v for _, v in in_shock("lending_decision_age_s")]
    unreadable = len(in_shock("lending_unreadable"))
    if not ages:
        return Criterion("lending controller", "shock", False,
                         f"no answer at any look of the shock ({unreadable} unreadable)", objective, source)
    decisions = {series[len(DECISION_SERIES):]: increase for series in samples if series.startswith(DECISION_SERIES)
                 if (increase := _increase(over_shock(series))) > 0}
    on_data = sum(n for decision, n in decisions.items() if not decision.endswith(f"/{Reason.NO_DATA.value}"))
    lends, reclaims = _increase(over_shock("lending_lends")), _increase(over_shock("lending_reclaims"))
    lent = max((v for _, v in in_shock("lending_nodes_lent")), default=0.0)
    done = _increase(over_shock("lending_lends_done"))
    paused = sum(v > 0 for _, v in in_shock("lending_paused"))
    missed = [why for why, failed in (
        (f"{unreadable} looks unanswered", unreadable > 0),
        (f"a decision {max(ages):.1f} s old", max(ages) > stale_s),
        (f"paused at {paused} looks", paused > 0),
        ("no decision on demand data (inference's peak unseen)", not on_data),
        (f"{lends:g} lends started, no node lent to inference", lends > 0 and not (lent or done))) if failed]
    listed = ", ".join(f"{decision} x{n:g}" for decision, n in sorted(decisions.items())) or "none"
    measured_value = (f"{len(ages)} looks answered, {unreadable} not; last decision at most {max(ages):.1f} s old; "
                      f"decisions: {listed}; lends started {lends:g}, completed {done:g}, reclaims {reclaims:g}, "
                      f"at most {lent:g} nodes lent")
    return Criterion("lending controller", "shock", not missed,
                     f"{'; '.join(missed)} - {measured_value}" if missed else measured_value, objective, source)


def _yielded(intervals: Intervals, measured: Measurements, served: Sequence[Criterion]) -> Criterion:
    """Whether inference won the shock's peak: the lending controller lent a flex node during the shock, training
    yielded it (a run of a training job of the load ended in a requeue on a flex node within the shock, as sacct
    accounts it), and inference was served meanwhile (the shock's inference criteria met)."""
    where, _, pool = measured.lending or ("nowhere", 0.0, ())
    objective = ("a lend during the shock, a training job of the load requeued on a flex node within it, and the "
                 "shock's inference criteria met")
    source = (f"the lending controller's lends counter at {where}, read every look; sacct's runs of the training "
              "load's jobs (End, NodeList) at the verdict; the shock's inference criteria")
    if not intervals:
        return Criterion("training yields to inference", "shock", False, "no shock ran", objective, source)
    start, end = min(s for s, _ in intervals), max(e for _, e in intervals)
    lent_at = next((at for at in rises(measured.samples, "lending_lends") if _within(at, intervals)), None)
    jobs = {str(int(v)) for _, v in measured.samples.get("training_job", [])}
    # sacct's End has whole seconds: a requeue the clock put up to CLOCK_SLACK_S before the shock's start counts.
    yielded = sorted((at, job, nodes, state) for job, record in measured.training_states.items() if job in jobs
                     for at, state, nodes in record.requeues
                     if nodes in pool and start - CLOCK_SLACK_S <= at <= end + CLOCK_SLACK_S)
    unserved = [f"{c.name} {c.measured}" for c in served if not c.passed]
    missed = [why for why, failed in (
        ("no lend during the shock", lent_at is None),
        (f"no training job of the load requeued on a flex node ({', '.join(pool) or 'none known'}) during the shock",
         not yielded),
        (f"inference not served ({'; '.join(unserved)})", bool(unserved))) if failed]
    shown = [f"lent at {lent_at - start:.1f} s into the shock" if lent_at is not None else "no lend"]
    shown += [f"job {job} requeued on {nodes} at {at - start:.1f} s ({state})" for at, job, nodes, state in yielded[:3]]
    shown.append("the shock's inference: " + "; ".join(f"{c.name} {c.measured}" for c in served))
    value = ", ".join(shown[:-1]) + f"; {shown[-1]}"
    return Criterion("training yields to inference", "shock", not missed,
                     f"{'; '.join(missed)} - {value}" if missed else value, objective, source)


def _training(measured: Measurements) -> list[Criterion]:
    refused = [v for _, v in measured.samples.get("training_error", [])]
    jobs = sorted({str(int(v)) for _, v in measured.samples.get("training_job", [])})
    source = "the training load's sbatch exits"
    if not refused:
        submitted = Criterion("training jobs refused", "campaign", False, "no job submitted", "none refused", source)
    else:
        submitted = Criterion("training jobs refused", "campaign", not any(refused),
                              f"{sum(refused):g} of {len(refused)} submissions refused", "none refused", source)
    states = {job: record.state for job, record in measured.training_states.items()}
    lost = sorted(j for j in jobs if states.get(j) in LOST_STATES)
    unknown = [j for j in jobs if j not in states]
    completed = [j for j in jobs if states.get(j) == "COMPLETED"]
    records = measured.training_states
    requeues = sorted((at, j, state) for j in jobs if j in records for at, state, _ in records[j].requeues)
    # A job sacct has no record of is unaccounted for, as good as lost: a Slurm that cannot be asked proves nothing.
    # Requeues (a lend's preemption, a drill's node failure) are the expected reaction, listed here and on the report's
    # timeline; a requeued job still counts lost if its last run ended so.
    ended = Criterion(
        "training jobs lost", "campaign", bool(jobs) and not lost and not unknown,
        (f"{len(lost)} of {len(jobs)} lost ({', '.join(f'{j} {states[j]}' for j in lost[:5])})"
         if lost else f"none of {len(jobs)} lost") + f"; {len(completed)} completed"
        + (f"; {len(unknown)} with no record in sacct ({', '.join(unknown[:5])})" if unknown else "")
        + f"; {len(requeues)} requeues" + (f" ({', '.join(f'{j} {state}' for _, j, state in requeues[:5])})"
                                            if requeues else ""),
        "none ended without completing or a requeue, each accounted for",
        "sacct's allocation records of every run of the load's jobs (--duplicates) at the verdict")
    return [submitted, ended, _gpu_seconds(measured, jobs, completed)]


def _gpu_seconds(measured: Measurements, jobs: Sequence[str], completed: Sequence[str]) -> Criterion:
    """What Slurm allocated, not what the job asked: a job run without its GPUs did no training, however long it ran,
    and a completed job must have had its GPUs for the time it runs (one that ended early trained less)."""
    records = measured.training_states
    job_s = max((v for _, v in measured.samples.get("training_job_s", [])), default=0.0)
    delivered = sum(records[j].gpu_s for j in jobs if j in records)
    requested = sum(records[j].requested_gpus * job_s for j in jobs if j in records)
    starved = [j for j in completed if records[j].gpu_s <= 0]
    short = [j for j in completed if j not in starved
             and records[j].gpu_s < records[j].requested_gpus * max(job_s - CLOCK_SLACK_S, 0)]
    return Criterion(
        "training GPU-seconds", "campaign", bool(completed) and not starved and not short,
        f"{delivered:g} GPU-s delivered of {requested:g} requested by {len(jobs)} jobs, {len(completed)} completed"
        + (f"; {len(starved)} completed with no GPU allocated ({', '.join(starved[:5])})" if starved else "")
        + (f"; {len(short)} completed short of their request ("
           + ", ".join(f"{j} {records[j].gpu_s:g} of {records[j].requested_gpus * job_s:g}" for j in short[:5]) + ")"
           if short else ""),
        f"every completed job delivered the GPUs it asked x its {job_s:g} s (less {CLOCK_SLACK_S:g} s its clock and "
        "sacct's whole seconds round away), at least one completed",
        "sacct's AllocTRES gres/gpu x ElapsedRaw of each run and ReqTRES gres/gpu, at the verdict; the s each job runs "
        "from the training load")


def _duration(spec: Acceptance, measured: Measurements) -> list[Criterion]:
    loaded = loaded_s(measured.steps)
    target = spec.scaled(spec.soak_h * 3600)
    shock = measured.steps.get("shock")
    shock_s = float(shock[2].get("ran_s", 0)) if shock is not None and shock[1] is not None else 0.0
    shock_target = spec.scaled(spec.shock_minutes * 60)
    unloaded = max(measured.ended_at - measured.started_at - loaded, 0.0)
    allowed = spec.scaled(spec.max_interruption_s)
    scale = f" x time_scale {spec.time_scale:g}" if spec.time_scale != 1 else ""
    return [
        Criterion("soak duration", "soak", loaded >= target, f"{loaded:.1f} s under load",
                  f">= {target:g} s (soak_h {spec.soak_h}{scale})",
                  "the monotonic run time of the drill, shock and soak steps that finished (a step a dead run "
                  "left is run again and counted once)"),
        Criterion("shock duration", "shock", shock_s >= shock_target, f"{shock_s:.1f} s at "
                  f"{spec.shock_factor:g}x the peak", f">= {shock_target:g} s (shock_minutes {spec.shock_minutes}"
                  f"{scale})", "the shock step's monotonic run time"),
        Criterion("continuity", "campaign", unloaded <= allowed, f"{unloaded:.1f} s without load in "
                  f"{measured.ended_at - measured.started_at:.1f} s", f"<= {allowed:g} s (max_interruption_s"
                  f"{scale})", "the wall time from the campaign's start to its verdict, less its time under load"),
    ]


def _drill(name: str, detail: dict[str, Any]) -> Criterion:
    missed = [r["name"] for r in detail.get("reactions", []) if not r["ok"]]
    if detail.get("detection_s", 0) is None:
        missed.insert(0, "not detected")
    if detail.get("recovery_s", 0) is None:
        missed.insert(0, "not recovered")
    measured = detail.get("error") or (f"{detail.get('verdict')}: {', '.join(missed)}" if missed else
                                       f"detected after {detail.get('detection_s')} s, recovered after "
                                       f"{detail.get('recovery_s')} s")
    return Criterion(name, "soak", detail.get("verdict") != FAILED, str(measured),
                     "detected and recovered by its deadlines, every reaction met", "the drill's alert and probe")


def _drills(measured: Measurements) -> list[Criterion]:
    criteria = [_drill(name, detail) for name, (_, finished, detail) in measured.steps.items()
                if name.startswith("drill:") and finished is not None]
    orphans = sorted({f.mode for f in measured.failures if f.sop is None})
    criteria.append(Criterion("failures with an SOP", "campaign", not orphans,
                              f"fired with no SOP (or one without its sections): {', '.join(orphans)}" if orphans else
                              f"{len(measured.failures)} failures logged, each with its SOP",
                              "every failure has docs/sop/<sop>.md with its sections", "the failure log"))
    blind = len(measured.samples.get("alertmanager_unreadable", []))
    criteria.append(Criterion("alertmanager read", "campaign", not blind, f"unreadable {blind} times",
                              "read at every look (an alert may have fired unlogged)", "the campaign's watcher"))
    return criteria
