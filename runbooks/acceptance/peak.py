"""The peak the campaign loads the cluster at: the highest hourly rate over the spec's window, from Prometheus.

Inference: requests per second through the gateway (LiteLLM's request counter, docs/inference.md). Training: jobs
started per hour (the Slurm exporter's queue-wait histogram counts one observation per start, hosts/slurm_exporter.py).
Storage: no series measures writes to the hot tier, so its peak is the spec's declared one. A figure Prometheus has
no history for keeps its declared value; with no history at all the campaign says the peak was declared.
"""

import json
import urllib.parse
import urllib.request

from components.site.acceptance import Peak

TIMEOUT_S = 30.0


def _highest(prometheus_url: str, expr: str, days: int) -> float | None:
    # A subquery at 1 h steps: the highest of the hourly rates over the window.
    query = f"max_over_time(({expr})[{days}d:1h])"
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        result = json.load(response)["data"]["result"]
    value = float(result[0]["value"][1]) if result else None
    return value if value is not None and value > 0 else None


def measured_peak(prometheus_url: str, days: int, declared: Peak) -> Peak | None:
    """The measured peak (declared figures where there is no history), or None when nothing was measured."""
    rps = _highest(prometheus_url, "sum(rate(litellm_proxy_total_requests_metric_total[1h]))", days)
    jobs = _highest(prometheus_url, "sum(increase(slurm_job_queue_wait_seconds_count[1h]))", days)
    if rps is None and jobs is None:
        return None
    return Peak(inference_rps=rps or declared.inference_rps, training_jobs_per_h=jobs or declared.training_jobs_per_h,
                storage_write_mib_s=declared.storage_write_mib_s)
