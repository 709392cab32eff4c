"""Kueue's objects and manager configuration, rendered from the site spec.

Pure. Field names follow Kueue's v1beta1 API (kueue.x-k8s.io/v1beta1: ResourceFlavor, ClusterQueue,
LocalQueue; config.kueue.x-k8s.io/v1beta1: Configuration) as served by the pinned chart
(components.charts.KUEUE); docs/scheduling.md says why Kueue and how the queues fit together.

- One ResourceFlavor per GPU model and pool, selecting nodes by the labels the node admission sets
  (`gpucluster.io/gpu-model`, `gpucluster.io/pool`).
- One ClusterQueue per pool Kubernetes may use (kubernetes, flex), all in one cohort. A pool's queue holds the
  pool's capacity as nominal quota, less what teams are guaranteed and what the model servers may hold, and lends
  it; no namespace submits to it. The model servers are Deployments outside Kueue: counted as Kueue's, their GPUs
  would be admitted to team jobs that then sit Pending until waitForPodsReady evicts them.
  The flex pool is Slurm's until lent, and then to inference: its queue lends nothing (`lendingLimit: 0`), and
  its flavor selects only nodes `gpuctl flex lend` labelled lent.
- One ClusterQueue per team in the same cohort, which is where a team's GPUs are capped per kubernetes-pool
  flavor: nominal quota = the team's guaranteed share, borrowing limit = the rest of its quota. Kueue admits a
  workload only within nominal + borrowing limit for each flavor, so the cap holds for every queued job.
- Preemption follows the one preemption table: only ever lower-priority workloads, and never one above the
  highest preemptible Kubernetes class, so inference is never evicted by a training job inside Kueue.
- All-or-nothing admission: `waitForPodsReady` in the manager's configuration (it is a manager setting, not a
  queue field): a workload whose pods are not all ready within the timeout is evicted and requeued.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from components.charts import KUEUE
from components.scheduling.preemption import priority_classes
from components.site.catalog import gres_type
from components.site.derived import once_per_site
from components.site.problems import Problem
from components.site.site import KUBERNETES_POOLS, Pool, Site
from components.site.wellknown import (
    FLEX_LENT_LABEL,
    GPU_MODEL_LABEL,
    KUEUE_NAMESPACE,
    POOL_LABEL,
    POOL_TAINT,
    TEAM_LABEL,
)

API_VERSION = "kueue.x-k8s.io/v1beta1"
NAMESPACE = KUEUE_NAMESPACE
COHORT = "gpu-cluster"
GPU_RESOURCE = "nvidia.com/gpu"
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


@once_per_site
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
    spec: dict[str, Any] = {"nodeLabels": {GPU_MODEL_LABEL: flavor.gpu_model,
                                           POOL_LABEL: flavor.pool.value}}
    if flavor.pool != Pool.KUBERNETES:
        # Only flex nodes lent to Kubernetes (runbooks/flex/lending.py); the others are Slurm's.
        spec["nodeLabels"][FLEX_LENT_LABEL] = "true"
        # Slurm and flex nodes carry the pool taint; Kueue adds a flavor's tolerations to the pods it admits.
        spec["tolerations"] = [{"key": POOL_TAINT, "operator": "Equal", "value": flavor.pool.value,
                                "effect": "NoSchedule"}]
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor.name}, "spec": spec}


def team_flavors(site: Site) -> list[Flavor]:
    """The flavors teams get quota on: the kubernetes pool's. Flex GPUs are Slurm's until lent, and then they go to
    inference (runbooks/flex/lending.py), not to queued jobs."""
    return [f for f in flavors(site) if f.pool == Pool.KUBERNETES]


def inference_held(site: Site) -> dict[str, int]:
    """GPUs per team flavor the model servers may hold outside Kueue: replicas.max x gpus_per_replica of every served
    model on its GPU's kubernetes-pool flavor. They may also run on lent flex nodes, but nothing keeps them off the
    kubernetes pool first, so all of them count against it."""
    held = {f.name: 0 for f in team_flavors(site)}
    flavor_of = {f.gpu_model: f.name for f in team_flavors(site)}
    for model in site.inference.models:
        if model.gpu_model in flavor_of:
            held[flavor_of[model.gpu_model]] += model.replicas.max * model.gpus_per_replica
    return held


def team_gpus(site: Site) -> dict[str, int]:
    """GPUs per team flavor Kueue may admit team jobs to: the flavor's, less what the model servers may hold."""
    held = inference_held(site)
    return {f.name: max(0, f.gpus - held[f.name]) for f in team_flavors(site)}


