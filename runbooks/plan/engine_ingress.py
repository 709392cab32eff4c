"""Invariant `engines-admit-only-the-gateway`: nothing but the gateway calls a model server.

A model server behind no NetworkPolicy answers any pod of any namespace, with no gateway key, budget, model allow-list
or metering. Judged by what the rendered NetworkPolicies do, not by their text, with Kubernetes' rules (policies that
select a pod add up; a rule without `from` admits every source; an ipBlock is taken to hold pod addresses): every
model server (a Deployment running `vllm serve`) must admit the gateway's pods on the port the gateway calls, and the
Prometheus that scrapes it on the scraped port, and no other pod the stack deploys, nor a pod a team could create in
its namespace with the labels of those two (a team picks its pods' labels).
"""

from collections.abc import Iterator
from typing import Any

from components.site.wellknown import TEAM_LABEL
from runbooks.plan.producers import Deployed, pod_templates, selects

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name."""
PROMETHEUS_POD_LABELS = ("app.kubernetes.io/name", "operator.prometheus.io/name")
"""What the Prometheus Operator labels a Prometheus resource's pods with: `prometheus`, and the resource's name
(pkg/prometheus/server/statefulset.go); spec.podMetadata.labels come on top."""

ANY_TEAM = "any-team"
"""A team namespace the render does not hold (a team onboarded later), judged beside those it holds: labelled as the
teams component labels a team's namespace."""

Pod = tuple[str, dict[str, str]]
"""(namespace, labels) of a pod."""


def _meta(obj: dict[str, Any], key: str) -> Any:
    return (obj.get("metadata") or {}).get(key)


