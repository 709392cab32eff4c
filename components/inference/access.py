"""Who may call the model servers: the gateway, with the engines' API key, and Prometheus, to scrape them. Pure;
components/inference/component.py creates the objects.

Without this, any pod of any namespace could call vLLM at its Service and skip the gateway's keys, budgets, model
allow-lists and metering. Two locks, each enough on its own: a NetworkPolicy per served model admitting only the
gateway's pods (and the hot Prometheus's, on the port it scrapes), and an API key the engines demand (vLLM answers
401 to a /v1 request without `Authorization: Bearer <key>` when VLLM_API_KEY is set: vllm/entrypoints/openai/
api_server.py, AuthenticationMiddleware; /health and /metrics stay open, so the kubelet's probes and the scrape need
no key). `gpuctl plan` judges the policies on the rendered pods (runbooks/plan/engine_ingress.py).
"""

import hashlib
import hmac
from typing import Any

from components.inference.values import ENGINE_KEY_SECRET, ENGINE_PORT, ENGINE_RELEASE, GATEWAY_RELEASE, NAMESPACE
from components.monitoring.prometheus import PROMETHEUS_RELEASE
from components.site.inference import ServedModel
from components.site.wellknown import MONITORING_NAMESPACE

ENGINE_KEY_CONTEXT = b"gpu-cluster vLLM engine API key"

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name."""
PROMETHEUS_NAME = f"{PROMETHEUS_RELEASE}-prometheus"
"""The Prometheus resource kube-prometheus-stack renders (templates/prometheus/prometheus.yaml: the chart's fullname,
the release here, and `-prometheus`)."""
PROMETHEUS_POD_LABEL = "operator.prometheus.io/name"
"""The label the Prometheus Operator puts on every pod of a Prometheus resource, its name (pkg/prometheus/server/
statefulset.go, PrometheusNameLabelName)."""


def engine_key(master_key: str) -> str:
    """The engines' API key: an HMAC of the gateway's master key, so it is a secret from the same Pulumi secret and
    changes with it, and knowing it (any engine pod's environment holds it) tells nothing of the master key."""
    return "sk-engine-" + hmac.new(master_key.encode(), ENGINE_KEY_CONTEXT, hashlib.sha256).hexdigest()


def engine_pod_labels(model: ServedModel) -> dict[str, str]:
    """The labels vllm-stack selects a model's engine pods by (templates/deployment-vllm-multi.yaml,
    spec.selector.matchLabels: `model` and `helm-release-name`, which its Service selects by too)."""
    return {"model": model.name, "helm-release-name": ENGINE_RELEASE}


def gateway_pod_labels() -> dict[str, str]:
    """litellm-helm's selector labels of the proxy's pods (templates/_helpers.tpl, litellm.selectorLabels)."""
    return {"app.kubernetes.io/name": "litellm", "app.kubernetes.io/instance": GATEWAY_RELEASE}


def engine_network_policy(model: ServedModel) -> dict[str, Any]:
    """Ingress to the model's engine pods: the gateway's pods, and the hot Prometheus's, on the engine's port only.
    The kubelet's probes come from the node itself, which NetworkPolicy implementations admit."""
    port = [{"protocol": "TCP", "port": ENGINE_PORT}]
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"{ENGINE_RELEASE}-{model.name}-ingress", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {"matchLabels": engine_pod_labels(model)},
            "policyTypes": ["Ingress"],
            "ingress": [
                # No namespaceSelector: the gateway's own namespace, where no team may run a pod.
                {"from": [{"podSelector": {"matchLabels": gateway_pod_labels()}}], "ports": port},
                {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: MONITORING_NAMESPACE}},
                           "podSelector": {"matchLabels": {PROMETHEUS_POD_LABEL: PROMETHEUS_NAME}}}],
                 "ports": port},
            ],
        },
    }


def engine_key_secret() -> dict[str, Any]:
    """The engines' key Secret; the key itself is added by the component (a secret)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ENGINE_KEY_SECRET, "namespace": NAMESPACE},
            "stringData": {}}
