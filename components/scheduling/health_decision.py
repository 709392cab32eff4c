"""What the node health controller does with each GPU node: one pure function of the DCGM findings, Slurm's and
Kubernetes' view of every node, the diagnoses run so far and the spec's `health` settings.

The controller loop (runbooks/health/controller.py) and the tests call `decide`; nothing else decides. A node goes

    healthy --finding--> suspect (drained in Slurm, cordoned in Kubernetes; running work finishes, or is requeued
                                  after health.requeue_after_s where Slurm can requeue it)
            --idle in both, in a maintenance window--> diagnosing (`dcgmi diag -r <health.diag_level>`)
            --passed, no finding left--> returned (resumed, uncordoned)
            --failed, or suspect again soon after a return, failures_before_handoff times--> handed to a human

and never: past the drain budget (max_drained_pct of the site's GPU nodes, counting every node the controller
holds), onto a node someone else holds (lent by the lending controller, drained or cordoned by anyone else, down in
Slurm, labelled HOLD_LABEL by a drill or an operator), or on data it does not have: when Prometheus, Slurm or
kubectl cannot be read, or no node has a fresh DCGM sample, it pauses whole; a node whose own samples are stale is
left as it is.

Which nodes the controller holds is read from the schedulers, not from its memory: Slurm's Reason on a Slurm node
(SUSPECT_REASON or HANDED_REASON ahead of the finding), the HEALTH_ANNOTATION on a Kubernetes-only node. So a
controller that lost its state dir still knows its nodes, and an operator sees why in `sinfo -R`.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from components.site.catalog import GpuClass
from components.site.health import Health
from components.site.maintenance_window import within
from components.site.site import Site

REASON_PREFIX = "gpuctl health: "
SUSPECT_REASON = f"{REASON_PREFIX}suspect"
"""Slurm Reason (followed by `: <finding>`) of a node the controller drained: it diagnoses and may return it."""
HANDED_REASON = f"{REASON_PREFIX}handed to a human"
"""Slurm Reason of a node the controller gave up on: it stays drained until a human resumes it (the SOP)."""
REASON_CHARS = 200
"""Slurm keeps a node's Reason whole; the finding is cut so `sinfo -R` stays one readable line."""
UNFIT_SLURM_STATES = ("DOWN", "FAIL", "MAINT", "REBOOT", "POWER", "UNREADABLE")
"""Prefixes of Slurm state flags of a node Slurm itself has taken out (runbooks.flex.lending.UNHEALTHY's): Slurm
handles it, the controller does not add a drain."""


class Phase(StrEnum):
    NONE = "none"
    """Not the controller's: healthy, or someone else's."""
    SUSPECT = "suspect"
    """Drained by the controller: draining, being diagnosed or about to return."""
    HANDED = "handed"
    """Handed to a human: left drained."""


