"""Image references and where a mirror keeps them. Pure: no pulumi.

A reference is read as Docker and containerd read it (distribution/reference, normalize.go): its first path part is a
registry host only if it holds a `.` or a `:` or is `localhost`; otherwise the image is on Docker Hub (`docker.io`),
and a one-part name is under `library/`. A mirror keeps each image under its full source name, host included
(`<mirror>/quay.io/prometheus/prometheus:v3.5.0`), so the source can be read back from the mirrored name.
"""

import re
from dataclasses import dataclass

from components.site.mirror import Mirror

DOCKER_HUB = "docker.io"
"""The registry of a reference that names none (distribution/reference: defaultDomain)."""

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class Image:
    name: str
    """The repository with its host: `quay.io/prometheus/prometheus`, `docker.io/library/busybox`."""
    tag: str | None
    digest: str | None
    """`sha256:<hex>` where the reference pins one."""

    @property
    def reference(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    @property
    def host(self) -> str:
        return self.name.split("/", 1)[0]


def parse(reference: str) -> Image:
    """A reference as a runtime pulls it, host and `library/` filled in; no tag and no digest stays None (a runtime
    would pull `latest`)."""
    digest_match = _DIGEST.search(reference)
    digest = digest_match.group(1) if digest_match else None
    rest = reference[:digest_match.start()] if digest_match else reference
    # A tag is after the last `:` that follows the last `/` (a host's port comes before a `/`).
    name, tag = (rest.rsplit(":", 1) if ":" in rest.rsplit("/", 1)[-1] else (rest, None))
    first, _, remainder = name.partition("/")
    if not remainder or not ("." in first or ":" in first or first == "localhost"):
        name = f"{DOCKER_HUB}/{name if remainder else 'library/' + name}"
    return Image(name, tag, digest)


def mirrored(reference: str, registry: str) -> str:
    """Where the mirror `registry` keeps an image: under the image's full source name."""
    return f"{registry}/{parse(reference).reference}"


def pulled(reference: str, mirror: Mirror) -> str:
    """The reference a pod of the stack names for an image it runs: from the site's image mirror when it has one."""
    return mirrored(reference, mirror.images) if mirror.images else reference


def pulled_repository(repository: str, mirror: Mirror) -> str:
    """A repository (no tag) as pulled: for a chart that takes an image's repository and tag apart."""
    return f"{mirror.images}/{parse(repository).name}" if mirror.images else repository


def in_mirror(reference: str, registry: str) -> bool:
    return reference.startswith(f"{registry}/")


def source(reference: str, registry: str | None) -> Image:
    """The image a reference pulls, at its source: what lies under the mirror's prefix, else the reference itself."""
    if registry and in_mirror(reference, registry):
        return parse(reference.removeprefix(f"{registry}/"))
    return parse(reference)
