"""The `references-resolve` invariant, judged on everything the stack would create. A wrong name passes every schema
and every chart, and fails only on the cluster: at the first request, or with a pod that never starts.

- Every in-cluster address the stack writes anywhere (the gateway's model list, KEDA's server address, Grafana's data
  sources, Alertmanager's receivers, container args and env) names a Service of that namespace with that port. An
  address is `<service>.<namespace>.svc[.cluster.local][:port]` inside any string of any object, Secrets' data
  decoded. Without a port, a URL's scheme gives it (http 80, https 443); a bare host only has to name the Service.
- Every Secret, ConfigMap, PersistentVolumeClaim, ServiceAccount and PriorityClass a pod uses (and the Secrets and
  ConfigMaps the Prometheus operator mounts into its pods) is rendered or registered, made at run time by a program or
  operator the stack deploys, built into every cluster, or in the table of operator-supplied objects
  (components/supplied.py) that the README's run sequence creates. An optional reference may be missing.
"""

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runbooks.plan.converge import made_secrets, uses
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


BUILTIN_OBJECTS = frozenset({
    # The ServiceAccount controller makes `default`, the root CA publisher `kube-root-ca.crt`, in every namespace
    # (kube-controller-manager); the API server creates the two system PriorityClasses.
    ("ServiceAccount", "*", "default"), ("ConfigMap", "*", "kube-root-ca.crt"),
    ("PriorityClass", "", "system-cluster-critical"), ("PriorityClass", "", "system-node-critical"),
})
USED_KINDS = ("Secret", "ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "PriorityClass")
def objects_exist(deployed: Deployed) -> list[str]:
    """One violation per object a pod uses that nothing makes and no operator is told to supply."""
    made = set(BUILTIN_OBJECTS) | {(s.kind, s.namespace, s.name) for s in deployed.supplied}
    for obj in deployed.objects:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        if obj.get("kind") in USED_KINDS:
            made.add((str(obj["kind"]), namespace, str(metadata.get("name"))))
        made.update(("Secret", namespace, name) for name in made_secrets(obj))
    problems = []
    for obj in deployed.objects:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        for kind, name, where in uses(obj):
            scope = "" if kind == "PriorityClass" else namespace
            if not {(kind, scope, name), (kind, "*", name)} & made:
                problems.append(f"{_named(obj)} {where}: {kind} {f'{scope}/' if scope else ''}{name} is rendered, "
                                "registered or made by nothing the stack deploys, and no operator is told to supply "
                                "it (components/supplied.py)")
    return problems


def _named(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind')} {metadata['namespace'] + '/' if metadata.get('namespace') else ''}{metadata.get('name')}"


def references_resolve(deployed: Deployed) -> list[str]:
    """One violation per address that names no Service, or a port its Service does not have, and per object a pod
    uses that nothing makes or supplies."""
    known = services(deployed)
    problems = objects_exist(deployed)
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