def _template_labels(workload: dict[str, Any]) -> dict[str, str]:
    return dict(((workload.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return list((((workload.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])


def _is_engine(workload: dict[str, Any]) -> bool:
    return any([*c.get("command", []), *c.get("args", [])][:2] == ["vllm", "serve"] for c in _containers(workload))


def _is_gateway(workload: dict[str, Any]) -> bool:
    return any("litellm" in str(c.get("image", "")) for c in _containers(workload))


def _namespace_labels(deployed: Deployed, name: str) -> dict[str, str]:
    rendered = next((n for n in deployed.of_kind("Namespace") if _meta(n, "name") == name),
                    {"metadata": {"labels": {TEAM_LABEL: name}}} if name == ANY_TEAM else {})
    return {**(_meta(rendered, "labels") or {}), NAMESPACE_NAME_LABEL: name}


def _prometheus_pods(deployed: Deployed) -> Iterator[tuple[str, Pod]]:
    """The pods the Prometheus Operator makes of each Prometheus resource (no render holds them)."""
    for prometheus in deployed.of_kind("Prometheus"):
        extra = ((prometheus.get("spec") or {}).get("podMetadata") or {}).get("labels") or {}
        labels = {**extra, PROMETHEUS_POD_LABELS[0]: "prometheus", PROMETHEUS_POD_LABELS[1]: _meta(prometheus, "name")}
        yield f"Prometheus {_meta(prometheus, 'namespace')}/{_meta(prometheus, 'name')}", (
            str(_meta(prometheus, "namespace")), labels)


def _port_number(engine: dict[str, Any], port: Any) -> int | None:
    """A container port of the engine by number or name (a number the program registers reads back as a float)."""
    if isinstance(port, int | float) and not isinstance(port, bool):
        return int(port)
    for container in _containers(engine):
        for declared in container.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
    return int(port) if str(port).isdigit() else None


def _admits_port(engine: dict[str, Any], rule: dict[str, Any], port: int) -> bool:
    ports = rule.get("ports") or []
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        if "port" not in entry:
            return True
        first = _port_number(engine, entry["port"])
        if first is not None and first <= port <= int(entry.get("endPort", first)):
            return True
    return False


def _admits_peer(deployed: Deployed, policy: dict[str, Any], peer: dict[str, Any], source: Pod) -> bool:
    namespace, labels = source
    if "ipBlock" in peer:
        return True  # pod addresses may lie in any block
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], _namespace_labels(deployed, namespace)):
            return False
    elif namespace != _meta(policy, "namespace"):
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], labels)


def _ingress_policies(deployed: Deployed, engine: dict[str, Any]) -> list[dict[str, Any]]:
    """The NetworkPolicies that restrict ingress to the engine's pods (policyTypes defaults to Ingress)."""
    labels = _template_labels(engine)
    return [p for p in deployed.of_kind("NetworkPolicy")
            if _meta(p, "namespace") == _meta(engine, "namespace")
            and "Ingress" in ((p.get("spec") or {}).get("policyTypes") or ["Ingress"])
            and selects((p.get("spec") or {}).get("podSelector") or {}, labels)]


def admits(deployed: Deployed, engine: dict[str, Any], source: Pod, port: int) -> bool:
    """Whether a pod may open a TCP connection to the engine's pods on the port, as NetworkPolicy rules say."""
    policies = _ingress_policies(deployed, engine)
    if not policies:
        return True
    for policy in policies:
        for rule in (policy.get("spec") or {}).get("ingress") or []:
            peers = rule.get("from") or []
            if _admits_port(engine, rule, port) and (not peers or any(
                    _admits_peer(deployed, policy, p, source) for p in peers)):
                return True
    return False


def _service_target(deployed: Deployed, engine: dict[str, Any], port_of: str) -> Iterator[tuple[str, int]]:
    """(Service name, container port) of each engine Service port named `port_of` (a ServiceMonitor's endpoint port)
    or numbered so (the gateway's api_base port)."""
    labels = _template_labels(engine)
    for service in deployed.of_kind("Service"):
        selector = (service.get("spec") or {}).get("selector")
        if _meta(service, "namespace") != _meta(engine, "namespace") or not selector or \
                not selects({"matchLabels": selector}, labels):
            continue
        for declared in (service.get("spec") or {}).get("ports") or []:
            if port_of in (declared.get("name"), str(declared.get("port"))):
                target = _port_number(engine, declared.get("targetPort", declared.get("port")))
                if target is not None:
                    yield str(_meta(service, "name")), target


def _scraped_ports(deployed: Deployed, engine: dict[str, Any]) -> set[int]:
    """The engine's container ports a ServiceMonitor in its namespace scrapes through a Service that selects it."""
    ports: set[int] = set()
    for monitor in deployed.of_kind("ServiceMonitor"):
        if _meta(monitor, "namespace") != _meta(engine, "namespace"):
            continue
        for endpoint in (monitor.get("spec") or {}).get("endpoints") or []:
            ports |= {port for _, port in _service_target(deployed, engine, str(endpoint.get("port")))}
    return ports


def _api_ports(deployed: Deployed, engine: dict[str, Any]) -> set[int]:
    """The container ports the engine's Services forward from their ports (the gateway calls a Service port)."""
    ports: set[int] = set()
    for service in deployed.of_kind("Service"):
        for declared in (service.get("spec") or {}).get("ports") or []:
            if declared.get("name") not in ("zmq-port", "ucx-port"):  # vllm-stack's KV-transfer ports, no API
                ports |= {p for _, p in _service_target(deployed, engine, str(declared.get("port")))}
    return ports


def engines_admit_only_the_gateway(deployed: Deployed) -> list[str]:
    engines = [d for d in deployed.of_kind("Deployment") if _is_engine(d)]
    gateways = [d for d in deployed.of_kind("Deployment") if _is_gateway(d)]
    teams = sorted({ANY_TEAM, *(str(_meta(n, "name")) for n in deployed.of_kind("Namespace")
                                if TEAM_LABEL in (_meta(n, "labels") or {}))})
    prometheuses = list(_prometheus_pods(deployed))
    problems = []
    for engine in engines:
        what = f"Deployment {_meta(engine, 'namespace')}/{_meta(engine, 'name')}"
        if not _ingress_policies(deployed, engine):
            problems.append(f"{what}: no NetworkPolicy restricts ingress to its pods: any pod of any namespace calls "
                            "the model server with no gateway key, budget, model allow-list or metering")
            continue
        api = sorted(_api_ports(deployed, engine))
        for gateway in gateways:
            source = (str(_meta(gateway, "namespace")), _template_labels(gateway))
            for port in api:
                if not admits(deployed, engine, source, port):
                    problems.append(f"{what}: the gateway's pods (Deployment {source[0]}/{_meta(gateway, 'name')}) "
                                    f"are not admitted on port {port}: every request for the model fails")
        scraped = sorted(_scraped_ports(deployed, engine))
        for name, source in prometheuses:
            for port in scraped:
                if not admits(deployed, engine, source, port):
                    problems.append(f"{what}: {name}'s pods are not admitted on port {port}, where its ServiceMonitor "
                                    "scrapes it: its metrics, and the autoscaler's demand, are lost")
        allowed = [(f"Deployment {_meta(g, 'namespace')}/{_meta(g, 'name')}",
                    (str(_meta(g, "namespace")), _template_labels(g))) for g in gateways] + prometheuses
        for obj in deployed.objects:
            if obj in gateways:
                continue
            for template in pod_templates(obj):
                source = (str(_meta(obj, "namespace") or "default"), dict((template.get("metadata") or {}).get(
                    "labels") or {}))
                if source in [pod for _, pod in allowed]:
                    continue
                admitted = [p for p in api if admits(deployed, engine, source, p)]
                if admitted:
                    problems.append(f"{what}: the pods of {obj.get('kind')} {source[0]}/{_meta(obj, 'name')} are "
                                    f"admitted on port {admitted[0]}: only the gateway may call a model server")
        for team in teams:
            for like, labels in [*((f"labelled as {w}'s pods", pod[1]) for w, pod in allowed), ("unlabelled", {})]:
                admitted = [p for p in api if admits(deployed, engine, (team, labels), p)]
                if admitted:
                    problems.append(f"{what}: a pod in team namespace {team} {like} is admitted on port {admitted[0]}: "
                                    "a team calls the model server past the gateway")
                    break
    return problems
