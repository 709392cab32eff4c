"""The engines-admit-only-the-gateway invariant as Kubernetes would apply NetworkPolicies: the stack's own policy on a
small stack of the labels the charts render, then each way a policy can let a team past the gateway.
(tests/runbooks/plan/test_helm.py judges the prod stack as rendered.)"""

import copy
from collections.abc import Callable
from typing import Any

import pytest

from components.inference.access import PROMETHEUS_NAME, engine_network_policy, gateway_pod_labels
from components.monitoring.prometheus import NAMESPACE as MONITORING
from components.site.wellknown import TEAM_LABEL
from runbooks.plan.engine_ingress import engines_admit_only_the_gateway
from runbooks.plan.producers import Deployed
from tests.builders import parse, prod_values

MODEL = parse(prod_values()).inference.models[0]
ENGINE_LABELS = {"model": MODEL.name, "helm-release-name": "vllm", "app.kubernetes.io/component": "serving-engine"}


def deployment(name: str, namespace: str, labels: dict[str, str], container: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}


def objects() -> list[dict[str, Any]]:
    engine = deployment(f"vllm-{MODEL.name}-deployment-vllm", "inference", ENGINE_LABELS, {
        "name": "vllm", "image": "vllm/vllm-openai:v0.10.2", "command": ["vllm", "serve", "/models/m"],
        "ports": [{"name": "container-port", "containerPort": 8000}]})
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"vllm-{MODEL.name}-engine-service", "namespace": "inference",
                            "labels": {"app.kubernetes.io/component": "serving-engine"}},
               "spec": {"selector": {"model": MODEL.name, "helm-release-name": "vllm"},
                        "ports": [{"name": "service-port", "port": 80, "targetPort": "container-port"},
                                  {"name": "zmq-port", "port": 55555, "targetPort": "zmq-port"}]}}
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
               "metadata": {"name": "vllm-engine-servicemonitor", "namespace": "inference"},
               "spec": {"endpoints": [{"port": "service-port"}],
                        "selector": {"matchLabels": {"app.kubernetes.io/component": "serving-engine"}}}}
    return [
        engine, service, monitor, engine_network_policy(MODEL),
        deployment("llm-gateway-litellm", "inference", gateway_pod_labels(),
                   {"name": "litellm", "image": "ghcr.io/berriai/litellm-database:main-v1.80.5-stable.1"}),
        deployment("keda-operator", "keda", {"app": "keda-operator"}, {"name": "keda", "image": "keda:2"}),
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": PROMETHEUS_NAME, "namespace": MONITORING}, "spec": {}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "speech", "labels": {TEAM_LABEL: "speech"}}},
    ]


def policy_of(found: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [o for o in found if o["kind"] == "NetworkPolicy"]
    return policy


def judge(edit: Callable[[list[dict[str, Any]]], None] | None = None) -> list[str]:
    found = copy.deepcopy(objects())
    if edit:
        edit(found)
    return engines_admit_only_the_gateway(Deployed(found, [], {}))


ENGINE = f"Deployment inference/vllm-{MODEL.name}-deployment-vllm"


def test_should_admit_only_the_gateway_and_the_scrape() -> None:
    assert judge() == []


@pytest.mark.parametrize(("edit", "violation"), [
    pytest.param(lambda f: f.remove(policy_of(f)),
                 f"{ENGINE}: no NetworkPolicy restricts ingress to its pods",
                 id="should hold an engine without a policy"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"][0]["from"][0].update(namespaceSelector={}),
                 f"{ENGINE}: a pod in team namespace any-team labelled as Deployment inference/llm-gateway-litellm's "
                 "pods is admitted on port 8000",
                 id="should hold a gateway rule open to every namespace"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"].append({"ports": [{"port": 8000}]}),
                 f"{ENGINE}: the pods of Deployment keda/keda-operator are admitted on port 8000",
                 id="should hold a rule without a source"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"].append({"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}),
                 f"{ENGINE}: a pod in team namespace any-team labelled as", id="should hold an address block"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"][1]["from"][0]["namespaceSelector"].update(matchLabels={}),
                 f"{ENGINE}: a pod in team namespace any-team labelled as Prometheus {MONITORING}/{PROMETHEUS_NAME}'s "
                 "pods is admitted on port 8000",
                 id="should hold a scrape rule open to every namespace"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"][0].update(ports=[{"port": 9999}]),
                 f"{ENGINE}: the gateway's pods (Deployment inference/llm-gateway-litellm) are not admitted on port "
                 "8000: every request for the model fails", id="should hold a policy that shuts out the gateway"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"].pop(1),
                 f"{ENGINE}: Prometheus {MONITORING}/{PROMETHEUS_NAME}'s pods are not admitted on port 8000, where its "
                 "ServiceMonitor scrapes it", id="should hold a policy that shuts out the scrape"),
    pytest.param(lambda f: policy_of(f)["spec"]["ingress"][0].update(ports=[{"port": "container-port"}]),
                 None, id="should read a named port as the container's"),
])
def test_should_judge_policies_as_kubernetes_applies_them(edit: Callable[[list[dict[str, Any]]], Any],
                                                          violation: str | None) -> None:
    found = judge(edit)
    if violation is None:
        assert found == []
    else:
        assert any(violation in v for v in found), found
