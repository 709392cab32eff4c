"""gpuctl plan knows the report's queries: each series they read must have a producer the stack deploys."""

from components.monitoring.report_queries import report_queries
from runbooks.plan.invariants import metric_reads, metrics_have_producers
from runbooks.plan.producers import Deployed

NOTHING = Deployed(objects=[], registered=[], hosts={})


def test_should_count_every_report_query_among_what_the_stack_reads() -> None:
    reads = dict(metric_reads(NOTHING))
    for figure, query in report_queries(step_s=300, window_s=7 * 86_400).items():
        assert reads[f"gpuctl report {figure}"] == query


def test_should_hold_a_stack_that_produces_none_of_the_reports_series() -> None:
    violations = "\n".join(metrics_have_producers(NOTHING))
    unproduced = "has no producer the stack deploys and scrapes"
    for line in [
        f"DCGM_FI_DEV_GPU_UTIL (read by gpuctl report gpu_utilization) {unproduced}",
        f"kube_pod_container_resource_requests (read by gpuctl report kubernetes_gpu_requests, lending controller "
        f"pending_pods) {unproduced}",
        f"kube_pod_status_phase (read by gpuctl report kubernetes_gpu_requests, lending controller pending_pods) "
        f"{unproduced}",
        f"litellm_request_total_latency_metric_bucket (read by gpuctl report inference_latency_p95) {unproduced} "
        "(LLM gateway (LiteLLM proxy): no LiteLLM proxy Deployment)",
        f"litellm_proxy_failed_requests_metric_total (read by gpuctl report inference_error_rate, rollout gate "
        f"inference_error_rate) {unproduced}",
    ]:
        assert line in violations
