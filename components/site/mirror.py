"""The mirror section of the site spec (`gpu-cluster:mirror`): where an air-gapped site keeps the stack's charts and
images, so that `pulumi up` reaches no public registry (components/mirror/ rewrites the releases; docs/air-gap.md).

Each part is optional: a site may mirror images and still reach the charts' repositories, or the reverse. Slurm's
host artifacts (enroot, Pyxis) have their own mirror, slurm.containers.mirror_url.
"""

from typing import Annotated

from pydantic import Field

from components.site.types import Spec

# `oci://host[:port]/path`, as `helm push` and `helm install` name a registry (Helm docs, "Use OCI-based registries").
_OCI = r"oci://[A-Za-z0-9.-]+(:\d{1,5})?(/[a-z0-9._-]+)+"
# A folder on the machine that runs `pulumi up`: plain characters, as the other paths of the spec.
_FOLDER = r"(/[A-Za-z0-9._+@-]+)+"
# A registry host and an optional path, as the first part of an image reference (distribution's reference grammar:
# domain[:port]/path-component...); lower case, because a path component is.
_REGISTRY = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*"


class Mirror(Spec):
    charts: Annotated[str, Field(pattern=rf"^({_OCI}|{_FOLDER})$", max_length=1024)] | None = None
    """Where every Helm release installs its chart from, at the version components/charts.py pins: an OCI registry
    (`oci://registry.site:5000/charts`; `helm push <chart>-<version>.tgz oci://...` puts a chart at
    `<charts>/<chart>:<version>`) or a folder of chart archives as `helm pull` names them (`<chart>-<version>.tgz`)
    on the machine that runs `pulumi up`. None: the charts' public repositories."""
    images: Annotated[str, Field(pattern=rf"^{_REGISTRY}$", max_length=255)] | None = None
    """The registry every image of the stack is pulled from (`registry.site:5000`, or with a path,
    `registry.site:5000/gpu-cluster`). An image keeps its source's host and path under it
    (`quay.io/prometheus/prometheus:v3.5.0` is pulled as `<images>/quay.io/prometheus/prometheus:v3.5.0`), so two
    sources never collide and `gpuctl mirror bundle` lists what to copy where. None: the public registries."""
