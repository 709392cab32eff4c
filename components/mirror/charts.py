"""Charts and their images from the site's mirror (site.mirror), through each chart's own values. Pure: no pulumi.

Every image a chart deploys by default is named by one of its values; with an image mirror set, each such value is
given the mirror's prefix before the source it names by default, so the chart renders `<mirror>/<source>` and no
rendered object is patched afterwards. The images the stack pins itself (the model servers, the gateway, its database,
busybox and python) go through components.mirror.images.pulled where the values name them.
"""

from dataclasses import dataclass
from typing import Any

from components.charts import (
    CLOUDNATIVE_PG,
    CSI_DRIVER_NFS,
    GPU_OPERATOR,
    KEDA,
    KUBE_PROMETHEUS_STACK,
    KUEUE,
    LOCAL_STATIC_PROVISIONER,
    ROOK_CEPH,
    ROOK_CEPH_CLUSTER,
    VICTORIA_METRICS_SINGLE,
    Chart,
)
from components.site.mirror import Mirror


@dataclass(frozen=True)
class ImageValue:
    path: str
    """The chart value (dotted) that names the image's registry, repository or whole reference."""
    source: str
    """What the value names at the chart's default, written out with its host (Docker Hub's `docker.io` too): the
    value becomes `<mirror>/<source>`."""
    image: str
    """The image it leads to, host and path without the tag (`quay.io/thanos/thanos`): how a rendered reference is
    traced back to the value that names it."""


def _values(*entries: tuple[str, str] | tuple[str, str, str]) -> tuple[ImageValue, ...]:
    """(path, source[, image]): the image is the source itself, without a tag, unless the value is only a part."""
    return tuple(ImageValue(entry[0], entry[1], entry[2] if len(entry) == 3 else entry[1].split(":")[0])
                 for entry in entries)


# Operands the GPU Operator deploys from its ClusterPolicy, each with a `repository` and an `image` value (gpu-operator
# v25.10.1 values.yaml). Sandbox and vGPU operands too: the operator runs them when a site turns sandbox workloads on.
_GPU_OPERANDS = (("validator", "nvcr.io/nvidia", "gpu-operator"), ("operator", "nvcr.io/nvidia", "gpu-operator"),
                 ("operator.initContainer", "nvcr.io/nvidia", "cuda"), ("driver", "nvcr.io/nvidia", "driver"),
                 ("driver.manager", "nvcr.io/nvidia/cloud-native", "k8s-driver-manager"),
                 ("toolkit", "nvcr.io/nvidia/k8s", "container-toolkit"),
                 ("devicePlugin", "nvcr.io/nvidia", "k8s-device-plugin"),
                 ("dcgm", "nvcr.io/nvidia/cloud-native", "dcgm"),
                 ("dcgmExporter", "nvcr.io/nvidia/k8s", "dcgm-exporter"),
                 ("gfd", "nvcr.io/nvidia", "k8s-device-plugin"),
                 ("migManager", "nvcr.io/nvidia/cloud-native", "k8s-mig-manager"),
                 ("nodeStatusExporter", "nvcr.io/nvidia", "gpu-operator"),
                 ("gds", "nvcr.io/nvidia/cloud-native", "nvidia-fs"),
                 ("gdrcopy", "nvcr.io/nvidia/cloud-native", "gdrdrv"),
                 ("vgpuManager.driverManager", "nvcr.io/nvidia/cloud-native", "k8s-driver-manager"),
                 ("vgpuDeviceManager", "nvcr.io/nvidia/cloud-native", "vgpu-device-manager"),
                 ("vfioManager", "nvcr.io/nvidia", "cuda"),
                 ("vfioManager.driverManager", "nvcr.io/nvidia/cloud-native", "k8s-driver-manager"),
                 ("kataManager", "nvcr.io/nvidia/cloud-native", "k8s-kata-manager"),
                 ("sandboxDevicePlugin", "nvcr.io/nvidia", "kubevirt-gpu-device-plugin"),
                 ("ccManager", "nvcr.io/nvidia/cloud-native", "k8s-cc-manager"))

