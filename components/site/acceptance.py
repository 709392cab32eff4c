"""The acceptance section of the site spec (`gpu-cluster:acceptance`): the campaign that must pass before any team is
onboarded (runbooks/acceptance runs it; docs/acceptance.md).

A campaign is a soak of `soak_h` hours under the peak load, a shock of `shock_factor` times that peak on training,
inference and storage at once, and one drill per failure mode, each with what must happen and by when. Every
duration is multiplied by `time_scale`: 1 is the real 168 h campaign, the tests run the same campaign at a few
thousandths of it. The defaults are named here, the one place the acceptance numbers live.
"""

from collections import Counter
from enum import StrEnum
from typing import Annotated, Final, Self

from pydantic import Field, model_validator

from components.site.defaults import GATE_MAX_INFERENCE_ERROR_PCT
from components.site.types import Float, Int, Spec

SOAK_H: Final = 168
"""h of continuous load: the mission's "168 hours continuous load (7 days simulated production)"."""
SHOCK_FACTOR: Final = 3.0
"""Times the peak that training, inference and storage reach together in the shock (the mission's 3x)."""
SHOCK_MINUTES: Final = 60
"""minutes the shock lasts: longer than every alert's `for` (15 min at most), so a shock hides nothing."""
PEAK_WINDOW_DAYS: Final = 14
"""days of Prometheus history the peak is measured over: two weeks hold two weekly cycles."""
CHECKPOINT_GIB: Final = 300
"""GiB one checkpoint dump writes: the mission's "a training job dumping 300GB"."""
INFERENCE_P95_MS: Final = 2000
"""ms; the p95 latency objective of requests through the gateway."""
INFERENCE_ERROR_PCT: Final = GATE_MAX_INFERENCE_ERROR_PCT
"""% of the campaign's requests through the gateway that may fail, drills included: the error budget. The rollout
gate's own inference error threshold (1 %), so a cluster that passed acceptance is not held by the gate at once."""
CRITICAL_ALERT_MAX_S: Final = 900
"""s a critical alert no drill raised may fire before the campaign fails: a page acknowledged and its incident
mitigated within a quarter hour (a site's choice, the on-call response the SOPs are written for); one a drill raised
must clear by that drill's recovery deadline instead."""
MAX_INTERRUPTION_S: Final = 3600
"""s of the campaign's wall time it may spend without its load (a dead run until its resume, with the step it redoes)
and still count as one continuous soak (the mission's "168 hours continuous load"): a run resumed later starts over."""

# Every duration of the campaign is compared with time.monotonic() differences after scaling: a week at most.
Seconds = Annotated[Int, Field(gt=0, le=7 * 86_400)]
# An alert name as Prometheus rules name them (components/monitoring/alerts.py).
AlertName = Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=100)]
# A file name under docs/sop/ without `.md`: kebab case, as components.monitoring.alerts.kebab writes alert names.
SopName = Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=100)]


# A drill kind: the name of its module under runbooks/acceptance/drills/ (a Python module name), which gpuctl acceptance
# looks up; the site model holds no list of the modules (the runbooks sit above it), only the failure modes it requires.
DrillName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$", max_length=63)]


class DrillKind(StrEnum):
    """The failure modes the mission requires a drill for: acceptance.drills has each once at least. A site may drill
    more kinds (any module of runbooks/acceptance/drills/, with its SOP)."""

    NODE_FAILURE = "node_failure"
    """A node's power cut through its BMC (the spec's BMC credentials), or its Slurm daemon stopped."""
    NETWORK_PARTITION = "network_partition"
    """A node cut off from the controllers and the storage."""
    STORAGE_JITTER = "storage_jitter"
    """Delay on the storage path the checkpoint writes and the mover use."""
    MODEL_HOT_SWAP = "model_hot_swap"
    """A served model replaced by a new version while inference runs at the peak."""


