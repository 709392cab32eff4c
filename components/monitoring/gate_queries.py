"""The PromQL the rollout's health gates read (runbooks/rollout/gates.py runs them; gpuctl plan checks that every
series they read has a producer the stack deploys). Pure. Where their series come from:

- critical alerts: `ALERTS{alertstate="firing",severity="critical"}` (Prometheus's own series for firing
  alerts; our rules in components.monitoring.alerts label incidents `severity="critical"`).
- GPU utilization: the fleet average of our recording rule `gpu:dcgm_gpu_util:max` (per physical GPU, from
  dcgm-exporter's DCGM_FI_DEV_GPU_UTIL), averaged over the gate window.
- training queue time: p95 of `slurm_job_queue_wait_seconds`, a histogram of the time each Slurm job waited
  between submit and start, observed by the Slurm exporter (hosts/slurm_exporter.py); in minutes.
- inference error rate: the LLM gateway's (LiteLLM) counters, failed / total requests
  (`litellm_proxy_failed_requests_metric_total`, `litellm_proxy_total_requests_metric_total`) over the gate window,
  in %, of the requests a team's key authenticated (a stranger's bad key must not hold a rollout) and counting as
  failed only server-side failures (a team over its budget or sending a bad request gets a 4xx: its own error).
"""

from components.monitoring.alerts import UNATTRIBUTED, Record

TEAMS = f'team_alias!="{UNATTRIBUTED}"'


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
            # LiteLLM creates a failure series at the first failure: none yet is 0 %, not "no data".
            f'100 * (sum(rate(litellm_proxy_failed_requests_metric_total{{{TEAMS}, exception_status!~"4.."}}[{w}]))'
            f" or vector(0)) / sum(rate(litellm_proxy_total_requests_metric_total{{{TEAMS}}}[{w}]))"
        ),
    }
