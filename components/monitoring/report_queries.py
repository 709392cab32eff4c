"""The PromQL `gpuctl report` runs (runbooks/report/ reads them; gpuctl plan checks that every series they read has a
producer the stack deploys). Pure. Where their series come from:

- GPU utilization: dcgm-exporter's DCGM_FI_DEV_GPU_UTIL (components/gpu_operator/dcgm_counters.py), per physical
  GPU (`max by` its identity labels, as the recording rules in components.monitoring.alerts collapse it: while a
  GPU changes tenant its old and new pod-labelled series overlap), averaged over each step, summed per host. The
  report divides by the site's GPU capacity, so a GPU with no series counts as idle, not as absent.
- Kubernetes allocation: kube-state-metrics' kube_pod_container_resource_requests for the GPU resource (the device
  plugin's `nvidia.com/gpu`, which kube-state-metrics sanitizes to `nvidia_com_gpu`), per node (its `node` label), of
  pods whose kube_pod_status_phase is Running: a Pending pod requests a GPU it does not hold.
- inference latency: LiteLLM's litellm_request_total_latency_metric histogram (seconds from the request's arrival
  at the gateway to its answer; litellm/integrations/prometheus.py, 1.80.5), of the requests a team's key
  authenticated, as the rollout gate counts them.
- inference errors: the rollout gate's own expression (components.monitoring.gate_queries), over the report's window.
"""

from components.monitoring.alerts import GPU_MATCH
from components.monitoring.gate_queries import TEAMS, gate_queries, window

GPU_RESOURCE = "nvidia_com_gpu"
"""The GPU device plugin's resource name as kube-state-metrics labels it (resource="nvidia.com/gpu" sanitized)."""
LATENCY_HISTOGRAM = "litellm_request_total_latency_metric_bucket"


def gpu_util_by_host(step_s: int) -> str:
    """Per host, the sum over its GPUs of each GPU's mean utilization (%) over the step ending at each point."""
    return (f"sum by (Hostname) (max by ({GPU_MATCH}) "
            f"(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{window(step_s / 60)}])))")


def pod_gpu_requests_by_node() -> str:
    """Per node, the GPUs that Running pods on it request now."""
    return (f'sum by (node) (kube_pod_container_resource_requests{{resource="{GPU_RESOURCE}"}}\n'
            f"  * on (namespace, pod) group_left ()\n"
            f'  max by (namespace, pod) (kube_pod_status_phase{{phase="Running"}} == 1))')


def inference_latency_p95(window_s: int) -> str:
    """The gateway's p95 request latency (s) over the window ending at the evaluation time."""
    return (f"histogram_quantile(0.95, sum by (le) "
            f"(increase({LATENCY_HISTOGRAM}{{{TEAMS}}}[{window(window_s / 60)}])))")


def inference_error_pct(window_s: int) -> str:
    """% of the teams' gateway requests that failed server-side over the window ending at the evaluation time."""
    return gate_queries(window_s / 60)["inference_error_rate"]


def report_queries(step_s: int, window_s: int) -> dict[str, str]:
    """Every query the report runs, by the figure it makes."""
    return {
        "gpu_utilization": gpu_util_by_host(step_s),
        "kubernetes_gpu_requests": pod_gpu_requests_by_node(),
        "inference_latency_p95": inference_latency_p95(window_s),
        "inference_error_rate": inference_error_pct(window_s),
    }
