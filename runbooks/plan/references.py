"""The `references-resolve` invariant: every in-cluster address the stack writes anywhere (the gateway's model list,
KEDA's server address, Grafana's data sources, Alertmanager's receivers, container args and env) names a Service of
that namespace with that port. A wrong name or port passes every schema and every chart, and fails only at the first
request on the cluster.

An address is `<service>.<namespace>.svc[.cluster.local][:port]` inside any string of any object, Secrets' data
decoded. Without a port, a URL's scheme gives it (http 80, https 443); a bare host only has to name the Service.
"""

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runbooks.plan.producers import Deployed

ADDRESS = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)?(?<![\w.-])(?P<service>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)"
    r"\.(?P<namespace>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)\.svc(?:\.cluster\.local)?(?::(?P<port>\d+))?(?![\w-]|\.[\w-])")
SCHEME_PORTS = {"http://": 80, "https://": 443}

BUILTIN_SERVICES = {("default", "kubernetes"): frozenset({443})}
"""What every cluster has: the API server's Service."""

OPERATOR_SERVICES: dict[str, tuple[tuple[str, frozenset[int]], ...]] = {
    # prometheus-operator's governing Services (pkg/prometheus/statefulset.go, pkg/alertmanager/statefulset.go): one
    # per namespace, whatever the resource's name.
    "Prometheus": (("prometheus-operated", frozenset({9090})),),
    "Alertmanager": (("alertmanager-operated", frozenset({9093, 9094})),),
    # CloudNativePG's Services of a Cluster (docs: "Service management"): read-write, read-only, any instance.
    "Cluster": (("{name}-rw", frozenset({5432})), ("{name}-ro", frozenset({5432})), ("{name}-r", frozenset({5432}))),
}
"""Services an operator the stack deploys creates at run time from a custom resource (so no render holds them):
kind -> (name, ports), `{name}` standing for the resource's own name."""
OPERATOR_GROUPS = {"Prometheus": "monitoring.coreos.com/", "Alertmanager": "monitoring.coreos.com/",
                   "Cluster": "postgresql.cnpg.io/"}


@dataclass(frozen=True)
class Reference:
    holder: str
    """The object and field that hold the address, e.g. `ConfigMap inference/llm-gateway-litellm-config
    data.config.yaml`."""
    address: str
    service: str
    namespace: str
    port: int | None
    """None: a bare host, any port of the Service will do."""


def services(deployed: Deployed) -> dict[tuple[str, str], frozenset[int]]:
    """(namespace, name) -> ports of every Service the stack renders, registers or has an operator create."""
    found = dict(BUILTIN_SERVICES)
    for obj in deployed.objects:
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        if obj.get("kind") == "Service":
            found[key] = frozenset(int(p["port"]) for p in (obj.get("spec") or {}).get("ports") or [])
        elif str(obj.get("apiVersion", "")).startswith(OPERATOR_GROUPS.get(str(obj.get("kind")), "\0")):
            for name, ports in OPERATOR_SERVICES[str(obj["kind"])]:
                found[(key[0], name.format(name=key[1]))] = ports
    return found


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _texts(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, text) of every string in an object; a Secret's data decoded, as its consumer reads it."""
    for path, text in _strings({k: v for k, v in obj.items() if k != "metadata"}, ""):
        if obj.get("kind") == "Secret" and path.startswith("data."):
            try:
                text = base64.b64decode(text, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                continue
        yield path, text


def references(deployed: Deployed) -> Iterator[Reference]:
    for obj in deployed.objects:
        if obj.get("kind") == "CustomResourceDefinition":
            continue  # a schema: its descriptions cite example addresses, none is used
        metadata = obj.get("metadata") or {}
        where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
        for path, text in _texts(obj):
            for match in ADDRESS.finditer(text):
                port = match["port"]
                yield Reference(f"{obj.get('kind')} {where}{metadata.get('name')} {path}",
                                match[0].removeprefix(match["scheme"] or ""), match["service"], match["namespace"],
                                int(port) if port else SCHEME_PORTS.get(match["scheme"] or ""))


def references_resolve(deployed: Deployed) -> list[str]:
    """One violation per address that names no Service, or a port its Service does not have."""
    known = services(deployed)
    problems = []
    for ref in references(deployed):
        ports = known.get((ref.namespace, ref.service))
        if ports is None:
            problems.append(f"{ref.holder}: {ref.address} names no Service {ref.service} in namespace "
                            f"{ref.namespace} that the stack deploys")
        elif ref.port is not None and ref.port not in ports:
            has = ", ".join(map(str, sorted(ports)))
            problems.append(f"{ref.holder}: {ref.address} names port {ref.port}, which Service "
                            f"{ref.namespace}/{ref.service} does not have (it has {has})")
    return sorted(set(problems))
