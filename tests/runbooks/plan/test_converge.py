"""The dependency graph as the engine orders creation, and the startup budget a workload's probes allow."""

from typing import Any

import pytest

from runbooks.offline.engine import Resource, ResourceGraph
from runbooks.plan.converge import installs, startup_budget_s
from runbooks.plan.helm import RELEASE_TYPE

NS = "kubernetes:core/v1:Namespace"


def resource(name: str, type_: str, custom: bool = True, parent: str = "", dependencies: tuple[str, ...] = (),
             inputs: dict[str, Any] | None = None) -> Resource:
    return Resource(f"urn:{name}", type_, name, custom, parent, inputs or {}, dependencies=list(dependencies))


def graph(*resources: Resource) -> ResourceGraph:
    return ResourceGraph("p", "s", {r.urn: r for r in resources})


def test_should_order_by_dependencies_and_custom_parents_but_not_by_a_components_dependencies() -> None:
    made = installs(graph(
        resource("monitoring", "c:Stack", custom=False),
        resource("ns", NS, parent="urn:monitoring"),
        resource("storage", "c:Tiers", custom=False, dependencies=("urn:ns",)),
        # A child of a component waits for what it depends on itself, not for its component's dependencies
        # (pulumi/pulumi#8721); a dependency on a component is one on the custom resources inside it.
        resource("claim", "kubernetes:core/v1:PersistentVolumeClaim", parent="urn:storage"),
        resource("release", RELEASE_TYPE, dependencies=("urn:monitoring", "urn:read-elsewhere"),
                 inputs={"name": "r", "namespace": "x"}),
        resource("config", "kubernetes:core/v1:ConfigMap", parent="urn:release"),
    ), [], {"urn:ns": {}, "urn:claim": {}, "urn:config": {}})
    waits = {i.urn: i.waits_for for i in made}
    assert waits["urn:claim"] == frozenset()
    # A resource the program only read is waited for, and ends the walk.
    assert waits["urn:release"] == {"urn:ns", "urn:read-elsewhere"}
    assert waits["urn:config"] == {"urn:release", "urn:ns", "urn:read-elsewhere"}
    assert {i.urn: i.wait_s for i in made}["urn:release"] == 300


def pod(**probes: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "c", **probes}]}}}}


@pytest.mark.parametrize(("workload", "budget"), [
    pytest.param(pod(startupProbe={"initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 60},
                     readinessProbe={"initialDelaySeconds": 15, "periodSeconds": 5, "failureThreshold": 3}), 615,
                 id="should allow a startup probe's whole window (vllm-stack's 615 s)"),
    pytest.param(pod(readinessProbe={}), 30, id="should take Kubernetes' probe defaults (0 + 3 x 10 s)"),
    pytest.param(pod(livenessProbe={"initialDelaySeconds": 600}), 0, id="should not count a liveness probe"),
])
def test_should_compute_the_startup_budget_from_the_probes(workload: dict[str, Any], budget: int) -> None:
    assert startup_budget_s(workload)[0] == budget
