"""Kueue's flavors and queues: the pools' capacity, each team's caps per flavor, and the preemption they allow."""

import re
from typing import Any

import pytest

from components.scheduling.kueue import (
    borrow_threshold,
    cluster_queues,
    flavors,
    inference_held,
    lendable_gpus,
    manager_config,
    resource_flavor,
    team_gpus,
)
from components.site.site import Site
from components.teams.plan import team_plans
from tests.builders import parse, with_changes

GPU = "nvidia.com/gpu"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def all_queues(site: Site) -> list[dict[str, Any]]:
    return [*cluster_queues(site), *(plan.cluster_queue for plan in team_plans(site))]


def quantity(value: int | str) -> int:
    """The quantities rendered here: whole numbers, memory in Gi."""
    return int(str(value).removesuffix("Gi"))


def gpu_entries(queue: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: next(r for r in f["resources"] if r["name"] == GPU)
            for group in queue["spec"]["resourceGroups"] for f in group["flavors"]}


@pytest.fixture
def guaranteed(prod: dict[str, Any]) -> dict[str, Any]:
    """The full stage, three teams with guarantees on the kubernetes pool, beside model servers that may hold 8 GPUs of
    each kubernetes flavor (2 x 4 A800, 8 x 1 RTX 4090)."""
    return with_changes(prod, stage="full", teams__0__gpu_guaranteed={"a800-kubernetes": 4},
                        teams__1__gpu_guaranteed={"a800-kubernetes": 2, "rtx4090-kubernetes": 8},
                        teams__7__gpu_guaranteed={"rtx4090-kubernetes": 8},
                        inference__models__0__replicas={"min": 1, "max": 2},
                        inference__models__1__replicas={"min": 2, "max": 8})


def test_should_select_flavor_nodes_by_the_labels_node_admission_sets(prod: dict[str, Any]) -> None:
    site = parse(prod)
    assert {f.name: f.gpus for f in flavors(site)} == {"a800-flex": 16, "a800-kubernetes": 16,
                                                       "rtx4090-kubernetes": 32}
    flex = resource_flavor(flavors(site)[0])["spec"]
    # Only flex nodes lent to Kubernetes (gpuctl flex lend labels them); the rest are Slurm's.
    assert flex["nodeLabels"] == {"gpucluster.io/gpu-model": "A800-SXM4-80GB", "gpucluster.io/pool": "flex",
                                  "gpucluster.io/flex-lent": "true"}
    assert flex["tolerations"] == [{"key": "gpucluster.io/pool", "operator": "Equal", "value": "flex",
                                    "effect": "NoSchedule"}]


def cohort_quota(site: Site) -> dict[tuple[str, str], int]:
    """Kueue's cohort capacity per (flavor, resource): the sum of its queues' nominal quotas (ClusterQueue CRD,
    nominalQuota)."""
    nominal = {(f.name, r): 0 for f in flavors(site) for r in ("cpu", "memory", GPU)}
    for queue in all_queues(site):
        for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
            for resource in flavor["resources"]:
                nominal[flavor["name"], resource["name"]] += quantity(resource["nominalQuota"])
    return nominal


