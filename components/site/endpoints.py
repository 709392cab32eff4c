"""Endpoints the site names: a URL must reach something real, never a name reserved for examples.

Alertmanager sends pages and heartbeats to these; a placeholder left in the spec fails every notification, and the
alerts then reach nobody. Pure: the site spec refuses a placeholder, and `gpuctl plan` judges the rendered
configuration with the same rule.
"""

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

RESERVED_TLDS = frozenset({"example", "invalid", "test", "localhost"})
"""Top-level names reserved so that they never resolve to a real host (RFC 2606 section 2, RFC 6761 section 6)."""
EXAMPLE_LABEL = "example"
"""The second-level name reserved for documentation (example.com, .net, .org: RFC 2606 section 3), and used the same
way under a private TLD (example.internal)."""


def placeholder(url: str) -> str | None:
    """Why the URL's host is a placeholder, or None when it may be real."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    labels = host.split(".")
    if not host:
        return f"{url!r} names no host"
    if labels[-1] in RESERVED_TLDS:
        return f"{host} is under .{labels[-1]}, reserved so that it never resolves (RFC 2606, RFC 6761)"
    if len(labels) >= 2 and labels[-2] == EXAMPLE_LABEL:
        return f"{host} is under {'.'.join(labels[-2:])}, a name for examples (RFC 2606): name the site's own host"
    return None


def _real(url: str) -> str:
    reason = placeholder(url)
    if reason:
        raise ValueError(f"a placeholder, not the site's endpoint: {reason}")
    return url


REAL_HOST = AfterValidator(_real)
"""Refuses a URL whose host is a placeholder."""
SiteUrl = Annotated[str, Field(pattern=r"^https?://\S+$"), REAL_HOST]
"""An http(s) URL of the site's own, whose host is no placeholder."""
