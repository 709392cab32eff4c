"""The PromQL the lending controller reads inference demand from (runbooks/flex/signals.py runs it; gpuctl plan checks
that every series it reads has a producer the stack deploys). Pure. Where the series come from:

- requests waiting and replicas: vLLM's `vllm:num_requests_waiting` gauge, one series per engine (docs/design/
  metrics.md of vLLM's v1 engine), the gauge KEDA scales the engines on (components/inference/values.py).
- inference pods pending: kube-state-metrics' `kube_pod_status_phase{phase="Pending"}` (docs/metrics/workload/
  pod-metrics.md), in the inference namespace: an engine the autoscaler added that finds no free GPU.
- latency: the p95 of vLLM's `vllm:time_to_first_token_seconds` histogram over LATENCY_WINDOW, read only when the
  spec sets lending.ttft_objective_s. NaN (no first token in the window) is data: nothing was slow.

Each is an aggregate that returns nothing when no series exists, so a scrape that stopped reads as missing data,
never as zero demand.
"""

from components.inference.values import NAMESPACE, WAITING

DEMAND_QUERIES = {
    "waiting": f'sum({WAITING}{{namespace="{NAMESPACE}"}})',
    "replicas": f'count({WAITING}{{namespace="{NAMESPACE}"}})',
    "pending_pods": f'sum(kube_pod_status_phase{{namespace="{NAMESPACE}", phase="Pending"}})',
}
"""Signals field -> PromQL instant query."""
LATENCY_WINDOW = "2m"
"""Four of Prometheus's 30 s scrapes: a p95 over fewer samples swings with a single slow request."""
LATENCY_QUERY = ("histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
                 f'{{namespace="{NAMESPACE}"}}[{LATENCY_WINDOW}])))')
"""The p95 time to first token, for Signals.ttft_p95_s."""
