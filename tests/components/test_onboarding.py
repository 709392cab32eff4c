"""What each onboarded team gets, and that it never changes when the stage advances."""

from typing import Any

import pytest

from components.kueue_config import cluster_queues, flavors, local_queue, manager_config, resource_flavor
from components.onboarding import (
    nfs_storage_class,
    resource_quota_manifest,
    team_facts,
    team_plans,
    team_shares,
)
from tests.builders import parse, with_changes


def test_should_spread_team_shares_over_the_nfs_servers(prod: dict[str, Any]) -> None:
    shares = team_shares(parse(with_changes(prod, stage="full")))
    servers = {s.server for s in shares}
    assert len(shares) == 12 and servers == {"nfs-hot-01.dc1.internal", "nfs-hot-02.dc1.internal"}
    assert [s.share for s in shares[:2]] == ["/exports/nlp-foundation", "/exports/speech"]


def test_should_give_each_team_its_own_nfs_class(prod: dict[str, Any]) -> None:
    cls = nfs_storage_class(team_shares(parse(prod))[1])
    assert cls["metadata"] == {"name": "nfs-hot-speech", "labels": {"gpucluster.io/team": "speech"}}
    assert cls["provisioner"] == "nfs.csi.k8s.io"
    assert cls["parameters"] == {"server": "nfs-hot-02.dc1.internal", "share": "/exports/speech"}
    assert cls["reclaimPolicy"] == "Retain"


@pytest.mark.parametrize("stage", ["half", "full"], ids=lambda s: f"canary teams are unchanged at {s}")
def test_should_keep_a_teams_plan_when_the_stage_advances(prod: dict[str, Any], stage: str) -> None:
    canary = {p.name: team_facts(p) for p in team_plans(parse(prod))}
    later = {p.name: team_facts(p) for p in team_plans(parse(with_changes(prod, stage=stage)))}
    assert list(canary) == ["nlp-foundation", "speech"]
    assert {name: later[name] for name in canary} == canary


def test_should_default_each_gpu_model_quota_to_one_node(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, teams__1__gpu_quota={"RTX-4090": 16}))
    quotas = {p.name: p.gpu_quota for p in team_plans(site)}
    assert quotas == {"nlp-foundation": {"A800-SXM4-80GB": 8, "RTX-4090": 8},
                      "speech": {"A800-SXM4-80GB": 8, "RTX-4090": 16}}
    assert resource_quota_manifest(team_plans(site)[1])["spec"] == {"hard": {"requests.nvidia.com/gpu": "24"}}


def test_should_record_the_existing_dashboard_route_and_account(prod: dict[str, Any]) -> None:
    facts = team_facts(team_plans(parse(prod))[0])
    assert facts["grafana"] == {"folder": "gpu-teams", "dashboard": "team-usage", "variable": "team=nlp-foundation"}
    assert facts["alert_route"] == {"receiver": "slack-team-nlp-foundation", "channel": "#team-nlp-foundation"}
    assert facts["slurm_account"] == {"name": "nlp-foundation", "fairshare": 1, "default_qos": "train_normal",
                                      "qos": ["inference", "train_high", "train_normal", "train_preemptible"]}


def test_should_select_flavor_nodes_by_the_labels_node_admission_sets(prod: dict[str, Any]) -> None:
    site = parse(prod)
    assert {f.name: f.gpus for f in flavors(site)} == {"a800-flex": 16, "a800-kubernetes": 16,
                                                       "rtx4090-kubernetes": 32}
    flex = resource_flavor(flavors(site)[0])["spec"]
    assert flex["nodeLabels"] == {"gpucluster.io/gpu-model": "A800-SXM4-80GB", "gpucluster.io/pool": "flex"}
    assert flex["tolerations"] == [{"key": "gpucluster.io/pool", "operator": "Equal", "value": "flex",
                                    "effect": "NoSchedule"}]


def test_should_put_one_queue_per_pool_in_one_cohort_preempting_only_lower_priority(prod: dict[str, Any]) -> None:
    queues = {q["metadata"]["name"]: q["spec"] for q in cluster_queues(parse(prod))}
    assert list(queues) == ["gpu-kubernetes", "gpu-flex"]
    assert {spec["cohort"] for spec in queues.values()} == {"gpu-cluster"}
    assert all(spec["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
               for spec in queues.values())
    # Flex is Slurm's until lent: its queue lends nothing; the kubernetes queue borrows its flavor (quota 0).
    (flex,) = queues["gpu-flex"]["resourceGroups"][0]["flavors"]
    assert {r["lendingLimit"] for r in flex["resources"]} == {0}
    borrowed = queues["gpu-kubernetes"]["resourceGroups"][0]["flavors"][-1]
    assert borrowed["name"] == "a800-flex" and {r["nominalQuota"] for r in borrowed["resources"]} == {0}
    assert local_queue("speech")["spec"] == {"clusterQueue": "gpu-kubernetes"}


def test_should_admit_all_or_nothing_with_wait_for_pods_ready(prod: dict[str, Any]) -> None:
    config = manager_config(parse(with_changes(prod, scheduling={"pods_ready_timeout_minutes": 15})))
    assert config["waitForPodsReady"] == {"enable": True, "timeout": "15m", "blockAdmission": True,
                                          "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5}}