@pytest.mark.parametrize("stage", ["canary", "half", "full"])
def test_should_give_the_cohort_each_flavors_capacity_less_the_model_servers(guaranteed: dict[str, Any],
                                                                              stage: str) -> None:
    # Guarantees move GPUs, CPU and memory from a pool's queue to a team's, and never add any; what the model servers
    # may hold (8 GPUs of each kubernetes flavor here, and that share of its CPU and memory) is no queue's.
    site = parse(with_changes(guaranteed, stage=stage))
    held = {"a800-kubernetes": 8, "rtx4090-kubernetes": 8, "a800-flex": 0}
    assert cohort_quota(site) == {key: value for f in flavors(site)
                                  for key, value in (((f.name, "cpu"), f.cpus * (f.gpus - held[f.name]) // f.gpus),
                                                     ((f.name, "memory"),
                                                      f.memory_gib * (f.gpus - held[f.name]) // f.gpus),
                                                     ((f.name, GPU), f.gpus - held[f.name]))}


def test_should_offer_teams_no_gpu_the_model_servers_may_hold(prod: dict[str, Any]) -> None:
    # prod: qwen2-5-72b at most 4 x 4 A800, llama-3-1-8b at most 24 x 1 RTX 4090, outside Kueue.
    site = parse(prod)
    assert (inference_held(site), team_gpus(site)) == ({"a800-kubernetes": 16, "rtx4090-kubernetes": 24},
                                                       {"a800-kubernetes": 0, "rtx4090-kubernetes": 8})
    assert {name: gpus for (name, resource), gpus in cohort_quota(site).items() if resource == GPU} == {
        "a800-kubernetes": 0, "rtx4090-kubernetes": 8, "a800-flex": 16}


def test_should_set_aside_cpu_and_memory_with_a_guarantee(guaranteed: dict[str, Any]) -> None:
    # A guaranteed job asks for CPU and memory too; with none set aside it would be borrowing, and Kueue only
    # reclaims quota for a workload that fits its queue's nominal quota.
    site = parse(guaranteed)
    nlp = team_plans(site)[0].cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]
    # a800-kubernetes: 2 nodes of 128 CPUs and 2,048 GiB, 16 GPUs in all; a quarter of them guaranteed.
    assert nlp["name"] == "a800-kubernetes"
    assert {r["name"]: r["nominalQuota"] for r in nlp["resources"]} == {"cpu": 64, "memory": "1024Gi", GPU: 4}


def test_should_take_guarantees_only_of_onboarded_teams_from_the_pool(guaranteed: dict[str, Any]) -> None:
    # 16 A800 less 8 for the model servers and 6 guaranteed; 32 RTX 4090 less 8 and 16.
    assert lendable_gpus(parse(guaranteed)) == {"a800-flex": 0, "a800-kubernetes": 2, "rtx4090-kubernetes": 8}
    # recsys (teams[7]) joins at full: at half its 8 RTX 4090 GPUs are still the pool's.
    assert lendable_gpus(parse(with_changes(guaranteed, stage="half")))["rtx4090-kubernetes"] == 16


def test_should_let_the_pools_lend_but_take_no_workloads(prod: dict[str, Any]) -> None:
    queues = {q["metadata"]["name"]: q["spec"] for q in cluster_queues(parse(prod))}
    assert list(queues) == ["gpu-kubernetes", "gpu-flex"]
    # No namespaceSelector is Kueue's "nothing": no LocalQueue of any namespace can submit to a pool's queue.
    assert all("namespaceSelector" not in spec and spec["cohort"] == "gpu-cluster" for spec in queues.values())
    kubernetes = queues["gpu-kubernetes"]["resourceGroups"][0]["flavors"]
    assert all("lendingLimit" not in r for f in kubernetes for r in f["resources"])
    # Flex is Slurm's until lent: its queue lends none of its GPUs, CPU or memory.
    (flex,) = queues["gpu-flex"]["resourceGroups"][0]["flavors"]
    assert {r["name"]: r["lendingLimit"] for r in flex["resources"]} == {"cpu": 0, "memory": 0, GPU: 0}


def test_should_cap_a_team_per_flavor_and_admit_only_its_namespace(guaranteed: dict[str, Any]) -> None:
    site = parse(with_changes(guaranteed, teams__1__gpu_quota={"a800-kubernetes": 6}))
    speech = team_plans(site)[1].cluster_queue
    assert speech["spec"]["namespaceSelector"] == {"matchLabels": {"gpucluster.io/team": "speech"}}
    # Kueue admits up to nominalQuota + borrowingLimit per flavor: guarantee + the rest of the quota.
    assert {name: (gpu["nominalQuota"], gpu["borrowingLimit"]) for name, gpu in gpu_entries(speech).items()} == {
        "a800-kubernetes": (2, 4), "rtx4090-kubernetes": (8, 0)}


def test_should_never_let_a_borrowing_team_evict_inference(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, stage="canary"))
    values = {c.name: c.kubernetes_priority for c in site.scheduling.classes}
    assert borrow_threshold(site) == values["production"] < values["inference"]
    (plan, *_) = team_plans(site)
    preemption = plan.cluster_queue["spec"]["preemption"]
    assert preemption == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority",
                          "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 1_000_000}}


def test_should_not_preempt_other_teams_when_no_kubernetes_class_is_preemptible(prod: dict[str, Any]) -> None:
    # A table whose only Kubernetes class is inference: a borrowing team may then evict nobody.
    training = {"production", "staging", "dev"}
    rows = [c.model_dump(mode="json") for c in parse(prod).scheduling.classes if c.name not in training]
    kept = [{**row, "preempts": [p for p in row["preempts"] if p not in training]} for row in rows]
    site = parse(with_changes(prod, stage="canary", scheduling={"classes": kept}))
    assert borrow_threshold(site) is None
    (plan, *_) = team_plans(site)
    assert plan.cluster_queue["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "Never"}


def test_should_keep_the_rules_of_kueues_cluster_queue_crd(guaranteed: dict[str, Any]) -> None:
    # The CEL and schema rules of ClusterQueue in kueue.x-k8s.io/v1beta1 (config/components/crd/bases/
    # kueue.x-k8s.io_clusterqueues.yaml, v0.14): the API server refuses a queue that breaks one.
    site = parse(guaranteed)
    flavor_names = {resource_flavor(f)["metadata"]["name"] for f in flavors(site)}
    for queue in all_queues(site):
        spec, name = queue["spec"], queue["metadata"]["name"]
        assert DNS_SUBDOMAIN.match(name) and DNS_SUBDOMAIN.match(spec["cohort"]), name
        assert 1 <= len(spec["resourceGroups"]) <= 16, name
        for group in spec["resourceGroups"]:
            assert 1 <= len(group["flavors"]) <= 64, name
            for flavor in group["flavors"]:
                assert flavor["name"] in flavor_names, name
                # "Each flavor MUST list all the resources listed for this group in the same order".
                assert [r["name"] for r in flavor["resources"]] == group["coveredResources"], name
                for resource in flavor["resources"]:
                    limits = {k: quantity(resource[k]) for k in ("nominalQuota", "borrowingLimit", "lendingLimit")
                              if k in resource}
                    assert min(limits.values()) >= 0, name
                    # Kueue's webhook: lendingLimit may not exceed nominalQuota.
                    assert limits.get("lendingLimit", 0) <= limits["nominalQuota"], name
        preemption = spec.get("preemption", {})
        # "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" is refused.
        assert not (preemption.get("reclaimWithinCohort", "Never") == "Never"
                    and preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"), name


def test_should_admit_all_or_nothing_with_wait_for_pods_ready(prod: dict[str, Any]) -> None:
    config = manager_config(parse(with_changes(prod, scheduling={"pods_ready_timeout_minutes": 15})))
    assert config["waitForPodsReady"] == {"enable": True, "timeout": "15m", "blockAdmission": True,
                                          "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5}}
