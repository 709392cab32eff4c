"""Kueue's objects and manager configuration, rendered from the site spec.

Pure. Field names follow Kueue's v1beta1 API (kueue.x-k8s.io/v1beta1: ResourceFlavor, ClusterQueue,
LocalQueue; config.kueue.x-k8s.io/v1beta1: Configuration) as served by the pinned chart
(components.charts.KUEUE); docs/scheduling.md says why Kueue and how the queues fit together.

- One ResourceFlavor per GPU model and pool, selecting nodes by the labels the node admission sets
  (`gpucluster.io/gpu-model`, `gpucluster.io/pool`).
- One ClusterQueue per pool Kubernetes may use (kubernetes, flex), all in one cohort. A pool's queue holds the
  pool's capacity as nominal quota, less what teams are guaranteed, and lends it; no namespace submits to it.
  The flex pool is Slurm's until lent: its queue lends nothing (`lendingLimit: 0`).
- One ClusterQueue per team in the same cohort, which is where a team's GPUs are capped per flavor: nominal
  quota = the team's guaranteed GPUs, borrowing limit = the rest of its quota. Kueue admits a workload only
  within nominal + borrowing limit for each flavor, so the per-flavor cap holds for every queued job.
- Preemption follows the one preemption table: only ever lower-priority workloads, and never one above the
  highest preemptible Kubernetes class, so inference is never evicted by a training job inside Kueue.
- All-or-nothing admission: `waitForPodsReady` in the manager's configuration (it is a manager setting, not a
  queue field): a workload whose pods are not all ready within the timeout is evicted and requeued.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from components.node_validation import LABEL_PREFIX, POOL_TAINT
from components.site import Pool, Site
from components.slurm_config import gres_type

API_VERSION = "kueue.x-k8s.io/v1beta1"
NAMESPACE = "kueue-system"
COHORT = "gpu-cluster"
GPU_RESOURCE = "nvidia.com/gpu"
TEAM_LABEL = f"{LABEL_PREFIX}/team"
"""Marks a team's namespace and queue; the policy pack's serving-after-monitoring rule keys on it too."""
KUBERNETES_POOLS = (Pool.KUBERNETES, Pool.FLEX)
"""Pools whose nodes Kubernetes may schedule GPU work on; the slurm pool is Slurm's alone."""
TEAM_QUEUE = "default"
"""Each team namespace's LocalQueue. Kueue's LocalQueueDefaulting (beta, on by default since 0.12) gives a Job
that names no queue the queue called `default` of its namespace, so every team Job is held to the team's caps."""
REQUEUE_BACKOFF_LIMIT = 5
"""PodsReady evictions after which Kueue deactivates a workload instead of requeueing it again."""
LOWER_PRIORITY = "LowerPriority"


@dataclass(frozen=True)
class Flavor:
    name: str
    gpu_model: str
    pool: Pool
    gpus: int
    cpus: int
    memory_gib: int


def flavors(site: Site) -> list[Flavor]:
    """One flavor per GPU model and Kubernetes pool, with the capacity of its nodes, in spec order."""
    found: dict[str, Flavor] = {}
    for group in site.node_groups:
        if group.pool not in KUBERNETES_POOLS:
            continue
        name = f"{gres_type(group.gpu_model)}-{group.pool.value}"
        nodes = len(group.nodes)
        seen = found.get(name)
        found[name] = Flavor(name, group.gpu_model, group.pool,
                             (seen.gpus if seen else 0) + nodes * group.gpus_per_node,
                             (seen.cpus if seen else 0) + nodes * group.cpus,
                             (seen.memory_gib if seen else 0) + nodes * group.memory_gib)
    return list(found.values())


def resource_flavor(flavor: Flavor) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": {f"{LABEL_PREFIX}/gpu-model": flavor.gpu_model,
                                           f"{LABEL_PREFIX}/pool": flavor.pool.value}}
    if flavor.pool != Pool.KUBERNETES:
        # Slurm and flex nodes carry the pool taint; Kueue adds a flavor's tolerations to the pods it admits.
        spec["tolerations"] = [{"key": POOL_TAINT, "operator": "Equal", "value": flavor.pool.value,
                                "effect": "NoSchedule"}]
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor.name}, "spec": spec}


def guaranteed_gpus(site: Site) -> dict[str, int]:
    """GPUs per flavor that onboarded teams are guaranteed: their queues' nominal quota, taken from the pools'."""
    totals = {f.name: 0 for f in flavors(site)}
    for team in site.teams_onboarded():
        for flavor, gpus in team.gpu_guaranteed.items():
            totals[flavor] += gpus
    return totals


