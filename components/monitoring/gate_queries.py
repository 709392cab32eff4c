"""The PromQL the rollout's health gates read (runbooks/rollout/gates.py runs them; gpuctl plan checks that every
series they read has a producer the stack deploys). Pure. Where their series come from:

- critical alerts: `ALERTS{alertstate="firing",severity="critical"}` (Prometheus's own series for firing
  alerts; our rules in components.monitoring.alerts label incidents `severity="critical"`).
- GPU utilization: the fleet average of our recording rule `gpu:dcgm_gpu_util:max` (per physical GPU, from
  dcgm-exporter's DCGM_FI_DEV_GPU_UTIL), averaged over the gate window.
- training queue time: p95 of `slurm_job_queue_wait_seconds`, a histogram of the time each Slurm job waited
  between submit and start, observed by the Slurm exporter (hosts/slurm_exporter.py); in minutes.
- inference error rate: LiteLLM proxy counters, failed / total requests (`litellm_proxy_failed_requests_metric`,
  `litellm_proxy_total_requests_metric`, exposed with `_total`), over the gate window, in %.
"""

from components.monitoring.alerts import Record


def window(minutes: float) -> str:
    return f"{max(1, round(minutes * 60))}s"


def gate_queries(window_minutes: float) -> dict[str, str]:
    w = window(window_minutes)
    return {
        "critical_alerts": 'ALERTS{alertstate="firing",severity="critical"}',
        "gpu_utilization": f"avg(avg_over_time({Record.GPU_UTIL}[{w}]))",
        "train_queue_time": (
            f"histogram_quantile(0.95, sum by (le) (rate(slurm_job_queue_wait_seconds_bucket[{w}]))) / 60"
        ),
        "inference_error_rate": (
            f"100 * sum(rate(litellm_proxy_failed_requests_metric_total[{w}]))"
            f" / sum(rate(litellm_proxy_total_requests_metric_total[{w}]))"
        ),
    }
