"""Kueue's objects and manager configuration, rendered from the site spec.

Pure. Field names follow Kueue's v1beta1 API (kueue.x-k8s.io/v1beta1: ResourceFlavor, ClusterQueue,
LocalQueue; config.kueue.x-k8s.io/v1beta1: Configuration) as served by the pinned chart
(components.charts.KUEUE); docs/scheduling.md says why Kueue and how the queues fit together.

- One ResourceFlavor per GPU model and pool, selecting nodes by the labels the node admission sets
  (`gpucluster.io/gpu-model`, `gpucluster.io/pool`).
- One ClusterQueue per pool Kubernetes may use (kubernetes, flex), all in one cohort: preemption of
  lower-priority workloads within a queue, and reclaim of lent quota from lower-priority borrowers in the cohort.
- The flex pool is Slurm's until lent: its queue lends nothing (`lendingLimit: 0`) until the lending runbook
  raises it; the kubernetes queue can then borrow the flex flavor.
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
KUBERNETES_POOLS = (Pool.KUBERNETES, Pool.FLEX)
"""Pools whose nodes Kubernetes may schedule GPU work on; the slurm pool is Slurm's alone."""
TEAM_QUEUE = "gpu"
"""Each team namespace's LocalQueue (`kueue.x-k8s.io/queue-name: gpu` on a Job)."""
TEAM_CLUSTER_QUEUE = f"gpu-{Pool.KUBERNETES.value}"
"""The ClusterQueue every team's LocalQueue submits to; it borrows the flex flavor when flex is lent."""
TEAM_NAMESPACES = {"matchExpressions": [{"key": f"{LABEL_PREFIX}/team", "operator": "Exists"}]}
"""Only team namespaces (labelled by their Team component) may submit to the ClusterQueues."""
REQUEUE_BACKOFF_LIMIT = 5
"""PodsReady evictions after which Kueue deactivates a workload instead of requeueing it again."""


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


def _quota(flavor: Flavor, nominal: bool, lending_limit: bool) -> dict[str, Any]:
    # Kueue admits a workload only if its queue covers every resource it requests, so CPU and memory are
    # covered too; a borrowed flavor has no quota of its own (0) and is lent by its pool's queue.
    amounts = {"cpu": flavor.cpus, "memory": f"{flavor.memory_gib}Gi", GPU_RESOURCE: flavor.gpus}
    resources = []
    for resource, amount in amounts.items():
        entry: dict[str, Any] = {"name": resource, "nominalQuota": amount if nominal else 0}
        if lending_limit:
            entry["lendingLimit"] = 0
        resources.append(entry)
    return {"name": flavor.name, "resources": resources}


def cluster_queue(site: Site, pool: Pool) -> dict[str, Any]:
    own = [f for f in flavors(site) if f.pool == pool]
    borrowed = [f for f in flavors(site) if f.pool != pool and pool == Pool.KUBERNETES]
    lends_nothing = pool == Pool.FLEX
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": f"gpu-{pool.value}"},
        "spec": {
            "cohort": COHORT,
            "namespaceSelector": TEAM_NAMESPACES,
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                "flavors": [*(_quota(f, True, lends_nothing) for f in own),
                            *(_quota(f, False, False) for f in borrowed)],
            }],
            # LowerPriority on both: a workload only ever preempts lower-priority ones, so the class order
            # (components.preemption) holds inside Kueue too; reclaiming lent quota never evicts inference.
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"},
        },
    }


def cluster_queues(site: Site) -> Iterator[dict[str, Any]]:
    pools = {f.pool for f in flavors(site)}
    for pool in KUBERNETES_POOLS:
        if pool in pools:
            yield cluster_queue(site, pool)


def local_queue(namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": TEAM_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": TEAM_CLUSTER_QUEUE}}


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
        # Jobs without a queue name are left to kube-scheduler: inference Deployments are never queued.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob"]},
    }


def chart_values(site: Site) -> dict[str, Any]:
    return {
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(site), sort_keys=False)},
        # Kueue's own metrics (admission wait, pending workloads) go to the monitoring stack.
        "enablePrometheus": True,
    }
