"""What each onboarded team gets, and that it never changes when the stage advances."""

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from components.teams.plan import (
    reserved_priority_quota_manifest,
    resource_quota_manifest,
    team_facts,
    team_plans,
)
from tests.builders import parse, with_changes


@pytest.fixture
def prod(prod: dict[str, Any]) -> dict[str, Any]:
    """The prod site at the canary stage, whose two teams these tests plan (its first stage, platform, has none)."""
    return with_changes(prod, stage="canary")


@pytest.mark.parametrize("stage", ["half", "full"], ids=lambda s: f"canary teams are unchanged at {s}")
def test_should_keep_a_teams_plan_when_the_stage_advances(prod: dict[str, Any], stage: str) -> None:
    canary = {p.name: team_facts(p) for p in team_plans(parse(prod))}
    later = {p.name: team_facts(p) for p in team_plans(parse(with_changes(prod, stage=stage)))}
    assert list(canary) == ["nlp-foundation", "speech"]
    assert {name: later[name] for name in canary} == canary


def test_should_default_each_flavor_quota_to_one_node_and_guarantee_nothing(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, teams__1__gpu_quota={"rtx4090-kubernetes": 16},
                              teams__1__gpu_guaranteed={"rtx4090-kubernetes": 4},
                              inference__models__1__replicas={"min": 2, "max": 16}))
    plans = {p.name: p for p in team_plans(site)}
    assert plans["nlp-foundation"].gpu_quota == {"a800-kubernetes": 8, "rtx4090-kubernetes": 8}
    assert plans["nlp-foundation"].gpu_guaranteed == {"a800-kubernetes": 0, "rtx4090-kubernetes": 0}
    assert plans["speech"].gpu_quota["rtx4090-kubernetes"] == 16
    assert plans["speech"].gpu_guaranteed["rtx4090-kubernetes"] == 4
    # The namespace quota cannot tell flavors apart: it holds the team's total (8 + 16).
    assert resource_quota_manifest(plans["speech"])["spec"] == {"hard": {"requests.nvidia.com/gpu": "24"}}


def test_should_hold_each_team_to_its_quota_in_its_own_cluster_queue(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, teams__1__gpu_quota={"rtx4090-kubernetes": 16},
                              teams__1__gpu_guaranteed={"rtx4090-kubernetes": 4},
                              inference__models__1__replicas={"min": 2, "max": 16}))
    speech = team_plans(site)[1]
    queue = speech.cluster_queue
    assert queue["metadata"]["name"] == "team-speech" == speech.local_queue["spec"]["clusterQueue"]
    assert speech.local_queue["metadata"] == {"name": "default", "namespace": "speech"}
    assert team_facts(speech)["cluster_queue"] == "team-speech"
    gpus = {f["name"]: next(r for r in f["resources"] if r["name"] == "nvidia.com/gpu")
            for f in queue["spec"]["resourceGroups"][0]["flavors"]}
    assert gpus["rtx4090-kubernetes"] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 12}
    assert list(gpus) == ["a800-kubernetes", "rtx4090-kubernetes"]  # flex is lent to inference, not to teams
    assert gpus["a800-kubernetes"] == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 8}


def test_should_record_the_existing_dashboard_route_and_account(prod: dict[str, Any]) -> None:
    facts = team_facts(team_plans(parse(prod))[0])
    assert facts["grafana"] == {"folder": "gpu-teams", "dashboard": "team-usage", "variable": "team=nlp-foundation"}
    assert facts["alert_route"] == {"receiver": "slack-team-nlp-foundation", "channel": "#team-nlp-foundation"}
    assert facts["slurm_account"] == {"name": "nlp-foundation", "fairshare": 1, "default_qos": "train_normal",
                                      "qos": ["train_high", "train_normal", "train_preemptible"]}



def test_should_keep_team_namespaces_out_of_the_classes_teams_may_not_use(prod: dict[str, Any]) -> None:
    plan = team_plans(parse(prod))[0]
    quota = reserved_priority_quota_manifest(plan)
    assert quota["spec"] == {"hard": {"pods": "0"}, "scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["inference"]}]}}
    assert quota["metadata"]["namespace"] == plan.name
    kubernetes_validate.validate(quota, "1.30", strict=True)
