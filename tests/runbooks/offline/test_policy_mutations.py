"""The mutation matrix: each mutation of the prod stack is blocked by exactly the policy meant, and no other.

Every case goes through the pack's real gRPC entry point (runbooks/offline/policy_pack.py), as the engine
would send the mutated stack.
"""

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pulumi.output import UNKNOWN

from runbooks.offline.engine import Resource, ResourceGraph, run_program
from runbooks.offline.policy_pack import check_policies
from tests.builders import REPO, prod_config_at

Mutation = Callable[[ResourceGraph], None]


@pytest.fixture(scope="module")
def prod() -> ResourceGraph:
    # At the canary stage: the team mutations need a team (prod's first stage onboards none).
    return run_program(REPO, "prod", prod_config_at("canary"))


def one(graph: ResourceGraph, type_: str, name: str | None = None) -> Resource:
    found = [r for r in graph.resources.values() if r.type == type_ and name in (None, r.name)]
    assert len(found) == 1, (type_, name, [r.name for r in found])
    return found[0]


def values(graph: ResourceGraph, chart: str) -> list[dict[str, Any]]:
    """The values of the release of a chart, as its inputs and as its outputs (the engine sends both)."""
    (release,) = [r for r in graph.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith(chart)]
    return [release.inputs["values"], release.outputs["values"]]


def dcgm_disabled(graph: ResourceGraph) -> None:
    for v in values(graph, "gpu-operator"):
        v["dcgmExporter"]["enabled"] = False


def retention_7_days(graph: ResourceGraph) -> None:
    for v in values(graph, "kube-prometheus-stack"):
        v["prometheus"]["prometheusSpec"]["retention"] = "7d"


def remote_write_removed(graph: ResourceGraph) -> None:
    for v in values(graph, "kube-prometheus-stack"):
        v["prometheus"]["prometheusSpec"].pop("remoteWrite")


def rack(graph: ResourceGraph) -> dict[str, Any]:
    return one(graph, "gpucluster:facility:Rack", "a01").outputs


