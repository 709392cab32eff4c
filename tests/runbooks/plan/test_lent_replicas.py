"""The replicas a served model may add past the kubernetes pool, judged on what the real Helm renders from the prod
stack: the autoscaler's bound reaches past replicas.max, and the model servers' pod spec fits a flex node exactly
when a lend has put its label there, with the labels and taints the stack gives every node."""

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.facility.admission import Verdict, node_labels, node_taints
from components.facility.power import node_loads
from components.scheduling.lending_decision import borrowers
from components.site.site import Pool, Site
from components.site.wellknown import FLEX_LENT_LABEL
from runbooks.flex.lending import Flex
from runbooks.offline.engine import run_program
from runbooks.plan.helm import RELEASE_TYPE, find_helm, template
from tests.builders import REPO, parse, prod_values
from tests.harness.kubectl import FakeKubectl

MIRROR = REPO.parent / "shared" / "charts"
HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None or not MIRROR.is_dir(),
                                reason="needs helm (make test installs it in .venv/bin) and the chart mirror "
                                       "../shared/charts")


@pytest.fixture(scope="module")
def site() -> Site:
    return parse(prod_values())


@pytest.fixture(scope="module")
def engines() -> list[dict[str, Any]]:
    """The vllm release as `helm template` renders it for prod."""
    assert HELM is not None
    graph = run_program(REPO, "prod")
    (release,) = [r for r in graph.of_type(RELEASE_TYPE) if (r.inputs.get("name") or r.name) == "vllm"]
    with tempfile.TemporaryDirectory() as scratch:
        _, printed = template(release, MIRROR, "1.30", HELM, Path(scratch))
    return [o for o in yaml.safe_load_all(printed) if o]


def selected(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm's matchExpressions, all of them, as kube-scheduler reads them (In, NotIn, Exists,
    DoesNotExist)."""
    def holds(e: dict[str, Any]) -> bool:
        value = labels.get(e["key"])
        return {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
                "Exists": value is not None, "DoesNotExist": value is None}[e["operator"]]
    return all(holds(e) for e in term.get("matchExpressions", []))


def tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    return any((t.get("key") in (None, taint["key"]))
               and (t.get("operator", "Equal") == "Exists" or t.get("value") == taint.get("value"))
               and t.get("effect") in (None, taint["effect"]) for t in tolerations)


def fits(pod: dict[str, Any], labels: dict[str, str], taints: list[dict[str, Any]]) -> bool:
    """Whether kube-scheduler may place the pod on a node with these labels and taints (its NodeAffinity and
    TaintToleration filters)."""
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return (any(selected(t, labels) for t in terms)
            and all(tolerated(t, pod.get("tolerations", [])) for t in taints if t["effect"] == "NoSchedule"))


def nodes(site: Site, lent: set[str]) -> dict[str, tuple[dict[str, str], list[dict[str, Any]]]]:
    """Every validated node's labels and taints as the stack sets them (components/facility), and on `lent` the label
    `gpuctl flex lend` adds (its taint stays: runbooks/flex/lending.py)."""
    validated = Verdict(True, "")
    return {load.name: ({**node_labels(load, validated), **({FLEX_LENT_LABEL: "true"} if load.name in lent else {})},
                        node_taints(load, validated)) for load in node_loads(site)}


def test_should_let_the_autoscaler_ask_for_the_lent_replicas_past_the_pool(engines: list[dict[str, Any]],
                                                                            site: Site) -> None:
    for model in site.inference.models:
        (scaler,) = [o for o in engines if o["kind"] == "ScaledObject"
                     and o["metadata"]["name"] == f"vllm-{model.name}-scaledobject"]
        assert scaler["spec"]["maxReplicaCount"] == model.replicas.max + model.lent_replicas
    qwen = site.inference.models[0]
    pool_gpus = sum(len(g.nodes) * g.gpus_per_node for g in site.node_groups
                    if g.pool == Pool.KUBERNETES and g.gpu_model == qwen.gpu_model)
    # prod: 6 replicas of 4 A800s, past the 16 A800s of the kubernetes pool.
    assert (qwen.replicas.max + qwen.lent_replicas) * qwen.gpus_per_replica > pool_gpus == 16


def test_should_place_a_peak_replica_on_a_lent_flex_node_of_its_gpu_and_no_unlent_one(
        engines: list[dict[str, Any]], site: Site) -> None:
    lent = {"gpu-a800-09"}
    world = nodes(site, lent)
    for model in site.inference.models:
        (engine,) = [o for o in engines if o["kind"] == "Deployment"
                     and o["metadata"]["name"] == f"vllm-{model.name}-deployment-vllm"]
        pod = engine["spec"]["template"]["spec"]
        where = {name for name, (labels, taints) in world.items() if fits(pod, labels, taints)}
        pool = {g.name for g in site.node_groups if g.pool == Pool.KUBERNETES and g.gpu_model == model.gpu_model}
        expected = {n.name for g in site.node_groups if g.name in pool for n in g.nodes}
        if model.gpu_model == "A800-SXM4-80GB":
            expected |= lent
        assert where == expected, model.name
        # Before the lend, the same pod fits no flex node at all.
        assert not {n for n, (labels, taints) in nodes(site, set()).items()
                    if fits(pod, labels, taints) and labels["gpucluster.io/pool"] == Pool.FLEX.value}


def test_should_find_the_scaledobject_the_lending_controller_floors_among_those_rendered(
        engines: list[dict[str, Any]], site: Site) -> None:
    """The lending controller's replica floor (runbooks/flex/lending.py set_replica_floor) patches minReplicaCount on
    the ScaledObject it names: each lent model's is one the chart renders, in that namespace, with that field."""
    kubectl = FakeKubectl()
    flex = Flex(site, lambda args, timeout_s=30: "", kubectl, progress=lambda line: None)
    for model in borrowers(site):
        flex.set_replica_floor(model.name, model.pool_replicas + model.lent_replicas)
    assert kubectl.calls
    for call in kubectl.calls:
        name, namespace = call[3], call[call.index("--namespace") + 1]
        field = next(iter(json.loads(call[call.index("--patch") + 1])["spec"]))
        (scaler,) = [o for o in engines if o["kind"] == "ScaledObject" and o["metadata"]["name"] == name]
        assert scaler["metadata"]["namespace"] == namespace and field in scaler["spec"]
