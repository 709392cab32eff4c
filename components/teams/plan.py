"""What each onboarded team gets, as plain data: namespace, GPU quotas per flavor, Kueue queues, NFS share, Slurm
account, and where its dashboards and alerts already are.

Pure. Everything about a team depends on the team's own entry, its place in `teams` and site-wide facts no stage
changes (the flavors, the preemption table), never on the stage or on who else is onboarded, so advancing the
stage adds teams and leaves earlier ones untouched.
"""

from dataclasses import dataclass
from typing import Any

from components.monitoring.alertmanager import team_receiver
from components.monitoring.dashboards import TEAM_USAGE_UID, TEAMS_FOLDER
from components.scheduling.kueue import (
    TEAM_QUEUE,
    flavors,
    inference_held,
    local_queue,
    team_cluster_queue,
    team_cluster_queue_name,
    team_flavors,
    team_gpus,
)
from components.scheduling.preemption import priority_classes, team_qos
from components.site.problems import Problem
from components.site.rules import dangling
from components.site.site import Site, Team
from components.site.wellknown import TEAM_LABEL
from components.storage.tiers import TeamShare, team_shares

GPU_QUOTA = "gpu-quota"


@dataclass(frozen=True)
class SlurmAccount:
    name: str
    fairshare: int
    qos: list[str]
    default_qos: str


@dataclass(frozen=True)
class TeamPlan:
    team: Team
    gpu_quota: dict[str, int]
    """Most GPUs per Kueue flavor the team's jobs may hold."""
    gpu_guaranteed: dict[str, int]
    """GPUs per flavor the team can always reclaim; part of gpu_quota."""
    share: TeamShare
    slurm: SlurmAccount
    cluster_queue: dict[str, Any]
    """The team's Kueue ClusterQueue, which holds it to gpu_quota per flavor and lends its guarantee."""
    local_queue: dict[str, Any]
    """The team namespace's LocalQueue `default`, submitting to cluster_queue."""
    reserved_classes: list[str]
    """PriorityClasses the team may not use."""

    @property
    def name(self) -> str:
        return self.team.name


def team_plans(site: Site) -> list[TeamPlan]:
    """One plan per onboarded team, in spec order."""
    shares = {s.team: s for s in team_shares(site)}
    names = [f.name for f in team_flavors(site)]
    qos = team_qos(site)
    reserved = [pc.name for pc in priority_classes(site) if pc.name in {c.name for c in site.scheduling.classes
                                                                         if not c.for_teams}]
    plans = []
    for team in site.teams_onboarded():
        quota = {name: team.gpu_quota_on(name) for name in names}
        guaranteed = {name: team.gpu_guaranteed.get(name, 0) for name in names}
        plans.append(TeamPlan(
            team=team, gpu_quota=quota, gpu_guaranteed=guaranteed, share=shares[team.name],
            slurm=SlurmAccount(team.name, team.fairshare, qos, site.scheduling.team_default_class),
            cluster_queue=team_cluster_queue(site, team.name, quota, guaranteed), local_queue=local_queue(team.name),
            reserved_classes=reserved,
        ))
    return plans


def namespace_manifest(team: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": {TEAM_LABEL: team}}}


def resource_quota_manifest(plan: TeamPlan) -> dict[str, Any]:
    """A namespace quota counts GPUs of every flavor alike (it cannot select nodes), so it holds the team's total,
    which also bounds GPU pods that no queue admits (inference Deployments); the per-flavor caps are the team's
    ClusterQueue's."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": GPU_QUOTA, "namespace": plan.name, "labels": {TEAM_LABEL: plan.name}},
        "spec": {"hard": {"requests.nvidia.com/gpu": str(sum(plan.gpu_quota.values()))}},
    }


RESERVED_PRIORITY_QUOTA = "reserved-priority-classes"


def reserved_priority_quota_manifest(plan: TeamPlan) -> dict[str, Any]:
    """No pod of a class teams may not use (scheduling.classes[].for_teams false, the inference class by default) in
    the team's namespace: a quota of zero pods scoped to those PriorityClasses (Kubernetes "Resource Quota per
    PriorityClass"), enforced by the API server at admission."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": RESERVED_PRIORITY_QUOTA, "namespace": plan.name, "labels": {TEAM_LABEL: plan.name}},
        "spec": {"hard": {"pods": "0"},
                 "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                         "values": plan.reserved_classes}]}},
    }


def team_facts(plan: TeamPlan) -> dict[str, Any]:
    """What the Team component records: its own objects, and where the team's existing dashboards, alert route
    and Slurm account are (rendered by the monitoring stack and Slurm accounting, not created again)."""
    return {
        "team": plan.name,
        "stage": plan.team.stage,
        "namespace": plan.name,
        "gpu_quota": dict(plan.gpu_quota),
        "gpu_guaranteed": dict(plan.gpu_guaranteed),
        "cluster_queue": team_cluster_queue_name(plan.name),
        "local_queue": TEAM_QUEUE,
        "storage_class": plan.share.storage_class,
        "nfs_share": f"{plan.share.server}:{plan.share.share}",
        "slurm_account": {"name": plan.slurm.name, "fairshare": plan.slurm.fairshare, "qos": list(plan.slurm.qos),
                          "default_qos": plan.slurm.default_qos},
        "grafana": {"folder": TEAMS_FOLDER, "dashboard": TEAM_USAGE_UID, "variable": f"team={plan.name}"},
        "alert_route": {"receiver": team_receiver(plan.name), "channel": plan.team.slack_channel},
    }


def check_team_quotas(site: Site) -> list[Problem]:
    """A team's quota and guarantee name kubernetes-pool flavors and fit in what the model servers leave of them; a
    guarantee is part of the quota, and the guarantees of all teams (every stage, so the last one is known to fit)
    fit that too."""
    known = {f.name: f for f in flavors(site)}
    capacity = team_gpus(site)
    held = inference_held(site)

    def of_flavor(name: str) -> str:
        return f"flavor {name}" + (f" left by the model servers' {held[name]} (inference.models[].replicas.max x "
                                   "gpus_per_replica)" if held[name] else "")
    guaranteed = dict.fromkeys(capacity, 0)
    problems = []

    def team_flavor(path: str, name: str) -> bool:
        if name not in known:
            problems.append(dangling(path, "Kueue GPU flavor", name, capacity))
        elif name not in capacity:
            problems.append(Problem(path, f"{name} GPUs are Slurm's until lent to inference (gpuctl flex); teams "
                                    "get quota on kubernetes-pool flavors only"))
        return name in capacity

    for i, team in enumerate(site.teams):
        for name, gpus in team.gpu_quota.items():
            path = f"teams[{i}].gpu_quota.{name}"
            if team_flavor(path, name) and gpus > capacity[name]:
                problems.append(Problem(path, f"{gpus} GPUs exceed the {capacity[name]} GPUs of {of_flavor(name)}"))
        for name, gpus in team.gpu_guaranteed.items():
            path = f"teams[{i}].gpu_guaranteed.{name}"
            quota = team.gpu_quota_on(name)
            if not team_flavor(path, name):
                continue
            if gpus > quota:
                problems.append(Problem(path, f"{gpus} guaranteed GPUs exceed the team's quota of {quota} on {name}"))
                continue
            before, guaranteed[name] = guaranteed[name], guaranteed[name] + gpus
            if before <= capacity[name] < guaranteed[name]:
                problems.append(Problem(path, f"with this team the guarantees on {name} add up to {guaranteed[name]} "
                                        f"GPUs, more than the {capacity[name]} of {of_flavor(name)}"))
    return problems
