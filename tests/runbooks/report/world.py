"""A Prometheus holding known history: series written as OpenMetrics, backfilled into its data folder with
`promtool tsdb create-blocks-from openmetrics`, then the real Prometheus started on it (no scrape targets).

The series are the ones the report reads, with the labels their real producers give them: dcgm-exporter's
DCGM_FI_DEV_GPU_UTIL, kube-state-metrics' pod requests and phase, LiteLLM 1.80.5's request counters and latency
histogram (../shared/notes/litellm-offline.md). Gauges are sampled at half seconds, so a 1 s step's range selector
(closed at both ends in Prometheus 2.x) holds exactly one of them; the gateway's counters at quarter past and quarter
to, so it holds two, as increase() needs.
"""

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runbooks.report.window import Window
from tests.harness.daemons import PrometheusServer

PROMTOOL = shutil.which("promtool")
A800 = "NVIDIA A800-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"


@dataclass(frozen=True)
class Gpus:
    host: str
    model: str
    count: int
    util_pct: float
    present: Callable[[float], bool] = lambda fraction: True
    """Whether the exporter serves the host's series at this fraction of the period (0..1)."""


@dataclass(frozen=True)
class Traffic:
    """The gateway's traffic in a period, per second."""

    requests: int
    server_errors: int
    client_errors: int
    """4xx (over budget, bad request): the team's own error, not the service's."""
    latency_bucket: str
    """The `le` of the one latency bucket every request of the period falls in (just above the one below it)."""


@dataclass(frozen=True)
class Period:
    window: Window
    gpus: tuple[Gpus, ...]
    pods: tuple[tuple[str, str, int, str], ...]
    """(namespace, pod, GPUs requested, phase) for the whole period."""
    traffic: Traffic


LATENCY_BUCKETS = ("0.5", "1.0", "1.5", "2.0", "+Inf")
STRANGER = {"team": "None", "team_alias": "None"}
"""Requests no key authenticated (LiteLLM's labels for them): refused, never the service's error."""
SPEECH = {"team": "speech-id", "team_alias": "speech"}


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class History:
    """Samples per series, each written once per second of each period."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.types: dict[str, str] = {}
        self.counters: dict[tuple[str, str], float] = {}

    def gauge(self, name: str, labels: dict[str, str], t: float, value: float) -> None:
        self.types.setdefault(name, "gauge")
        self.series.setdefault((name, _labels(labels)), []).append((t, value))

    def add(self, family: str, sample: str, labels: dict[str, str], t: float, increment: float) -> None:
        """A counter (or histogram part) grows by `increment` at t."""
        key = (sample, _labels(labels))
        self.counters[key] = self.counters.get(key, 0.0) + increment
        self.types.setdefault(family, "counter" if sample.endswith("_total") else "histogram")
        self.series.setdefault(key, []).append((t, self.counters[key]))

    def openmetrics(self) -> str:
        lines = []
        for family, kind in self.types.items():
            lines.append(f"# TYPE {family} {kind}")
            for (name, labels), samples in self.series.items():
                if name == family or name.removeprefix(family) in ("_total", "_bucket", "_count", "_sum"):
                    lines += [f"{name}{labels} {v:g} {t:.1f}" for t, v in samples]
        return "\n".join([*lines, "# EOF"]) + "\n"


def record(history: History, period: Period) -> None:
    start = int(period.window.start.timestamp())
    seconds = period.window.seconds
    for offset in range(seconds):
        t = start + offset + 0.5
        for group in period.gpus:
            if not group.present(offset / seconds):
                continue
            for gpu in range(group.count):
                ids = {"Hostname": group.host, "gpu": str(gpu), "UUID": f"GPU-{group.host}-{gpu}",
                       "modelName": group.model}
                history.gauge("DCGM_FI_DEV_GPU_UTIL", ids, t, group.util_pct)
                if (group.host, gpu) == ("gpu-a800-01", 0):
                    # The same GPU under a pod label too, as while it changes tenant: counted once.
                    history.gauge("DCGM_FI_DEV_GPU_UTIL", {**ids, "namespace": "speech", "pod": "train-0"}, t,
                                  group.util_pct)
        for namespace, pod, gpus, phase in period.pods:
            ref = {"namespace": namespace, "pod": pod, "uid": f"uid-{pod}"}
            history.gauge("kube_pod_container_resource_requests",
                          {**ref, "container": "main", "node": "gpu-4090-01", "resource": "nvidia_com_gpu",
                           "unit": "integer"}, t, gpus)
            history.gauge("kube_pod_container_resource_requests",
                          {**ref, "container": "main", "node": "gpu-4090-01", "resource": "cpu", "unit": "core"}, t, 8)
            for each in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                history.gauge("kube_pod_status_phase", {**ref, "phase": each}, t, float(each == phase))
        for half in (-0.25, 0.25):
            # Two gateway samples a second: a 1 s step's increase() then has two to extrapolate from.
            _traffic(history, period.traffic, t + half, 0.5)


def _traffic(history: History, traffic: Traffic, t: float, share: float) -> None:
    """`share` of a second's traffic, counted at t."""
    model = {"requested_model": "qwen2-5-72b"}
    total, failed = "litellm_proxy_total_requests_metric", "litellm_proxy_failed_requests_metric"
    ok = traffic.requests - traffic.server_errors - traffic.client_errors
    for status, count in (("200", ok), ("500", traffic.server_errors), ("429", traffic.client_errors)):
        history.add(total, f"{total}_total", {**SPEECH, **model, "status_code": status}, t, count * share)
    for status, count in (("500", traffic.server_errors), ("429", traffic.client_errors)):
        history.add(failed, f"{failed}_total", {**SPEECH, **model, "exception_status": status}, t, count * share)
    history.add(total, f"{total}_total", {**STRANGER, **model, "status_code": "None"}, t, 50 * share)
    history.add(failed, f"{failed}_total", {**STRANGER, **model, "exception_status": "None"}, t, 50 * share)
    latency = "litellm_request_total_latency_metric"
    for le in LATENCY_BUCKETS:
        inside = traffic.requests if le == "+Inf" or float(le) >= float(traffic.latency_bucket) else 0
        history.add(latency, f"{latency}_bucket", {**SPEECH, **model, "le": le}, t, inside * share)
    history.add(latency, f"{latency}_count", {**SPEECH, **model}, t, traffic.requests * share)
    history.add(latency, f"{latency}_sum", {**SPEECH, **model}, t,
                traffic.requests * share * float(traffic.latency_bucket))


def start_prometheus(directory: Path, periods: list[Period]) -> PrometheusServer:
    """A real Prometheus on 127.0.0.1 holding the periods' series, ready."""
    assert PROMTOOL is not None, "promtool is needed (apt-get install prometheus)"
    history = History()
    for period in periods:
        record(history, period)
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "history.om"
    source.write_text(history.openmetrics())
    done = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source),
                           str(directory / "data")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    server = PrometheusServer(directory, [])
    server.wait_ready()
    return server