class Drill(Spec):
    kind: DrillName
    """Which drill: a DrillKind, or another module of runbooks/acceptance/drills/ by name (gpuctl acceptance refuses a
    kind no module implements, naming the field)."""
    sop: SopName
    """The standard operating procedure the failure is logged under: docs/sop/<sop>.md must exist."""
    alert: AlertName | None = None
    """The alert that must fire while the fault holds (None: the drill's own measurement detects it)."""
    hold_s: Seconds
    """s the fault stays in place before the runbook reverts it."""
    detect_within_s: Seconds
    """s from injection by which the fault must be detected (the alert firing, or the measurement over objective)."""
    recover_within_s: Seconds
    """s from the revert by which service must be back (alert resolved, node serving, latency under objective)."""
    revert_after_s: Seconds
    """s from injection after which the node itself reverts the fault, even if the runbook died (a timer armed on
    the node before the fault)."""
    delay_ms: Annotated[Int, Field(gt=0, le=60_000)] | None = None
    """ms of delay added to the storage path (storage_jitter only)."""

    @model_validator(mode="after")
    def _deadlines(self) -> Self:
        if self.detect_within_s > self.hold_s:
            raise ValueError(f"detect_within_s ({self.detect_within_s}) must not exceed hold_s ({self.hold_s}): "
                             "a fault reverted before it must be detected proves nothing")
        if self.revert_after_s <= self.hold_s:
            raise ValueError(f"revert_after_s ({self.revert_after_s}) must exceed hold_s ({self.hold_s}), or the "
                             "node's own deadline reverts the fault before the drill does")
        if (self.delay_ms is None) == (self.kind == DrillKind.STORAGE_JITTER):
            raise ValueError("delay_ms is required for storage_jitter and only for it")
        return self


DEFAULT_DRILLS: Final = (
    Drill(kind=DrillKind.NODE_FAILURE, sop="node-power-loss", alert="SlurmNodesUnavailable", hold_s=1800,
          detect_within_s=1500, recover_within_s=900, revert_after_s=3600),
    Drill(kind=DrillKind.NETWORK_PARTITION, sop="network-partition", alert="DcgmExporterDown", hold_s=900,
          detect_within_s=600, recover_within_s=600, revert_after_s=1800),
    Drill(kind=DrillKind.STORAGE_JITTER, sop="storage-jitter", alert="StorageJitter", hold_s=900, detect_within_s=300,
          recover_within_s=300, revert_after_s=1800, delay_ms=200),
    Drill(kind=DrillKind.MODEL_HOT_SWAP, sop="model-hot-swap", hold_s=600, detect_within_s=600,
          recover_within_s=300, revert_after_s=1800),
)
"""One drill per failure mode of the mission. Detection deadlines leave room for each alert's `for` (15 min for
SlurmNodesUnavailable, 5 min for DcgmExporterDown, 1 min for StorageJitter after its 2 min window) plus scrape and
evaluation; a hot-swap must be seen done (every answer from the new version) within its hold, and raises no alert
(ModelRequestsFailing fires only when the swap fails requests)."""


class Peak(Spec):
    """The peak load, declared: used when Prometheus has no history over peak_window_days yet."""

    training_jobs_per_h: Annotated[Float, Field(gt=0, le=100_000)] = 120.0
    """Slurm job submissions per hour."""
    inference_rps: Annotated[Float, Field(gt=0, le=100_000)] = 50.0
    """Requests per second through the gateway."""
    storage_write_mib_s: Annotated[Float, Field(gt=0, le=1_000_000)] = 2000.0
    """MiB/s written to the hot tier."""


class PeakSource(StrEnum):
    PROMETHEUS = "prometheus"
    """The highest hourly rate over peak_window_days, from Prometheus (the gateway's and Slurm exporter's counters);
    the declared peak where there is no history."""
    DECLARED = "declared"
    """The declared peak, always."""