class DiagStatus(StrEnum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"


@dataclass(frozen=True)
class Diagnosis:
    status: DiagStatus
    started_at: float
    """s since the epoch; also the diagnosis' identity (a failure is counted once per diagnosis)."""
    detail: str = ""
    """dcgmi's verdict: the tests that failed, or how many passed."""


@dataclass(frozen=True)
class SlurmView:
    state: str
    """scontrol's State (`IDLE+DRAIN`), already checked (runbooks.flex.slurm_read.node_state)."""
    reason: str = ""
    """Why the node is drained, by whom ever drained it; empty when it is not."""

    def idle(self) -> bool:
        flags = self.state.split("+")
        return flags[0] == "IDLE" and "COMPLETING" not in flags


@dataclass(frozen=True)
class KubeView:
    cordoned: bool = False
    mark: str = ""
    """The controller's HEALTH_ANNOTATION on the node: a Phase value, or empty."""
    lent: bool = False
    """Labelled lent to inference by the lending controller."""
    held_by: str = ""
    """The HOLD_LABEL's value (who holds the node: a drill, an operator), or empty."""
    gpu_pods: int = 0
    """Running pods that requested GPUs on the node."""


@dataclass(frozen=True)
class NodeView:
    name: str
    findings: tuple[str, ...] | None
    """What is wrong with the node's GPUs now (`GPU 3: XID 79 ...`); None when its DCGM samples are stale or
    missing: then nothing is known of it."""
    slurm: SlurmView | None
    """None: not a Slurm node."""
    kube: KubeView | None
    """None: not a Kubernetes node."""
    diagnosis: Diagnosis | None = None
    """The last diagnosis the controller ran on the node, if any."""


@dataclass(frozen=True)
class NodeMemory:
    failures: tuple[float, ...] = ()
    """When each failure happened (a diagnosis' start, or the time a relapse was seen), s since the epoch."""
    suspect_since: float | None = None
    """When the node's current suspicion began: only a diagnosis started since then can return it."""
    returned_at: float | None = None
    """When the controller last returned the node: a suspicion within failure_window_h of it is a relapse."""


@dataclass(frozen=True)
class World:
    at: float
    """s since the epoch."""
    nodes: tuple[NodeView, ...] | None
    """Every GPU node of the site; None when Prometheus, Slurm or kubectl could not be read."""
    unreadable: tuple[str, ...] = ()
    """What could not be read, for the audit."""
    memory: Mapping[str, NodeMemory] = field(default_factory=dict)


class Action(StrEnum):
    DRAIN = "drain"
    """Drain in Slurm with SUSPECT_REASON, cordon and mark in Kubernetes (finishing a drain half done too)."""
    DIAGNOSE = "diagnose"
    """Start `dcgmi diag` on the node (stopping one that ran past its time)."""
    REQUEUE = "requeue"
    """Requeue the suspect node's Slurm jobs that Slurm may requeue (health.requeue_after_s has passed)."""
    RETURN = "return"
    """Uncordon and unmark in Kubernetes, then resume in Slurm."""
    HAND_OFF = "hand-off"
    """Drain (or keep drained) with HANDED_REASON and mark it so in Kubernetes; nothing more until a human acts."""
    WAIT = "wait"


class Reason(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    HELD = "held"
    STALE = "stale"
    BUDGET = "budget"
    DRAINING = "draining"
    IDLE = "idle"
    WINDOW = "window"
    """Ready for a diagnosis outside every health.diag_windows: it waits for the next one."""
    DIAGNOSING = "diagnosing"
    DIAG_PASSED = "diag-passed"
    DIAG_FAILED = "diag-failed"
    DIAG_TIMEOUT = "diag-timeout"
    RELAPSE = "relapse"
    HANDED = "handed"


@dataclass(frozen=True)
class NodeDecision:
    node: str
    action: Action
    reason: Reason
    detail: str
    """The reason with its numbers, for the audit line, Slurm's Reason and `gpuctl health status`."""


@dataclass(frozen=True)
class Decision:
    paused: bool
    """Nothing is done this step: the inputs are missing or stale."""
    detail: str
    nodes: tuple[NodeDecision, ...]
    memory: Mapping[str, NodeMemory]
    """To pass in the next World."""
    budget: int
    """Nodes the controller may hold drained."""
    held: int
    """Nodes it holds after this decision."""


def phase(view: NodeView) -> Phase:
    """Whose the node is, as the schedulers say: Slurm's Reason on a Slurm node, the annotation on any other."""
    if view.slurm is not None and view.slurm.reason.startswith(REASON_PREFIX):
        return Phase.HANDED if view.slurm.reason.startswith(HANDED_REASON) else Phase.SUSPECT
    if view.slurm is not None and view.slurm.reason:
        return Phase.NONE  # drained by someone else: theirs, whatever an annotation says
    if view.kube is not None and view.kube.mark in (Phase.SUSPECT, Phase.HANDED):
        return Phase(view.kube.mark)
    return Phase.NONE


def claimed(view: NodeView) -> str | None:
    """Who has claimed the node for their own work (lent to inference, held by a drill or an operator): the
    controller does nothing to it, even one it holds, until the claim is gone."""
    kube = view.kube
    if kube is not None and kube.lent:
        return "lent to inference by the lending controller"
    if kube is not None and kube.held_by:
        return f"held by {kube.held_by}"
    return None


def holder(view: NodeView) -> str | None:
    """Who else holds a node the controller does not: it is never touched while anyone does."""
    slurm, kube = view.slurm, view.kube
    if claimed(view) is not None:
        return claimed(view)
    if slurm is not None and slurm.reason:
        return f"drained in Slurm for {slurm.reason!r}"
    if slurm is not None and any(f.startswith(UNFIT_SLURM_STATES) for f in slurm.state.split("+")):
        return f"Slurm has it {slurm.state}"
    if kube is not None and kube.cordoned:
        return "cordoned in Kubernetes by someone else"
    return None


def diag_level(site: Site, node: str) -> int:
    """The `dcgmi diag -r` level the node is diagnosed at: health.diag_level, or 1 on a consumer GPU (dcgmi diag
    reference: "Non-datacenter GPUs support level 1")."""
    group = next(g for g in site.node_groups if any(n.name == node for n in g.nodes))
    return 1 if site.gpu(group).gpu_class is GpuClass.CONSUMER else site.health.diag_level


def drain_budget(settings: Health, node_count: int) -> int:
    return math.floor(settings.max_drained_pct * node_count / 100 + 1e-9)


def decide(world: World, settings: Health, diag_timeout_s: float) -> Decision:
    """diag_timeout_s: how long a diagnosis may run (node_check.diag_timeout_s) before it counts as failed."""
    memory = dict(world.memory)
    if world.nodes is None:
        return Decision(True, f"paused: could not read {', '.join(world.unreadable) or 'the inputs'}", (), memory,
                        0, 0)
    nodes = world.nodes
    budget = drain_budget(settings, len(nodes))
    held = sum(phase(v) != Phase.NONE for v in nodes)
    if all(v.findings is None for v in nodes):
        return Decision(True, "paused: no node has a fresh DCGM sample (exporters or Prometheus stale)", (), memory,
                        budget, held)
    at, window_s = world.at, settings.failure_window_h * 3600.0
    decisions: list[NodeDecision] = []
    for view in sorted(nodes, key=lambda v: v.name):
        mind = memory.get(view.name, NodeMemory())
        recent = tuple(t for t in mind.failures if at - t < window_s)
        mind = replace(mind, failures=recent)
        owned, claim = phase(view), claimed(view)
        if claim is not None and owned != Phase.NONE:
            made = NodeDecision(view.name, Action.WAIT, Reason.HELD, f"{claim}: left as it is")
        elif owned == Phase.NONE:
            made, mind = _unowned(view, mind, settings, at, window_s, room=budget - held)
            held += made.action in (Action.DRAIN, Action.HAND_OFF)
        elif owned == Phase.HANDED:
            made = NodeDecision(view.name, Action.WAIT, Reason.HANDED, f"handed to a human after {len(recent)} "
                                "failures: docs/sop/node-handed-to-a-human.md")
        else:
            made, mind = _suspect(view, mind, settings, at, diag_timeout_s)
        decisions.append(made)
        if mind == NodeMemory():
            memory.pop(view.name, None)
        else:
            memory[view.name] = mind
    return Decision(False, f"{held} of {budget} drainable nodes held", tuple(decisions), memory, budget, held)


def _unowned(view: NodeView, mind: NodeMemory, settings: Health, at: float, window_s: float,
             room: int) -> tuple[NodeDecision, NodeMemory]:
    name = view.name
    if mind.suspect_since is not None:
        # A node the controller held and no longer does (a human resumed it): its story starts again.
        mind = NodeMemory(returned_at=mind.returned_at)
    other = holder(view)
    if other is not None:
        return NodeDecision(name, Action.WAIT, Reason.HELD, other), mind
    if view.findings is None:
        return NodeDecision(name, Action.WAIT, Reason.STALE, f"no DCGM sample within {settings.stale_after_s} s"), mind
    if not view.findings:
        return NodeDecision(name, Action.WAIT, Reason.HEALTHY, "no finding"), mind
    found = "; ".join(view.findings)
    if room <= 0:
        return NodeDecision(name, Action.WAIT, Reason.BUDGET, f"{found}: the drain budget "
                            f"({settings.max_drained_pct:g} % of the GPU nodes) is spent"), mind
    relapse = mind.returned_at is not None and at - mind.returned_at < window_s
    detail = f"{found}: suspect again {at - mind.returned_at:.0f} s after its return" if (
        relapse and mind.returned_at is not None) else found
    failures = (*mind.failures, at) if relapse else mind.failures
    mind = NodeMemory(failures=failures, suspect_since=at, returned_at=None)
    if len(failures) >= settings.failures_before_handoff:
        return NodeDecision(name, Action.HAND_OFF, Reason.RELAPSE, f"{detail} ({len(failures)} of "
                            f"{settings.failures_before_handoff} failures)"), mind
    return NodeDecision(name, Action.DRAIN, Reason.RELAPSE if relapse else Reason.SUSPECT, detail), mind


def _suspect(view: NodeView, mind: NodeMemory, settings: Health, at: float,
             diag_timeout_s: float) -> tuple[NodeDecision, NodeMemory]:
    name = view.name
    since = at if mind.suspect_since is None else mind.suspect_since
    # Memory lost (a new state dir): only a diagnosis started from now on may return the node.
    mind = replace(mind, suspect_since=since)
    diagnosis = view.diagnosis
    if diagnosis is not None and diagnosis.started_at < since:
        diagnosis = None  # from an earlier suspicion
    if diagnosis is None:
        kube = view.kube
        if kube is not None and (not kube.cordoned or kube.mark != Phase.SUSPECT) or (
                view.slurm is not None and not view.slurm.reason.startswith(SUSPECT_REASON)):
            return NodeDecision(name, Action.DRAIN, Reason.SUSPECT, "finishing the drain"), mind
        busy = [f"Slurm has it {view.slurm.state}"] if view.slurm is not None and not view.slurm.idle() else []
        busy += [f"{kube.gpu_pods} GPU pods run"] if kube is not None and kube.gpu_pods else []
        if busy:
            after, drained_s = settings.requeue_after_s, at - since
            if after is not None and drained_s >= after and view.slurm is not None and not view.slurm.idle():
                return NodeDecision(name, Action.REQUEUE, Reason.DRAINING, f"draining for {drained_s:.0f} s, past "
                                    f"requeue_after_s ({after} s): {', '.join(busy)}"), mind
            return NodeDecision(name, Action.WAIT, Reason.DRAINING, f"draining: {', '.join(busy)}"), mind
        return _diagnose(name, settings, at, Reason.IDLE, "idle"), mind
    if diagnosis.status == DiagStatus.RUNNING:
        ran = at - diagnosis.started_at
        if ran <= diag_timeout_s:
            return NodeDecision(name, Action.WAIT, Reason.DIAGNOSING, f"dcgmi diag running for {ran:.0f} s"), mind
        return _failed(name, mind, diagnosis, settings, at, Reason.DIAG_TIMEOUT,
                       f"dcgmi diag ran past node_check.diag_timeout_s ({diag_timeout_s:g} s)")
    if diagnosis.status == DiagStatus.FAILED:
        return _failed(name, mind, diagnosis, settings, at, Reason.DIAG_FAILED, diagnosis.detail)
    if view.findings is None:
        return NodeDecision(name, Action.WAIT, Reason.STALE, f"diagnosis passed, but no DCGM sample within "
                            f"{settings.stale_after_s} s to confirm it"), mind
    if view.findings and at - diagnosis.started_at < settings.window_s:
        # An XID or a counter's rise stays a finding for window_s after it happened, and a quick diagnosis (level 1,
        # seconds) passes inside it: only a finding still there window_s after the diagnosis began persists.
        return NodeDecision(name, Action.WAIT, Reason.DIAG_PASSED, f"diagnosis passed; {'; '.join(view.findings)} "
                            f"has until {settings.window_s} s after its start to age out"), mind
    if view.findings:
        return _failed(name, mind, diagnosis, settings, at, Reason.DIAG_FAILED,
                       f"diagnosis passed but {'; '.join(view.findings)} persists")
    returned = NodeMemory(failures=mind.failures, returned_at=at)
    return NodeDecision(name, Action.RETURN, Reason.DIAG_PASSED, diagnosis.detail or "diagnosis passed"), returned


def _failed(name: str, mind: NodeMemory, diagnosis: Diagnosis, settings: Health, at: float, reason: Reason,
            why: str) -> tuple[NodeDecision, NodeMemory]:
    # The diagnosis' start identifies it: deciding again on the same one counts it once.
    failures = mind.failures if diagnosis.started_at in mind.failures else (*mind.failures, diagnosis.started_at)
    mind = replace(mind, failures=failures)
    count = f"{len(failures)} of {settings.failures_before_handoff} failures"
    if len(failures) >= settings.failures_before_handoff:
        return NodeDecision(name, Action.HAND_OFF, reason, f"{why} ({count})"), mind
    return _diagnose(name, settings, at, reason, f"{why} ({count})", again=True), mind


def _diagnose(name: str, settings: Health, at: float, reason: Reason, why: str, again: bool = False) -> NodeDecision:
    """A diagnosis starts only inside a maintenance window (any time when the spec names none)."""
    if not within(settings.diag_windows, at):
        return NodeDecision(name, Action.WAIT, Reason.WINDOW, f"{why}: waiting for a maintenance window "
                            f"({', '.join(settings.diag_windows)} UTC)")
    return NodeDecision(name, Action.DIAGNOSE, reason, f"{why}: {'diagnosing again' if again else 'dcgmi diag'} "
                        f"-r {settings.diag_level}")
