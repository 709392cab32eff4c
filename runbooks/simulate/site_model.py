"""The site as the simulator schedules on it, read from the stack's parsed site through the stack's own planners:
Slurm's nodes (slurm and flex pools) and the QoS the flex partitions admit (components.slurm.conf), the Kubernetes
flavors and their capacity (components.scheduling.kueue), each team's Kueue quota and guarantee
(components.teams.plan), who preempts whom (components.scheduling.preemption), and, for the static "before" world, the
fixed slices each team and inference would own instead.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from components.scheduling.kueue import team_flavors
from components.scheduling.preemption import inference_preempts, priority_classes, slurm_qos
from components.site.site import Pool, Site, Workload
from components.slurm.conf import admitted_qos
from components.teams.plan import team_plans


@dataclass(frozen=True)
class SlurmNode:
    name: str
    pool: Pool
    gpu_model: str
    gpus: int


@dataclass(frozen=True)
class SiteModel:
    nodes: list[SlurmNode]
    """Slurm's nodes, slurm pool first, then flex (Slurm's until lent), each in spec order."""
    flavors: dict[str, tuple[str, int]]
    """Kubernetes-pool flavor -> (GPU model, GPUs), in the order a team's ClusterQueue lists them."""
    teams: list[str]
    fairshare: dict[str, int]
    quota: dict[tuple[str, str], int]
    """(team, flavor) -> most GPUs its jobs may hold (nominal + borrowing limit of its ClusterQueue)."""
    guaranteed: dict[tuple[str, str], int]
    qos_priority: dict[str, int]
    qos_preempts: dict[str, set[str]]
    class_priority: dict[str, int]
    class_preempts: dict[str, set[str]]
    """Kubernetes class -> the classes it preempts (on Kubernetes: every lower one, by the table's own check)."""
    inference_class: str | None
    """The inference PriorityClass; inference pods preempt what it lists."""
    lending_preempts: set[str]
    """Slurm QoS a lend may requeue (components.scheduling.preemption.inference_preempts, as gpuctl flex)."""
    flex_qos: frozenset[str] | None
    """Slurm QoS the flex partitions admit (components.slurm.conf.admitted_qos, the AllowQos the plan renders); None:
    every QoS."""

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes) + sum(g for _, g in self.flavors.values())

    def flavor_of(self, gpu_model: str) -> str | None:
        return next((name for name, (model, _) in self.flavors.items() if model == gpu_model), None)


def site_model(site: Site) -> SiteModel:
    """The site with the teams onboarded at its stage (pass a site whose stage is the last for the full rollout)."""
    nodes = [SlurmNode(node.name, group.pool, group.gpu_model, group.gpus_per_node)
             for pool in (Pool.SLURM, Pool.FLEX) for group in site.node_groups if group.pool == pool
             for node in group.nodes]
    plans = team_plans(site)
    classes = {c.name: c for c in site.scheduling.classes}
    pcs = priority_classes(site)
    inference = [pc.name for pc in pcs if classes[pc.name].workload == Workload.INFERENCE]
    return SiteModel(
        nodes=nodes,
        flavors={f.name: (f.gpu_model, f.gpus) for f in team_flavors(site)},
        teams=[p.name for p in plans],
        fairshare={p.name: p.team.fairshare for p in plans},
        quota={(p.name, f): gpus for p in plans for f, gpus in p.gpu_quota.items()},
        guaranteed={(p.name, f): gpus for p in plans for f, gpus in p.gpu_guaranteed.items()},
        qos_priority={q.name: q.priority for q in slurm_qos(site)},
        qos_preempts={q.name: set(q.preempts) for q in slurm_qos(site)},
        class_priority={pc.name: pc.value for pc in pcs},
        class_preempts={pc.name: set(classes[pc.name].preempts) for pc in pcs},
        inference_class=inference[0] if inference else None,
        lending_preempts=inference_preempts(site),
        flex_qos=None if (admitted := admitted_qos(site, Pool.FLEX)) is None else frozenset(admitted),
    )


def largest_remainder(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` split in proportion to weights, whole units, the remainder to the largest fractions (then in order)."""
    whole = sum(weights.values())
    if whole == 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / whole for k, w in weights.items()}
    shares = {k: int(v) for k, v in exact.items()}
    left = total - sum(shares.values())
    for k in sorted(exact, key=lambda k: -(exact[k] - shares[k]))[:left]:
        shares[k] += 1
    return shares


class StaticSplit(StrEnum):
    """How the "before" world cuts the teams' slices."""

    FAIRSHARE = "fairshare"
    """As the site shares today: Slurm's GPUs by each team's fairshare, each flavor by its Kueue quota there."""
    DEMAND = "demand"
    """In proportion to each team's demand in the replayed workload (GPU-hours of its jobs for each side): the
    slices a planner who knew the month ahead would cut, so no team's slice idles while another queues for want of
    it."""


@dataclass(frozen=True)
class StaticSlices:
    """The "before" world: every team owns a fixed share of Slurm's GPUs and of each Kubernetes flavor (StaticSplit
    says in proportion to what), inference a fixed share of each flavor, sized for its models' replicas.max."""

    slurm: dict[str, int]
    kubernetes: dict[tuple[str, str], int]
    inference: dict[str, int]


def static_slices(model: SiteModel, site: Site,
                  demand: Mapping[str, tuple[float, float]] | None = None) -> StaticSlices:
    """Slices by fairshare and quota (StaticSplit.FAIRSHARE), or, given each team's demand (team -> GPU-seconds of
    its Slurm jobs, of its Kubernetes jobs), in proportion to it (StaticSplit.DEMAND), among the teams with a quota
    on the flavor."""
    serving: dict[str, int] = dict.fromkeys(model.flavors, 0)
    for served in site.inference.models:
        flavor = model.flavor_of(served.gpu_model)
        if flavor is not None:
            serving[flavor] += served.replicas.max * served.gpus_per_replica
    inference = {f: min(gpus, model.flavors[f][1]) for f, gpus in serving.items()}
    kubernetes: dict[tuple[str, str], int] = {}
    for f, (_, gpus) in model.flavors.items():
        weights = {t: model.quota[t, f] if demand is None else round(demand.get(t, (0, 0))[1]) * (model.quota[t, f] > 0)
                   for t in model.teams}
        for team, share in largest_remainder(gpus - inference[f], weights).items():
            kubernetes[team, f] = share
    slurm = model.fairshare if demand is None else {t: round(demand.get(t, (0, 0))[0]) for t in model.teams}
    return StaticSlices(largest_remainder(sum(n.gpus for n in model.nodes), slurm), kubernetes, inference)
