"""The PromQL the lending controller reads inference demand from (runbooks/flex/signals.py runs it; gpuctl plan checks
that every series it reads has a producer the stack deploys). Pure. Where the series come from:

- requests waiting and replicas: vLLM's `vllm:num_requests_waiting` gauge, one series per engine (docs/design/
  metrics.md of vLLM's v1 engine), the gauge KEDA scales the engines on (components/inference/values.py).
- model servers pending: kube-state-metrics' `kube_pod_status_phase{phase="Pending"}` (docs/metrics/workload/
  pod-metrics.md) of the inference namespace's pods that are model servers (kube_pod_labels, the label allowlisted in
  components/monitoring/prometheus.py) and request GPUs (kube_pod_container_resource_requests): an engine the
  autoscaler added that finds no free GPU. The gateway, its database and their Jobs share the namespace; a GPU lent
  cannot help them, and one of them stuck Pending must neither lend nor keep the lent nodes.
- latency: the p95 of vLLM's `vllm:time_to_first_token_seconds` histogram over LATENCY_WINDOW, read only when the
  spec sets lending.ttft_objective_s. NaN (no first token in the window) is data: nothing was slow.

The controller reads the models that may add replicas on lent nodes (inference.models[].lent_replicas) and no
others: a queue no lent node can shorten is no reason to lend, and those models asking no more replicas than the
kubernetes pool holds is the trough that gives the nodes back. Their engines' pods are told apart by name (vllm-stack
names them after the model), which kube-state-metrics exports without an allowlist.

Each is an aggregate that returns nothing when no series exists, so a scrape that stopped reads as missing data,
never as zero demand.
"""

from collections.abc import Collection

from components.inference.values import ENGINE_RELEASE, NAMESPACE, WAITING
from components.monitoring.report_queries import GPU_RESOURCE
from components.site.wellknown import ENGINE_COMPONENT, ENGINE_COMPONENT_LABEL

ENGINE_POD_LABEL = "label_" + ENGINE_COMPONENT_LABEL.replace(".", "_").replace("/", "_")
"""The engines' component label as kube-state-metrics names it on kube_pod_labels (label_<name>, sanitized to
[a-zA-Z0-9_])."""
EVERY_MODEL = ".+"
"""The model pattern of queries over every served model."""


def engine_pods(models: str) -> str:
    """The pod names vllm-stack gives the engines of the models matching the pattern: a Deployment
    `<release>-<model>-deployment-vllm` (templates/deployment-vllm-multi.yaml), its ReplicaSet's hash, the pod's."""
    return f"{ENGINE_RELEASE}-({models})-deployment-vllm-.+"


def demand_queries(models: Collection[str] | None = None) -> dict[str, str]:
    """Signals field -> PromQL instant query, over the named models (the lending controller reads those that may add
    replicas on lent nodes: lending_decision.lent_models), or over every model."""
    # Served names are [-a-z0-9] (components/site/inference.py ServedName): nothing in them a regex reads.
    names = "|".join(sorted(models)) if models is not None else EVERY_MODEL
    engines = f'{WAITING}{{namespace="{NAMESPACE}", model_name=~"{names}"}}'
    pending = (
        # Per pod: its phase flag (0 or 1), kept only for model servers that request a GPU; every running engine
        # adds a 0, so the sum is 0 when none waits and nothing at all when no engine is reported.
        f'sum(max by (namespace, pod) (kube_pod_status_phase{{namespace="{NAMESPACE}", phase="Pending", '
        f'pod=~"{engine_pods(names)}"}})\n'
        f"  * on (namespace, pod) group by (namespace, pod) "
        f'(kube_pod_labels{{namespace="{NAMESPACE}", {ENGINE_POD_LABEL}="{ENGINE_COMPONENT}"}})\n'
        f"  * on (namespace, pod) group by (namespace, pod) "
        f'(kube_pod_container_resource_requests{{namespace="{NAMESPACE}", resource="{GPU_RESOURCE}"}} > 0))'
    )
    return {"waiting": f"sum({engines})", "replicas": f"count({engines})", "pending_pods": pending}


DEMAND_QUERIES = demand_queries()
"""Over every model: what `gpuctl plan` checks has producers (the controller's narrower queries read the same
series)."""
LATENCY_WINDOW = "2m"
"""Four of Prometheus's 30 s scrapes: a p95 over fewer samples swings with a single slow request."""
LATENCY_QUERY = ("histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
                 f'{{namespace="{NAMESPACE}"}}[{LATENCY_WINDOW}])))')
"""The p95 time to first token, for Signals.ttft_p95_s."""
