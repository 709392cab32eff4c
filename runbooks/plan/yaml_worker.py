"""What a YAML worker process of `gpuctl plan` does with a chart's render: reads what `helm template` printed and
judges each object of a core kind by its schema, beside the main process, which judges the custom kinds once every
release's CRDs are in."""

import gc

from runbooks.plan.schemas import CoreVerdict, core_verdict
from runbooks.plan.yaml_stream import Parsed, parse


def start() -> None:
    """A worker's start: no cyclic garbage collector (runbooks/plan/helm.py, yaml_workers, says why)."""
    gc.disable()


def read(printed: str, kube_version: str) -> tuple[Parsed, list[CoreVerdict | None]]:
    """The render's objects and documents, and each object's core verdict (None for one that names no apiVersion or
    kind: the main process reports it)."""
    parsed = parse(printed)
    return parsed, [core_verdict(obj, kube_version) if "apiVersion" in obj and "kind" in obj else None
                    for obj in parsed.objects]