CHART_IMAGES: dict[Chart, tuple[ImageValue, ...]] = {
    # kube-prometheus-stack 77.5.0 values.yaml and its subcharts' (grafana 9.4.4, kube-state-metrics 6.3.0,
    # prometheus-node-exporter 4.47.3): each image's `registry`. global.imageRegistry would put every image under one
    # prefix and lose which registry each came from.
    KUBE_PROMETHEUS_STACK: _values(
        ("alertmanager.alertmanagerSpec.image.registry", "quay.io", "quay.io/prometheus/alertmanager"),
        ("prometheus.prometheusSpec.image.registry", "quay.io", "quay.io/prometheus/prometheus"),
        ("prometheusOperator.image.registry", "quay.io", "quay.io/prometheus-operator/prometheus-operator"),
        ("prometheusOperator.prometheusConfigReloader.image.registry", "quay.io",
         "quay.io/prometheus-operator/prometheus-config-reloader"),
        ("prometheusOperator.thanosImage.registry", "quay.io", "quay.io/thanos/thanos"),
        ("prometheusOperator.admissionWebhooks.patch.image.registry", "registry.k8s.io",
         "registry.k8s.io/ingress-nginx/kube-webhook-certgen"),
        ("grafana.image.registry", "docker.io", "docker.io/grafana/grafana"),
        ("grafana.sidecar.image.registry", "quay.io", "quay.io/kiwigrid/k8s-sidecar"),
        ("kube-state-metrics.image.registry", "registry.k8s.io",
         "registry.k8s.io/kube-state-metrics/kube-state-metrics"),
        ("prometheus-node-exporter.image.registry", "quay.io", "quay.io/prometheus/node-exporter")),
    # victoria-metrics-single 0.12.2: server.image.registry is empty, which Docker reads as Docker Hub.
    VICTORIA_METRICS_SINGLE: _values(
        ("server.image.registry", "docker.io", "docker.io/victoriametrics/victoria-metrics")),
    GPU_OPERATOR: _values(*((f"{operand}.repository", source, f"{source}/{image}") for operand, source, image in
                            _GPU_OPERANDS),
                          ("node-feature-discovery.image.repository", "registry.k8s.io/nfd/node-feature-discovery")),
    # local-static-provisioner 2.8.0 names the whole reference, its tag from the chart's appVersion.
    LOCAL_STATIC_PROVISIONER: _values(("image", "registry.k8s.io/sig-storage/local-volume-provisioner:v2.8.0")),
    CSI_DRIVER_NFS: _values(*((f"image.{part}.repository", f"registry.k8s.io/sig-storage/{name}") for part, name in (
        ("nfs", "nfsplugin"), ("csiProvisioner", "csi-provisioner"), ("csiResizer", "csi-resizer"),
        ("csiSnapshotter", "csi-snapshotter"), ("livenessProbe", "livenessprobe"),
        ("nodeDriverRegistrar", "csi-node-driver-registrar"), ("externalSnapshotter", "snapshot-controller")))),
    # rook-ceph v1.17.5: the operator, and the CSI images it writes to rook-ceph-operator-config for the driver pods.
    ROOK_CEPH: _values(("image.repository", "docker.io/rook/ceph"),
                       ("csi.cephcsi.repository", "quay.io/cephcsi/cephcsi"),
                       ("csi.registrar.repository", "registry.k8s.io/sig-storage/csi-node-driver-registrar"),
                       ("csi.provisioner.repository", "registry.k8s.io/sig-storage/csi-provisioner"),
                       ("csi.snapshotter.repository", "registry.k8s.io/sig-storage/csi-snapshotter"),
                       ("csi.attacher.repository", "registry.k8s.io/sig-storage/csi-attacher"),
                       ("csi.resizer.repository", "registry.k8s.io/sig-storage/csi-resizer"),
                       ("csi.csiAddons.repository", "quay.io/csiaddons/k8s-sidecar")),
    # rook-ceph-cluster v1.17.5: the Ceph daemons' image, a whole reference.
    ROOK_CEPH_CLUSTER: _values(("cephClusterSpec.cephVersion.image", "quay.io/ceph/ceph:v19.2.2")),
    KUEUE: _values(("controllerManager.manager.image.repository", "registry.k8s.io/kueue/kueue")),
    KEDA: _values(*((f"image.{part}.registry", "ghcr.io", f"ghcr.io/kedacore/{name}") for part, name in (
        ("keda", "keda"), ("metricsApiServer", "keda-metrics-apiserver"), ("webhooks", "keda-admission-webhooks")))),
    CLOUDNATIVE_PG: _values(("image.repository", "ghcr.io/cloudnative-pg/cloudnative-pg")),
}
"""Per chart, every value that names an image the chart deploys by default. The model servers', the gateway's and
its database's images are the stack's own pins (components/inference/values.py)."""


def chart_reference(chart: Chart, mirror: Mirror) -> tuple[str, str | None]:
    """(chart, repository) as a Helm release names them: the pinned chart from the site's chart mirror when it has
    one (by the name `helm push` and `helm pull` give it), else as pinned."""
    if mirror.charts is None:
        return chart.name, chart.repo
    if mirror.charts.startswith("oci://"):
        return f"{mirror.charts}/{chart.name.rstrip('/').rsplit('/', 1)[-1]}", None
    return f"{mirror.charts}/{chart.archive}", None


def image_values(chart: Chart, mirror: Mirror) -> dict[str, Any]:
    """The values that put every image the chart names by default under the site's image mirror; none without one."""
    overlay: dict[str, Any] = {}
    if mirror.images is None:
        return overlay
    for value in CHART_IMAGES.get(chart, ()):
        *parents, leaf = value.path.split(".")
        node = overlay
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = f"{mirror.images}/{value.source}"
    return overlay


def merged(values: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """values with overlay's leaves set, as Helm merges a second values file over a first (maps merged key by key)."""
    result = dict(values)
    for key, value in overlay.items():
        result[key] = merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) \
            else value
    return result