class Acceptance(Spec):
    soak_h: Annotated[Int, Field(gt=0, le=24 * 60)] = SOAK_H
    """h of continuous load at the peak (scaled by time_scale)."""
    shock_factor: Annotated[Float, Field(ge=1, le=10)] = SHOCK_FACTOR
    """Times the peak that training, inference and storage run at together during the shock."""
    shock_minutes: Annotated[Int, Field(gt=0, le=24 * 60)] = SHOCK_MINUTES
    """minutes the shock lasts (scaled by time_scale)."""
    peak_source: PeakSource = PeakSource.PROMETHEUS
    """Where the peak comes from."""
    peak_window_days: Annotated[Int, Field(gt=0, le=90)] = PEAK_WINDOW_DAYS
    """days of history the peak is measured over: within monitoring.hot_retention_days when the peak comes from
    Prometheus (rule peak-window-within-hot-retention, components.site.rules)."""
    peak: Peak = Peak()
    """The declared peak."""
    max_inference_rps: Annotated[Float, Field(gt=0, le=100_000)] = 500.0
    """Requests per second the inference load never exceeds, whatever the peak says."""
    max_training_jobs: Annotated[Int, Field(gt=0, le=100_000)] = 500
    """Training jobs the load keeps queued or running at most."""
    max_storage_write_mib_s: Annotated[Float, Field(gt=0, le=1_000_000)] = 10_000.0
    """MiB/s the storage load never exceeds."""
    checkpoint_gib: Annotated[Int, Field(gt=0, le=1 << 20)] = CHECKPOINT_GIB
    """GiB of one checkpoint dump (scaled by time_scale, like every size the tests write)."""
    inference_p95_ms: Annotated[Int, Field(gt=0, le=600_000)] = INFERENCE_P95_MS
    """ms; p95 latency objective of the load's requests through the gateway, over each phase (soak, shock, the whole
    campaign) outside fault windows (a fault's injection until its recovery deadline). Not scaled: a latency is a
    latency at any time_scale."""
    inference_error_pct: Annotated[Float, Field(ge=0, le=100)] = INFERENCE_ERROR_PCT
    """%; the error budget: requests of the load that may fail over each phase, drills included (a timeout, a
    refused connection and an HTTP error all count)."""
    critical_alert_max_s: Seconds = CRITICAL_ALERT_MAX_S
    """s a critical alert no drill raised may fire, as the campaign's watcher saw it (scaled by time_scale)."""
    max_interruption_s: Seconds = MAX_INTERRUPTION_S
    """s of wall time the campaign may spend without its load, resumes included (scaled by time_scale)."""
    drills: Annotated[list[Drill], Field(min_length=1)] = list(DEFAULT_DRILLS)
    """The drills, in the order they run; each failure mode once at least."""
    # Multiplies every duration and size; 1e-6 of a week is still 0.6 s.
    time_scale: Annotated[Float, Field(gt=0, le=1)] = 1.0
    """Factor on every duration and size of the campaign: 1 is the real campaign; a rehearsal runs the same steps
    shorter (the tests use a few thousandths)."""
    alertmanager_url: Annotated[str, Field(pattern=r"^https?://\S+[^/]$")] = (
        "http://alertmanager-operated.monitoring.svc:9093")
    """Alertmanager whose API lists the alerts firing during the campaign (example host: set it)."""

    @model_validator(mode="after")
    def _complete(self) -> Self:
        missing = [k.value for k in DrillKind if k not in {d.kind for d in self.drills}]
        if missing:
            raise ValueError(f"drills must cover every failure mode: no drill for {', '.join(missing)}")
        shock = self.peak.inference_rps * self.shock_factor
        if self.peak_source == PeakSource.DECLARED and shock > self.max_inference_rps:
            raise ValueError(f"the shock's {shock:g} requests/s (peak.inference_rps x shock_factor) exceed "
                             f"max_inference_rps {self.max_inference_rps:g}")
        return self

    def scaled(self, seconds: float) -> float:
        """A campaign duration in seconds as this campaign runs it."""
        return seconds * self.time_scale

    def named_drills(self) -> list[tuple[str, Drill]]:
        """Each drill with its name, in the order they run: its kind, or `<kind>#<n>` (the n-th of them) for a kind
        drilled more than once. The campaign's step (`drill:<name>`), its criterion, its fault records and the rollout
        gate's holds carry it, so two drills of one kind run and are judged each on its own."""
        counts = Counter(d.kind for d in self.drills)
        seen: Counter[str] = Counter()
        named = []
        for drill in self.drills:
            seen[drill.kind] += 1
            named.append((drill.kind if counts[drill.kind] == 1 else f"{drill.kind}#{seen[drill.kind]}", drill))
        return named
