"""Every Helm chart the stack installs, pinned in one place: chart, version and repository."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    name: str
    version: str
    repo: str


KUBE_PROMETHEUS_STACK = Chart("kube-prometheus-stack", "77.5.0", "https://prometheus-community.github.io/helm-charts")
"""Prometheus (hot tier), Alertmanager, Grafana with its dashboard sidecar, and the operator's CRDs."""

VICTORIA_METRICS_SINGLE = Chart("victoria-metrics-single", "0.12.2", "https://victoriametrics.github.io/helm-charts/")
"""The cold tier: one VictoriaMetrics server receiving Prometheus remote_write (docs/monitoring.md says why)."""

GPU_OPERATOR = Chart("gpu-operator", "v25.3.3", "https://helm.ngc.nvidia.com/nvidia")
"""NVIDIA GPU Operator: the one driver layer (driver, container toolkit, device plugin, GFD, DCGM exporter)."""