def rule_groups(graph: ResourceGraph) -> list[list[dict[str, Any]]]:
    """The groups of the deployed PrometheusRule, as its inputs and as its outputs."""
    rules = one(graph, "kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    return [rules.inputs["spec"]["groups"], rules.outputs["spec"]["groups"]]


def drop_alert(graph: ResourceGraph, name: str) -> None:
    for groups in rule_groups(graph):
        for group in groups:
            group["rules"] = [r for r in group["rules"] if r.get("alert") != name]


def hotter_alert(graph: ResourceGraph) -> None:
    for groups in rule_groups(graph):
        for rule in (r for g in groups for r in g["rules"] if r.get("alert") == "GpuTemperatureHigh"):
            rule["expr"] = rule["expr"].replace("> 85", "> 95")


def critical_to_null(graph: ResourceGraph) -> None:
    for v in values(graph, "kube-prometheus-stack"):
        for route in v["alertmanager"]["config"]["route"]["routes"]:
            if 'severity="critical"' in route.get("matchers", []):
                route["receiver"] = "null"


def cost_dashboard_removed(graph: ResourceGraph) -> None:
    del graph.resources[one(graph, "kubernetes:core/v1:ConfigMap", "prod-monitoring-grafana-dashboard-llm-cost").urn]


def drop(graph: ResourceGraph, type_: str) -> None:
    for urn in [r.urn for r in graph.resources.values() if r.type == type_]:
        del graph.resources[urn]


def unmonitored_team_namespace(graph: ResourceGraph) -> None:
    namespace = one(graph, "kubernetes:core/v1:Namespace", "prod-team-speech-namespace")
    namespace.parent, namespace.dependencies = graph.stack_urn, []


def uncapped_team_queue(graph: ResourceGraph) -> None:
    queue = one(graph, "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "prod-team-speech-cluster-queue")
    for spec in (queue.inputs["spec"], queue.outputs["spec"]):
        for flavor in spec["resourceGroups"][0]["flavors"]:
            flavor["resources"][-1].pop("borrowingLimit")


def isolation_only_audited(graph: ResourceGraph) -> None:
    binding = one(graph, "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
                  "prod-storage-team-isolation-binding")
    for spec in (binding.inputs["spec"], binding.outputs["spec"]):
        spec["validationActions"] = ["Audit"]


def orphan_gpu_node(graph: ResourceGraph) -> None:
    node = one(graph, "gpucluster:facility:GpuNode", "gpu-a800-01")
    node.parent = graph.stack_urn


def unpinned_chart(graph: ResourceGraph) -> None:
    release = one(graph, "kubernetes:helm.sh/v3:Release", "prod-gpu-operator-release")
    release.inputs.pop("version")
    release.outputs.pop("version", None)


def inference_preempted(graph: ResourceGraph) -> None:
    qos = one(graph, "gpucluster:slurm:Slurm").outputs["qos"]
    next(q for q in qos if q["name"] == "train_high")["preempt"].append("inference")


def staging_above_production(graph: ResourceGraph) -> None:
    for resource in graph.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass"):
        if resource.name == "prod-scheduling-staging":
            resource.inputs["value"] = resource.outputs["value"] = 2_000_000


MATRIX: list[Any] = [
    pytest.param(dcgm_disabled, "dcgm-exporter-enabled", id="the DCGM exporter disabled in the operator's values"),
    pytest.param(lambda g: drop_alert(g, "GpuTemperatureHigh"), "gpu-temperature-alert", id="no temperature alert"),
    pytest.param(hotter_alert, "gpu-temperature-alert", id="a temperature alert at 95 C"),
    pytest.param(lambda g: drop_alert(g, "GpuUtilizationLow"), "gpu-idle-alert", id="no low-utilization alert"),
    pytest.param(retention_7_days, "metrics-hot-retention", id="retention 7 days in Prometheus' values"),
    pytest.param(remote_write_removed, "metrics-cold-tier", id="remote_write removed from Prometheus' values"),
    pytest.param(critical_to_null, "critical-alerts-routed", id="critical alerts routed to the null receiver"),
    pytest.param(cost_dashboard_removed, "llm-cost-dashboard", id="no LLM cost dashboard"),
    pytest.param(unmonitored_team_namespace, "serving-after-monitoring",
                 id="a team namespace not depending on monitoring"),
    pytest.param(uncapped_team_queue, "team-gpus-capped", id="a team queue with no GPU limit"),
    pytest.param(isolation_only_audited, "team-storage-isolated",
                 id="a team namespace that can claim another team's StorageClass"),
    pytest.param(lambda g: rack(g).update(cooling_type="air"), "dense-gpus-in-dense-racks",
                 id="A800 in an air-cooled rack"),
    pytest.param(lambda g: rack(g).update(cooling_capacity_kw=15), "rack-heat-within-cooling",
                 id="heat over cooling"),
    pytest.param(lambda g: rack(g).update(usable_kw=12), "rack-load-within-power", id="load over usable power"),
    pytest.param(lambda g: rack(g).update(feed_capacity_kw={"A": 33.2}), "rack-dual-feeds", id="a single PDU feed"),
    pytest.param(orphan_gpu_node, "gpu-node-in-rack", id="a GPU node outside any rack"),
    pytest.param(unpinned_chart, "helm-release-pinned", id="an unpinned chart"),
    pytest.param(lambda g: drop(g, "gpucluster:storage:Tiers"), "storage-tiers-present", id="no storage tiers"),
    pytest.param(inference_preempted, "protected-qos-not-preempted", id="a training QoS preempting inference"),
    pytest.param(staging_above_production, "priority-classes-ordered", id="staging ranked above production"),
    pytest.param(lambda g: rack(g).update(heat_load_kw=UNKNOWN), "rack-heat-within-cooling",
                 id="a value unknown at preview"),
]


@pytest.mark.parametrize(("mutate", "blocked_by"), MATRIX)
def test_should_block_each_mutation_by_its_own_policy_only(prod: ResourceGraph, mutate: Mutation,
                                                          blocked_by: str) -> None:
    graph = copy.deepcopy(prod)
    mutate(graph)
    failed = {r.name for r in check_policies(graph) if not r.passed}
    assert failed == {blocked_by}


def test_should_cover_every_mandatory_policy_the_stack_exercises(prod: ResourceGraph) -> None:
    mandatory = {r.name for r in check_policies(prod) if r.enforcement_level == "mandatory" and not r.not_applicable}
    covered = {case.values[1] for case in MATRIX}
    # monitoring-stack-present: without the stack every observability rule fails with it (tested in tests/policy).
    assert mandatory - covered == {"monitoring-stack-present"}
