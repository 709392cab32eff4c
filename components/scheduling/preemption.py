"""The one preemption table (`scheduling.classes`), read for each scheduler, and its consistency check.

Pure. A row is a Kubernetes PriorityClass when it has `kubernetes_priority`, a Slurm QoS when it has
`slurm_priority`, or both. The table is listed highest first, and `check_preemption` holds both schedulers to
that one order, so they cannot disagree about who ranks above whom. How each scheduler preempts:

- Slurm (`PreemptType=preempt/qos`): a QoS preempts exactly the QoS in its `Preempt=` list (slurm.conf(5)
  PreemptType); the row's `preempts` restricted to Slurm classes.
- Kubernetes: kube-scheduler lets a pod whose class has `preemptionPolicy: PreemptLowerPriority` evict any pod
  of lower value, and Kueue's `withinClusterQueue: LowerPriority` preempts any workload of lower priority whatever
  the class's preemptionPolicy (Kueue has no per-class policy: kubernetes-sigs/kueue#6141, KEP-4400). So on
  Kubernetes a class preempts every class below it, and the table must say so.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from components.site.problems import Problem
from components.site.site import SchedulingClass, Site, Workload

PATH = "scheduling.classes"
PREEMPT_LOWER = "PreemptLowerPriority"
NEVER = "Never"
KILL_WAIT_S = 5
"""s between the SIGTERM and the SIGKILL of a job Slurm requeues, preempts or stops at its time limit (slurm.conf
KillWait; Slurm's default, 30, held a lent node 30 s for a trainer slow to stop, before the lend stopped jobs itself:
runbooks/flex/lending.py STOP_GRACE_S). What a requeued trainer loses is the
work since its last periodic checkpoint, bounded by its checkpoint interval (minutes), never by this wait: a sharded
checkpoint takes far longer than seconds to write, so a longer wait saves no work and only keeps a node from
inference. slurmd waits MAX(KillWait, 5) s before the SIGKILL (src/slurmd/slurmd/req.c, _rpc_terminate_job and
_rpc_timelimit; measured on 22.05: a trainer ignoring SIGTERM held the node 5.1 s with KillWait=1), so 5 is the
shortest that has any effect; a trainer that handles SIGTERM gets those 5 s to flush its logs and close its files."""
PREEMPTED_GRACE_S = 0
"""s of grace (sacctmgr GraceTime) a job of a QoS that another preempts gets before Slurm requeues it: none, as with
KILL_WAIT_S no grace could save a checkpoint; the job gets SIGTERM at once and SIGKILL KILL_WAIT_S later."""


@dataclass(frozen=True)
class SlurmQos:
    """A row as sacctmgr sees it."""

    name: str
    priority: int
    preempts: list[str]
    for_teams: bool


@dataclass(frozen=True)
class PriorityClass:
    """A row as Kubernetes sees it."""

    name: str
    value: int
    preemption_policy: str
    global_default: bool
    description: str


def slurm_qos(site: Site) -> list[SlurmQos]:
    """The Slurm QoS set, highest first; each preempt list holds only Slurm classes."""
    rows = [(c, c.slurm_priority) for c in site.scheduling.classes if c.slurm_priority is not None]
    slurm = {c.name for c, _ in rows}
    return [SlurmQos(c.name, priority, [p for p in c.preempts if p in slurm], c.for_teams) for c, priority in rows]


def preempted_qos(site: Site) -> list[str]:
    """The Slurm QoS some other QoS preempts, highest first: those whose jobs get PREEMPTED_GRACE_S."""
    victims = {victim for qos in slurm_qos(site) for victim in qos.preempts}
    return [q.name for q in slurm_qos(site) if q.name in victims]


def team_qos(site: Site) -> list[str]:
    """The Slurm QoS every team account may submit with."""
    return [q.name for q in slurm_qos(site) if q.for_teams]


def inference_preempts(site: Site) -> set[str]:
    """The Slurm QoS an inference class of the table preempts: the only jobs a flex lend may requeue (gpuctl flex and
    its controller lend; gpuctl simulate replays them)."""
    inference = {c.name for c in site.scheduling.classes if c.workload == Workload.INFERENCE}
    return {victim for qos in slurm_qos(site) if qos.name in inference for victim in qos.preempts}


def priority_classes(site: Site) -> list[PriorityClass]:
    """The Kubernetes PriorityClasses, highest first. Only the lowest is the global default, so a pod that names
    no class is the first to go; every other class preempts the ones below it (see the module docstring)."""
    rows = [(c, c.kubernetes_priority) for c in site.scheduling.classes if c.kubernetes_priority is not None]
    return [PriorityClass(c.name, value, NEVER if lowest else PREEMPT_LOWER, lowest,
                          c.description or f"{c.workload.value} work")
            for i, (c, value) in enumerate(rows) for lowest in [i == len(rows) - 1]]


def priority_class_manifest(pc: PriorityClass) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": pc.name},
        "value": pc.value,
        "globalDefault": pc.global_default,
        "preemptionPolicy": pc.preemption_policy,
        "description": pc.description,
    }


# --- the consistency check ------------------------------------------------------------------------------------


def check_preemption(site: Site) -> list[Problem]:
    """Every way the table could let the schedulers disagree, or let training preempt inference."""
    classes = site.scheduling.classes
    problems = list(_names(classes))
    if problems:
        return problems  # the other checks look classes up by name
    problems += _orders(classes)
    if problems:
        return problems  # the other checks read "below" from the list; an order that disagrees comes first
    problems += _preempt_lists(classes)
    problems += _kubernetes_preempts_by_value(classes)
    problems += _team_default(site)
    return problems


def _names(classes: list[SchedulingClass]) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    for i, c in enumerate(classes):
        if c.name in seen:
            yield Problem(f"{PATH}[{i}].name", f'"{c.name}" is already used by {PATH}[{seen[c.name]}]')
        seen.setdefault(c.name, i)
        if c.kubernetes_priority is None and c.slurm_priority is None:
            yield Problem(f"{PATH}[{i}]", f"{c.name} has neither kubernetes_priority nor slurm_priority")
        if c.kubernetes_priority is not None and "_" in c.name:
            yield Problem(f"{PATH}[{i}].name", f'"{c.name}" cannot name a PriorityClass (no "_" in Kubernetes '
                          "names); drop kubernetes_priority or rename it")


def _orders(classes: list[SchedulingClass]) -> Iterator[Problem]:
    """Both sides strictly decrease down the list, so each is a strict total order and both agree with the list."""
    for side in ("kubernetes_priority", "slurm_priority"):
        above: SchedulingClass | None = None
        for i, c in enumerate(classes):
            value = getattr(c, side)
            if value is None:
                continue
            if above is not None and value >= getattr(above, side):
                yield Problem(f"{PATH}[{i}].{side}", f"{c.name} at {value} is not below {above.name} at "
                              f"{getattr(above, side)}, listed above it; list classes highest first")
            above = c


def _preempt_lists(classes: list[SchedulingClass]) -> Iterator[Problem]:
    rank = {c.name: i for i, c in enumerate(classes)}
    for i, c in enumerate(classes):
        for name in c.preempts:
            path = f"{PATH}[{i}].preempts"
            if name not in rank:
                yield Problem(path, f'no class named "{name}" (known: {", ".join(rank)})')
                continue
            victim = classes[rank[name]]
            if name == c.name:
                yield Problem(path, f"{c.name} cannot preempt itself")
            elif rank[name] < i:
                yield Problem(path, f"{c.name} cannot preempt {name}, listed above it")
            if not victim.preemptible:
                yield Problem(path, f"{name} is never preemptible")
            if c.workload == Workload.TRAINING and victim.workload == Workload.INFERENCE:
                yield Problem(path, f"training class {c.name} must not preempt inference class {name}")
            if not _shared_scheduler(c, victim):
                yield Problem(path, f"{c.name} and {name} share no scheduler, so neither can preempt the other")


def _shared_scheduler(a: SchedulingClass, b: SchedulingClass) -> bool:
    kubernetes = a.kubernetes_priority is not None and b.kubernetes_priority is not None
    return kubernetes or (a.slurm_priority is not None and b.slurm_priority is not None)


def _kubernetes_preempts_by_value(classes: list[SchedulingClass]) -> Iterator[Problem]:
    """On Kubernetes a class preempts every lower class (Kueue LowerPriority): the table must list them all, so
    the checks on `preempts` above (never preemptible, training over inference) see what really happens."""
    rows = [(i, c) for i, c in enumerate(classes) if c.kubernetes_priority is not None]
    for n, (i, c) in enumerate(rows):
        missing = [lower.name for _, lower in rows[n + 1:] if lower.name not in c.preempts]
        if missing:
            yield Problem(f"{PATH}[{i}].preempts", f"{c.name} must list {', '.join(missing)}: on Kubernetes it "
                          "preempts every lower class (kube-scheduler and Kueue preempt by value)")


def _team_default(site: Site) -> Iterator[Problem]:
    name, teams = site.scheduling.team_default_class, team_qos(site)
    if name not in teams:
        yield Problem("scheduling.team_default_class",
                      f'no Slurm class open to teams is named "{name}" (open to teams: {", ".join(teams)})')
