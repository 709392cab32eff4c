"""Every Helm chart the stack installs, pinned in one place: chart, version, repository and, where known, the
archive's sha256."""

import hashlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chart:
    name: str
    """The chart's name in its repository, or its full `oci://` reference."""
    version: str
    repo: str | None = None
    """The Helm repository; None for an `oci://` chart, whose reference names its registry."""
    sha256: str | None = None
    """sha256 of the archive `helm pull` fetches (the repository index's `digest`), where the upstream's own archive
    is the one pinned; None where the mirror's archive was packaged from the release's source (../shared/charts/
    SOURCES.md: `helm package` stamps the time, so only the chart inside matches)."""

    @property
    def archive(self) -> str:
        """The file `helm pull` writes: `<name>-<version>.tgz`, an OCI chart named by its last part."""
        return f"{self.name.rstrip('/').rsplit('/', 1)[-1]}-{self.version}.tgz"


KUBE_PROMETHEUS_STACK = Chart("kube-prometheus-stack", "77.5.0", "https://prometheus-community.github.io/helm-charts")
"""Prometheus (hot tier), Alertmanager, Grafana with its dashboard sidecar, and the operator's CRDs."""

VICTORIA_METRICS_SINGLE = Chart("victoria-metrics-single", "0.12.2", "https://victoriametrics.github.io/helm-charts/")
"""The cold tier: one VictoriaMetrics server receiving Prometheus remote_write (docs/monitoring.md says why)."""

# v25.10.1 is the first with dcgmExporter.hpcJobMapping: the operator mounts the Slurm prolog's job files into the
# exporter and sets DCGM_HPC_JOB_MAPPING_DIR (TransformDCGMExporter); v25.3.3 dropped dcgmExporter.env off OpenShift.
GPU_OPERATOR = Chart("gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia")
"""NVIDIA GPU Operator: the one driver layer (driver, container toolkit, device plugin, GFD, DCGM exporter)."""

LOCAL_STATIC_PROVISIONER = Chart(
    "local-static-provisioner", "2.8.0", "https://kubernetes-sigs.github.io/sig-storage-local-static-provisioner/"
)
"""Local NVMe tier: one PersistentVolume per NVMe filesystem a node mounts, no extra data path (docs/storage.md)."""

# The upstream's packaged archive, byte for byte (../shared/charts/SOURCES.md).
CSI_DRIVER_NFS = Chart(
    "csi-driver-nfs", "4.11.0", "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts",
    "e44bcd7f6934fe6cb07194a1b6e780ca4a428c5d37330a9db2bfa7a9300c8da5",
)
"""NFS hot tier: the nfs.csi.k8s.io driver behind the per-team StorageClasses."""

ROOK_CEPH = Chart("rook-ceph", "v1.17.5", "https://charts.rook.io/release")
"""Ceph cold tier: the Rook operator."""

ROOK_CEPH_CLUSTER = Chart("rook-ceph-cluster", "v1.17.5", "https://charts.rook.io/release")
"""Ceph cold tier: the cluster and its CephFS for archived checkpoints."""

KUEUE = Chart("oci://registry.k8s.io/kueue/charts/kueue", "0.14.1")
"""Kueue: GPU quota, cohort borrowing, priority preemption and all-or-nothing admission for Kubernetes jobs
(docs/scheduling.md says why Kueue, not Volcano). Published only as an OCI chart; its APIs are served as v1beta1."""

VLLM_STACK = Chart("vllm-stack", "0.1.12", "https://vllm-project.github.io/production-stack")
"""The model servers: one vLLM engine Deployment, Service and KEDA ScaledObject per served model (router off)."""

LITELLM = Chart("oci://ghcr.io/berriai/litellm-helm", "0.4.8")
"""The LLM gateway: LiteLLM proxy 1.80.5-stable.1, the one entry of LLM traffic, metered per team and model."""

# The upstream's packaged archive, byte for byte (../shared/charts/SOURCES.md).
KEDA = Chart("keda", "2.20.2", "https://kedacore.github.io/charts",
             "db60b1fa60f0565fefa4ce2f87e855b6a8854363ee82962fbe28a12a70d64c4c")
"""Autoscaling of the model servers on their queue depth (a Prometheus query), not on CPU."""

CLOUDNATIVE_PG = Chart("cloudnative-pg", "0.29.0", "https://cloudnative-pg.github.io/charts")
"""The PostgreSQL operator of the gateway's database."""

CLOUDNATIVE_PG_CLUSTER = Chart("cluster", "0.8.1", "https://cloudnative-pg.github.io/charts")
"""The gateway's PostgreSQL cluster (a CloudNativePG Cluster: a primary, streaming replicas, failover)."""

CHARTS = (KUBE_PROMETHEUS_STACK, VICTORIA_METRICS_SINGLE, GPU_OPERATOR, LOCAL_STATIC_PROVISIONER, CSI_DRIVER_NFS,
          ROOK_CEPH, ROOK_CEPH_CLUSTER, KUEUE, VLLM_STACK, LITELLM, KEDA, CLOUDNATIVE_PG, CLOUDNATIVE_PG_CLUSTER)
"""Every chart above."""


def pinned(archive: str) -> Chart | None:
    """The pinned chart whose archive has this file name, if any."""
    return next((chart for chart in CHARTS if chart.archive == archive), None)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Container images the stack runs itself, pinned by tag (never `latest`).
BUSYBOX_IMAGE = "busybox:1.36.1"
PYTHON_IMAGE = "python:3.11.11-slim-bookworm"
