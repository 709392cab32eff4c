"""What the health controller's real-Slurm test feeds it: a DCGM exporter double (the series dcgm-exporter serves,
with its labels, each GPU's values set by the test) for a real Prometheus to scrape, and kubectl faked at its
command line with the nodes' cordons, annotations and labels kept as the API server would."""

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from components.gpu_operator.dcgm_counters import COUNTERS

LABELS = ["Hostname", "gpu", "UUID", "modelName"]
"""dcgm-exporter's labels of one GPU (components/monitoring/alerts.py GPU)."""
HEALTHY = {"DCGM_FI_DEV_GPU_TEMP": 45.0}
"""What a GPU reports beside zeros: every other counter the stack enables starts at 0."""


class DcgmDouble:
    """Every counter of components/gpu_operator/dcgm_counters.py for each GPU of `nodes`; `serving` False answers
    with nothing, as an exporter whose DCGM lost the GPUs."""

    def __init__(self, nodes: Sequence[str], gpus: int = 8) -> None:
        self.values = {(node, str(gpu)): {name: HEALTHY.get(name, 0.0) for name, _, _ in COUNTERS}
                       for node in nodes for gpu in range(gpus)}
        self.serving = True
        self.lock = threading.Lock()
        registry = CollectorRegistry()
        registry.register(self)
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def set(self, node: str, gpu: int, metric: str, value: float) -> None:
        with self.lock:
            self.values[(node, str(gpu))][metric] = value

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            if not self.serving:
                return
            for name, _, text in COUNTERS:
                family = GaugeMetricFamily(name, text, labels=LABELS)
                for (node, gpu), values in sorted(self.values.items()):
                    family.add_metric([node, gpu, f"GPU-{node}-{gpu}", "NVIDIA A800-SXM4-80GB"], values[name])
                yield family

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class FakeKube:
    """kubectl for the health controller: `get nodes -o json`, `get pods -o json`, cordon, uncordon, annotate."""

    nodes: Sequence[str]
    cordoned: set[str] = field(default_factory=set)
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, args: Sequence[str], timeout_s: float = 30) -> str:
        call = list(args)
        self.calls.append(call)
        verb = call[1]
        if verb == "get" and call[2] == "nodes":
            items: list[dict[str, Any]] = [
                {"metadata": {"name": n, "labels": self.labels.get(n, {}), "annotations": self.annotations.get(n, {})},
                 "spec": {"unschedulable": True} if n in self.cordoned else {}} for n in self.nodes]
            return json.dumps({"items": items})
        if verb == "get":
            return json.dumps({"items": []})
        if verb in ("cordon", "uncordon"):
            (self.cordoned.add if verb == "cordon" else self.cordoned.discard)(call[2])
        elif verb == "annotate":
            key, _, value = call[4].partition("=")
            notes = self.annotations.setdefault(call[3], {})
            if key.endswith("-") and not value:
                notes.pop(key[:-1], None)
            else:
                notes[key] = value
        return ""
