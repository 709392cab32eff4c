"""Recorded inference demand played back as the model servers' and kube-state-metrics' series, for a real
Prometheus to scrape, so the lending controller reads demand exactly as in production.

The 3x shock is Alibaba's GenAI serving trace (cluster-trace-v2026-GenAI `qps.csv`, derived hourly in
../shared/traces/genai-inference-qps/qps_hourly.csv, generative_mean_qps): 05:00 to 13:00 of the shifted clock, the
morning ramp to the day's peak at 08:00 (3.03x the day's mean of 1.61 qps) and the fall to the midday trough. The trace
gives request rates; the queue is what the rate leaves waiting beyond the Kubernetes pool's capacity, taken as 1.2x the
day's mean (engines sized for the mean and some headroom).
"""

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hosts.slurm_exporter import metrics_server

GENAI_HOURLY_QPS = (0.8928, 3.3984, 3.9814, 4.8657, 3.9971, 3.1671, 0.9889, 0.5251, 0.4781)
"""generative_mean_qps of hours 05..13 (qps_hourly.csv)."""
GENAI_DAY_MEAN_QPS = 1.6069
"""The mean of the 21 full hours of qps_hourly.csv (covered_s 3600), against which the README's 3.03 peak/mean is
taken."""
REPLICAS = 4
"""Engines serving before any lend."""
CAPACITY = 1.2
"""The rate, as a multiple of the day's mean, the Kubernetes pool serves without a queue."""
WAITING_PER_EXCESS = 60.0
"""Requests waiting per unit of rate (in day means) beyond capacity: at the 3x peak, 110 waiting (27 a replica)."""


def waiting_for(rate_over_mean: float) -> float:
    return round(WAITING_PER_EXCESS * max(0.0, rate_over_mean - CAPACITY), 1)


def shock_curve() -> list[float]:
    """Requests waiting in all, hour by hour of the recorded shock."""
    return [waiting_for(qps / GENAI_DAY_MEAN_QPS) for qps in GENAI_HOURLY_QPS]


@dataclass
class Playback:
    """A curve of total requests waiting, one value per step of step_s seconds from start(); the last value holds."""

    values: Sequence[float] = (0.0,)
    step_s: float = 1.0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def play(self, values: Sequence[float], step_s: float) -> None:
        with self.lock:
            self.values, self.step_s, self.started = list(values), step_s, time.monotonic()

    def now(self) -> float:
        with self.lock:
            index = int((time.monotonic() - self.started) / self.step_s)
            return self.values[min(index, len(self.values) - 1)]


@dataclass
class ServedDemand:
    """Demand from the rate the model servers are asked, for servers that queue nothing themselves (the test doubles
    answer at once): the queue a pool sized for `sized_rps` would hold, by the recorded shock's rule (waiting_for, with
    the rate over sized_rps for the rate over the day's mean), from the requests `served` saw over the last WINDOW_S.
    At the campaign's peak nothing waits; at its 3x shock some 108 (27 a replica): the lending controller's peak."""

    served: Sequence[Callable[[], Sequence[float]]]
    """Each model server's request arrivals (time.monotonic())."""
    sized_rps: float

    WINDOW_S = 2.0

    def now(self) -> float:
        since = time.monotonic() - self.WINDOW_S
        rate = sum(sum(1 for at in list(arrivals()) if at >= since) for arrivals in self.served) / self.WINDOW_S
        return waiting_for(rate / self.sized_rps)


STUCK_POD = "llm-gateway-litellm-migrations-x7k2p"
"""A gateway pod stuck Pending beside the engines: it requests no GPU, so no lent node helps it; it must not count."""


def render(playback: Playback | ServedDemand) -> str:
    """vllm:num_requests_waiting per engine (the curve's total spread over REPLICAS), and kube-state-metrics' phase,
    labels (the allowlisted component label) and GPU requests of the engines and of STUCK_POD, with the labels the
    stack's scrape gives them (namespace inference), in the text format. (prometheus-client would escape the colon
    away for Prometheus's OpenMetrics 1.0 Accept header, and vLLM's name has one.)"""
    total = playback.now()
    # Named as vllm-stack's Deployment names them (<release>-<model>-deployment-vllm), then its ReplicaSet's hash and
    # the pod's: the controller's queries tell the models' engines apart by it.
    engines = [f"vllm-qwen2-5-72b-deployment-vllm-6b5f7c9d8-x{replica}k2p" for replica in range(REPLICAS)]
    lines = ["# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{namespace="inference",model_name="qwen2-5-72b",pod="{pod}"}} '
              f"{total / REPLICAS}" for pod in engines]
    lines.append("# TYPE kube_pod_status_phase gauge")
    lines += [f'kube_pod_status_phase{{namespace="inference",pod="{pod}",phase="{phase}"}} '
              f"{int(phase == ('Pending' if pod == STUCK_POD else 'Running'))}"
              for pod in [*engines, STUCK_POD] for phase in ("Pending", "Running")]
    lines.append("# TYPE kube_pod_labels gauge")
    lines += [f'kube_pod_labels{{namespace="inference",pod="{pod}",'
              'label_app_kubernetes_io_component="serving-engine"} 1' for pod in engines]
    lines.append(f'kube_pod_labels{{namespace="inference",pod="{STUCK_POD}"}} 1')
    lines.append("# TYPE kube_pod_container_resource_requests gauge")
    lines += [f'kube_pod_container_resource_requests{{namespace="inference",pod="{pod}",container="vllm",'
              f'resource="nvidia_com_gpu",unit="integer"}} 4' for pod in engines]
    lines.append(f'kube_pod_container_resource_requests{{namespace="inference",pod="{STUCK_POD}",container="migrations",'
                 f'resource="cpu",unit="core"}} 0.5')
    return "\n".join(lines) + "\n"


def serve_demand(playback: Playback | ServedDemand) -> int:
    """Serves the playback on 127.0.0.1 from a daemon thread; returns the port."""
    server = metrics_server(lambda: render(playback), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_port)