def check_inference_leaves_room(site: Site) -> list[Problem]:
    """The model servers at their most leave some kubernetes-pool GPU to the teams' Kueue queues."""
    capacity = {f.name: f.gpus for f in team_flavors(site)}
    if not capacity or not site.teams or any(team_gpus(site).values()):
        return []
    held = inference_held(site)
    models = "; ".join(f"inference.models[{i}] {m.name}: {m.replicas.max} x {m.gpus_per_replica}"
                       for i, m in enumerate(site.inference.models))
    flavors_held = ", ".join(f"{held[name]} of {name}'s {gpus}" for name, gpus in capacity.items())
    return [Problem("inference.models", f"the model servers may hold {flavors_held} GPUs (replicas.max x "
                                        f"gpus_per_replica: {models}): no kubernetes-pool GPU is left for the teams' "
                                        "Kueue queues")]


def guaranteed_share(flavor: Flavor, gpus: int) -> dict[str, int]:
    """What a guarantee of `gpus` GPUs sets aside on a flavor: the GPUs and the same share of its CPU and memory
    (GiB), rounded down. A guaranteed job within them is not borrowing, so Kueue lets it reclaim its quota."""
    return {"cpu": flavor.cpus * gpus // flavor.gpus, "memory": flavor.memory_gib * gpus // flavor.gpus,
            GPU_RESOURCE: gpus}


def _quantities(amounts: dict[str, int]) -> dict[str, int | str]:
    return {**amounts, "memory": f"{amounts['memory']}Gi"}


def set_aside(site: Site) -> dict[str, dict[str, int]]:
    """Per flavor, what the pool's queue does not offer: what onboarded teams are guaranteed (their queues' nominal
    quota) and what the model servers may hold, with the same share of CPU and memory."""
    by_name = {f.name: f for f in flavors(site)}
    totals = {name: dict.fromkeys(("cpu", "memory", GPU_RESOURCE), 0) for name in by_name}
    held = inference_held(site)
    shares = [(name, min(gpus, by_name[name].gpus)) for name, gpus in held.items()]
    shares += [(name, gpus) for team in site.teams_onboarded() for name, gpus in team.gpu_guaranteed.items()]
    for name, gpus in shares:
        for resource, amount in guaranteed_share(by_name[name], gpus).items():
            totals[name][resource] += amount
    return totals


def _resource_group(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Kueue admits a workload only if its queue covers every resource it requests, so CPU and memory are covered
    # too; each flavor lists the covered resources in the same order (a rule of the ClusterQueue CRD).
    return [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": entries}]


def _pool_flavor(flavor: Flavor, reserved: dict[str, int]) -> dict[str, Any]:
    capacity = {"cpu": flavor.cpus, "memory": flavor.memory_gib, GPU_RESOURCE: flavor.gpus}
    amounts = _quantities({resource: capacity[resource] - reserved[resource] for resource in capacity})
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
    reserved = set_aside(site)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": f"gpu-{pool.value}"},
        "spec": {
            "cohort": COHORT,
            "resourceGroups": _resource_group([_pool_flavor(f, reserved[f.name])
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
    """A team's caps on each team flavor: nominal quota = its guaranteed share, GPU borrowing limit = quota -
    guaranteed. CPU and memory are borrowed without a limit of their own (the GPUs bound them)."""
    entries = []
    for f in team_flavors(site):
        share = _quantities(guaranteed_share(f, guaranteed[f.name]))
        entries.append({"name": f.name, "resources": [
            {"name": "cpu", "nominalQuota": share["cpu"]},
            {"name": "memory", "nominalQuota": share["memory"]},
            {"name": GPU_RESOURCE, "nominalQuota": share[GPU_RESOURCE],
             "borrowingLimit": quota[f.name] - guaranteed[f.name]},
        ]})
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
        # The chart's API client limits (kueue 0.14.1 values.yaml); without them the manager falls back to
        # client-go's 20 queries/s, burst 30, too few to admit a burst of jobs at peak.
        "clientConnection": {"qps": 50, "burst": 100},
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
        # Only kinds the cluster has: the stack installs no JobSet or Kubeflow CRDs, so batch Jobs alone.
        "integrations": {"frameworks": ["batch/job"]},
    }


def chart_values(site: Site) -> dict[str, Any]:
    return {
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(site), sort_keys=False)},
        # Kueue's own metrics (admission wait, pending workloads) go to the monitoring stack.
        "enablePrometheus": True,
    }


KUEUE_RELEASE = "kueue"


def scheduling_facts(site: Site) -> dict[str, Any]:
    """What `gpuctl plan` and the runbooks read: the classes as Kubernetes sees them, the flavors and queues."""
    return {
        "priority_classes": [{"name": pc.name, "value": pc.value, "preemption_policy": pc.preemption_policy,
                              "global_default": pc.global_default} for pc in priority_classes(site)],
        "kueue": {"chart": KUEUE.name, "version": KUEUE.version,
                  "pods_ready_timeout_minutes": site.scheduling.pods_ready_timeout_minutes},
        "flavors": {f.name: f.gpus for f in flavors(site)},
        "cluster_queues": [q["metadata"]["name"] for q in cluster_queues(site)],
        "lendable_gpus": lendable_gpus(site),
    }
