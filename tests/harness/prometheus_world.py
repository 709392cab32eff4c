"""A real Prometheus (the Debian `prometheus` binary) on 127.0.0.1, 1 s scrape and rule evaluation, scraping
a fake exporter that serves the series the gates read, with our own rendered rules loaded.

A "world" is one exporter + one Prometheus: healthy (every gate passes) or unhealthy (a critical alert
firing, a slow queue, a high error rate, and no GPU utilization series at all).
"""

import threading
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from components.site.site import Site
from tests.harness.daemons import PrometheusServer, rules_every_second


@dataclass(frozen=True)
class Health:
    gpu_util_pct: float | None
    """None: the exporter serves no utilization series."""
    row_remap_failure: int
    queue_wait_s: float
    error_ratio: float


HEALTHY = Health(gpu_util_pct=82.0, row_remap_failure=0, queue_wait_s=600.0, error_ratio=0.001)
UNHEALTHY = Health(gpu_util_pct=None, row_remap_failure=1, queue_wait_s=7200.0, error_ratio=0.05)


class Exporter:
    """prometheus-client on 127.0.0.1:0; a ticker keeps counters and the histogram moving, so rate() has data."""

    def __init__(self, health: Health) -> None:
        self.registry = CollectorRegistry()
        labels = ["Hostname", "gpu", "UUID", "modelName"]
        util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (%)", labels, registry=self.registry)
        remap = Gauge("DCGM_FI_DEV_ROW_REMAP_FAILURE", "row remap failure", labels, registry=self.registry)
        for gpu in ("0", "1"):
            ids = ("gpu-a800-01", gpu, f"GPU-{gpu}", "NVIDIA A800-SXM4-80GB")
            if health.gpu_util_pct is not None:
                util.labels(*ids).set(health.gpu_util_pct)
            remap.labels(*ids).set(health.row_remap_failure)
        self.wait = Histogram("slurm_job_queue_wait_seconds", "job wait from submit to start", registry=self.registry,
                              buckets=(60, 300, 900, 1800, 3600, 7200, 14400))
        # The LLM gateway's counters with the labels LiteLLM 1.80.5 gives them (../shared/notes/litellm-offline.md):
        # a team's traffic, and a stranger's refused keys (team_alias "None"), which must not move the gate.
        self.total = Counter("litellm_proxy_total_requests_metric", "requests",
                             ["team", "team_alias", "requested_model", "status_code"], registry=self.registry)
        self.failed = Counter("litellm_proxy_failed_requests_metric", "failed requests",
                              ["team", "team_alias", "requested_model", "exception_status"], registry=self.registry)
        self.health = health
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def _tick(self) -> None:
        while not self._stop.wait(0.1):
            self.wait.observe(self.health.queue_wait_s)
            failed = 1000 * self.health.error_ratio
            self.total.labels("speech-id", "speech", "qwen2-5-72b", "200").inc(1000 - failed)
            self.total.labels("speech-id", "speech", "qwen2-5-72b", "500").inc(failed)
            self.failed.labels("speech-id", "speech", "qwen2-5-72b", "500").inc(failed)
            self.total.labels("None", "None", "qwen2-5-72b", "None").inc(500)
            self.failed.labels("None", "None", "qwen2-5-72b", "None").inc(500)

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


class PrometheusWorld:
    def __init__(self, site: Site, health: Health, directory: Path) -> None:
        self.exporter = Exporter(health)
        directory.mkdir(parents=True, exist_ok=True)
        self.prometheus = PrometheusServer(
            directory, [{"job_name": "fake", "static_configs": [{"targets": [self.exporter.target]}]}],
            rules_every_second(site))
        self.url = self.prometheus.url

    def wait_ready(self) -> None:
        self.prometheus.wait_ready()

    def stop(self) -> None:
        self.prometheus.stop()
        self.exporter.stop()
