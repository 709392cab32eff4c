"""Every image the stack would pull, read from what Helm renders and the program registers, and the
images-from-mirror invariant over them.

An image is named in a pod template (`image`), in a custom resource an operator turns into pods (`image`,
`imageName`, the GPU Operator's `repository`/`image`/`version`), or as a whole reference in a string an operator reads
(an argument `--prometheus-config-reloader=<ref>`, an environment variable, Rook's operator ConfigMap). Helm's test
hooks are left out: only `helm test` creates them, never `pulumi up`.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from components.mirror.charts import CHART_IMAGES
from components.mirror.images import Image, in_mirror, parse, source
from runbooks.plan.producers import Deployed

# A whole reference inside a string: a registry host (a dot or a port), a path and a tag or digest, not part of a
# URL (distribution/reference's grammar, narrowed to references that name their host, as operators' defaults do).
_REFERENCE = re.compile(r"(?<![\w./:@-])((?:[a-z0-9-]+\.)+[a-z0-9-]+(?::\d+)?(?:/[a-z0-9._-]+)+"
                        r"(?::[\w][\w.-]*|@sha256:[0-9a-f]{64}))(?![\w/])")
_OPERAND_KEYS = ("repository", "image", "version")
SANDBOX_OPERANDS = frozenset({"sandboxDevicePlugin", "vfioManager", "vgpuDeviceManager", "vgpuManager", "kataManager",
                              "ccManager"})
"""ClusterPolicy operands for sandbox workloads (VMs): their DaemonSets (gpu-operator assets/state-sandbox-*,
state-vfio-manager, ...) select nodes labelled `nvidia.com/gpu.deploy.<operand>=true`, which the operator sets only
on nodes of a vm-passthrough or vm-vgpu workload config, and those exist only with sandboxWorkloads.enabled."""


@dataclass(frozen=True)
class ImageUse:
    obj: str
    """The object that names it: `Kind namespace/name`."""
    field: str
    """Where in the object (dotted path)."""
    reference: str
    chart: str | None = None
    """The chart that rendered the object (its `helm.sh/chart` label, `<name>-<version>`), if it says."""


def _named(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind')} {where}{metadata.get('name')}"


def _is_test_hook(obj: dict[str, Any]) -> bool:
    hooks = ((obj.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")
    return any(h.strip().startswith("test") for h in str(hooks).split(","))


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        if {"repository", "image"} <= value.keys() and isinstance(value.get("image"), str):
            # A GPU Operator operand: the operator pulls repository/image:version (api/nvidia/v1/
            # clusterpolicy_types.go, imagePath), or image alone when it is a whole reference.
            if value.get("enabled") is not False and value.get("repository"):
                yield f"{path}.repository", f"{value['repository']}/{value['image']}:{value.get('version') or ''}" \
                    .rstrip(":")
            for key, item in value.items():
                if key not in _OPERAND_KEYS:
                    yield from _walk(item, f"{path}.{key}")
            return
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in ("image", "imageName") and isinstance(item, str):
                yield where, item
            else:
                yield from _walk(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    elif isinstance(value, str):
        for match in _REFERENCE.finditer(value):
            yield path, match.group(1)


def image_uses(objects: Iterable[dict[str, Any]]) -> list[ImageUse]:
    """Every image reference in the objects, once per object and field."""
    uses = []
    for obj in objects:
        if obj.get("kind") == "CustomResourceDefinition" or _is_test_hook(obj):
            continue  # a CRD's strings are its schema's documentation
        spec = obj.get("spec") or {}
        if obj.get("kind") == "ClusterPolicy" and not (spec.get("sandboxWorkloads") or {}).get("enabled"):
            obj = {**obj, "spec": {k: v for k, v in spec.items() if k not in SANDBOX_OPERANDS}}
        chart = ((obj.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart")
        seen = set()
        for field, reference in _walk(obj, ""):
            if (field, reference) not in seen:
                seen.add((field, reference))
                uses.append(ImageUse(_named(obj), field, reference, chart))
    return uses


def _value_to_set(use: ImageUse, image: Image, registry: str, registered: bool) -> str:
    if registered:
        return "the program registers it: name the image through components.mirror.images.pulled"
    values = [(chart, value) for chart, entries in CHART_IMAGES.items() for value in entries
              if value.image == image.name]
    own = [(chart, value) for chart, value in values if use.chart and use.chart.startswith(
        chart.archive.removesuffix(f"-{chart.version}.tgz"))]
    if own or values:
        chart, value = (own or values)[0]
        return f"set {chart.archive.removesuffix('.tgz')} value {value.path} to {registry}/{value.source}"
    return (f"no value in components/mirror/charts.py (CHART_IMAGES) names it: add the value of "
            f"{use.chart or 'its chart'} that sets this image")


def images_from_mirror(deployed: Deployed) -> list[str]:
    """With an image mirror, every image the stack pulls comes from it; with or without one, every image is pinned
    by a tag other than `latest` or by a digest (a bundle carries a moving tag only as it was that day)."""
    registry = deployed.image_mirror
    registered = {id(o) for o in deployed.registered}
    problems = []
    for obj in deployed.objects:
        for use in image_uses([obj]):
            image = parse(use.reference)
            where = f"{use.obj} {use.field}"
            if not image.digest and image.tag in (None, "latest"):
                problems.append(f"{where}: {use.reference} names no tag or digest but {image.tag or 'latest'}: pin "
                                "it")
            if registry and not in_mirror(use.reference, registry):
                problems.append(f"{where} pulls {use.reference}, not from the mirror {registry}: "
                                f"{_value_to_set(use, image, registry, id(obj) in registered)}")
    return problems


def images_pulled(objects: Iterable[dict[str, Any]], registry: str | None) -> dict[str, list[ImageUse]]:
    """Each image the stack pulls, as its source names it, with every object and field that names it."""
    pulled: dict[str, list[ImageUse]] = {}
    for use in image_uses(objects):
        pulled.setdefault(source(use.reference, registry).reference, []).append(use)
    return dict(sorted(pulled.items()))