def _resource_group(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Kueue admits a workload only if its queue covers every resource it requests, so CPU and memory are covered
    # too; each flavor lists the covered resources in the same order (a rule of the ClusterQueue CRD).
    return [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": entries}]


def _pool_flavor(flavor: Flavor, guaranteed: int) -> dict[str, Any]:
    amounts = {"cpu": flavor.cpus, "memory": f"{flavor.memory_gib}Gi", GPU_RESOURCE: flavor.gpus - guaranteed}
    resources = []
    for resource, amount in amounts.items():
        entry: dict[str, Any] = {"name": resource, "nominalQuota": amount}
        if flavor.pool == Pool.FLEX:
            entry["lendingLimit"] = 0
        resources.append(entry)
    return {"name": flavor.name, "resources": resources}


def pool_cluster_queue(site: Site, pool: Pool) -> dict[str, Any]:
    """The pool's capacity, lent to the team queues in the cohort. No namespaceSelector: Kueue reads a missing one
    as "no namespace", so nothing is queued here directly."""
    guaranteed = guaranteed_gpus(site)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": f"gpu-{pool.value}"},
        "spec": {
            "cohort": COHORT,
            "resourceGroups": _resource_group([_pool_flavor(f, guaranteed[f.name])
                                               for f in flavors(site) if f.pool == pool]),
        },
    }


def cluster_queues(site: Site) -> Iterator[dict[str, Any]]:
    """The pools' queues, one per pool Kubernetes may use that has nodes."""
    pools = {f.pool for f in flavors(site)}
    for pool in KUBERNETES_POOLS:
        if pool in pools:
            yield pool_cluster_queue(site, pool)


def lendable_gpus(site: Site) -> dict[str, int]:
    """GPUs per flavor the pools' queues lend to the team queues now."""
    lendable = {}
    for queue in cluster_queues(site):
        for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
            (gpu,) = (r for r in flavor["resources"] if r["name"] == GPU_RESOURCE)
            lendable[flavor["name"]] = gpu.get("lendingLimit", gpu["nominalQuota"])
    return lendable


def team_cluster_queue_name(team: str) -> str:
    return f"team-{team}"


def borrow_threshold(site: Site) -> int | None:
    """The highest priority a borrowing workload may preempt: that of the highest preemptible Kubernetes class."""
    values = [c.kubernetes_priority for c in site.scheduling.classes
              if c.kubernetes_priority is not None and c.preemptible]
    return max(values) if values else None


def team_cluster_queue(site: Site, team: str, quota: dict[str, int], guaranteed: dict[str, int]) -> dict[str, Any]:
    """A team's caps: per flavor, nominal quota = guaranteed GPUs, borrowing limit = quota - guaranteed. CPU and
    memory are borrowed without a limit of their own (the GPUs bound them). Kubernetes-pool flavors come first, so
    a job takes flex GPUs only when the kubernetes pool has none left for it."""
    ordered = sorted(flavors(site), key=lambda f: KUBERNETES_POOLS.index(f.pool))
    entries = [{"name": f.name, "resources": [
        {"name": "cpu", "nominalQuota": 0},
        {"name": "memory", "nominalQuota": 0},
        {"name": GPU_RESOURCE, "nominalQuota": floor, "borrowingLimit": quota[f.name] - floor},
    ]} for f in ordered for floor in [guaranteed[f.name]]]
    threshold = borrow_threshold(site)
    borrow: dict[str, Any] = {"policy": "Never"}
    if threshold is not None:
        borrow = {"policy": LOWER_PRIORITY, "maxPriorityThreshold": threshold}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": team_cluster_queue_name(team), "labels": {TEAM_LABEL: team}},
        "spec": {
            "cohort": COHORT,
            "namespaceSelector": {"matchLabels": {TEAM_LABEL: team}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": _resource_group(entries),
            # withinClusterQueue: a team's own lower-priority work yields first. reclaimWithinCohort: a team under
            # its guarantee takes it back from lower-priority borrowers. borrowWithinCohort: above its guarantee a
            # team may evict other teams' lower-priority borrowed work, never anything above the threshold.
            "preemption": {"withinClusterQueue": LOWER_PRIORITY, "reclaimWithinCohort": LOWER_PRIORITY,
                           "borrowWithinCohort": borrow},
        },
    }


def local_queue(namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": TEAM_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": team_cluster_queue_name(namespace)}}


def manager_config(site: Site) -> dict[str, Any]:
    """The manager's Configuration; the chart takes it whole (managerConfig.controllerManagerConfigYaml), so the
    chart's own defaults for health, metrics, webhook and leader election are repeated here."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        # All-or-nothing: blockAdmission admits one workload at a time until its pods are ready, so two gangs
        # never deadlock holding half the GPUs each (Kueue docs, "Configure all-or-nothing scheduling with
        # ready Pods").
        "waitForPodsReady": {
            "enable": True,
            "timeout": f"{site.scheduling.pods_ready_timeout_minutes}m",
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": REQUEUE_BACKOFF_LIMIT},
        },
        # A Job outside the team namespaces that names no queue is left to kube-scheduler (inside them the
        # `default` LocalQueue names itself); Deployments are no integration here, so inference is never queued.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob"]},
    }


def chart_values(site: Site) -> dict[str, Any]:
    return {
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(site), sort_keys=False)},
        # Kueue's own metrics (admission wait, pending workloads) go to the monitoring stack.
        "enablePrometheus": True,
    }
