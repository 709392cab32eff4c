"""Objects the stack's pods use but the program never creates: credentials the program must not hold, which the site's
operators create before the first `pulumi up` (README, "How the platform team runs it for real"). The one table of
them; `gpuctl plan`'s references-resolve invariant accepts a pod's reference to nothing else the stack lacks. Pure.
"""

from dataclasses import dataclass

from components.inference.values import NAMESPACE as INFERENCE_NAMESPACE
from components.monitoring.prometheus import NOTIFY_SECRET
from components.site.site import Site
from components.site.wellknown import MONITORING_NAMESPACE


@dataclass(frozen=True)
class Supplied:
    kind: str
    namespace: str
    name: str
    holds: str
    """What is in it, for the reader of a violation or of the README."""


def operator_supplied(site: Site) -> tuple[Supplied, ...]:
    return (
        Supplied("Secret", INFERENCE_NAMESPACE, site.inference.gateway.provider_secret,
                 "the external LLM APIs' keys, one per inference.external[].api_key_env"),
        Supplied("Secret", MONITORING_NAMESPACE, NOTIFY_SECRET,
                 "Alertmanager's Slack webhook URL and the on-call and heartbeat tokens"),
    )
