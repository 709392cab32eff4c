"""A Kubernetes API server double that records what a real kubectl asks of it: discovery for the kinds the
controllers name (nodes, pods with their eviction, DaemonSets, KEDA's ScaledObjects), cordoned nodes, and on every
node one ReplicaSet pod and one DaemonSet pod, which an eviction removes. Served on 127.0.0.1."""

import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from tests.harness.http_double import JsonHandler, Served
from tests.harness.kubectl_access import Request


def _resource(name: str, kind: str, namespaced: bool, **extra: str) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["get", "list", "patch", "create"],
        **extra,
    }


def _group(name: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group("apps", "v1"), _group("policy", "v1"), _group("keda.sh", "v1alpha1")],
    },
    # drain evicts only where v1's pods/eviction names its group and version (kubectl's CheckEvictionSupport).
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            _resource("nodes", "Node", False),
            _resource("pods", "Pod", True),
            _resource("pods/eviction", "Eviction", True, group="policy", version="v1"),
        ],
    },
    "/apis/apps/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [_resource("daemonsets", "DaemonSet", True)],
    },
    "/apis/policy/v1": {"kind": "APIResourceList", "groupVersion": "policy/v1", "resources": []},
    "/apis/keda.sh/v1alpha1": {
        "kind": "APIResourceList",
        "groupVersion": "keda.sh/v1alpha1",
        "resources": [_resource("scaledobjects", "ScaledObject", True)],
    },
}


def _pod(name: str, namespace: str, owner: str, node: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": name,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner, "name": owner.lower(), "uid": owner, "controller": True}
            ],
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


class Recording(JsonHandler):
    requests: list[Request]
    evicted: set[str]

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._serve()

    def do_PATCH(self) -> None:  # noqa: N802 (http.server's names)
        self._serve()

    def do_POST(self) -> None:  # noqa: N802 (http.server's names)
        self._serve()

    def _serve(self) -> None:
        self.read_body()
        path = urlsplit(self.path).path
        if path in DISCOVERY:
            return self.answer(200, DISCOVERY[path])
        parts = path.strip("/").split("/")
        if parts[0] != "api" and parts[0] != "apis" or path.startswith("/openapi"):
            return self.answer(404, {})
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = rest[1] if rest[0] == "namespaces" else None
        rest = rest[2:] if namespace else rest
        resource, name = rest[0], rest[1] if len(rest) > 1 else None
        if len(rest) == 3:
            resource = f"{resource}/{rest[2]}"
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create"}[self.command]
        self.requests.append(Request(verb, group, resource, namespace, name))
        self.answer(*self._object(resource, namespace, name))

    def _object(self, resource: str, namespace: str | None, name: str | None) -> tuple[int, dict[str, Any]]:
        if resource == "pods/eviction":
            self.evicted.add(str(name))
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if resource == "pods":
            pods = [
                p
                for p in (
                    _pod("server", "inference", "ReplicaSet", "any"),
                    _pod("agent", "kube-system", "DaemonSet", "any"),
                )
                if p["metadata"]["name"] not in self.evicted
            ]
            if name is None:
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}
            found = [p for p in pods if p["metadata"]["name"] == name]
            return (
                (200, found[0])
                if found
                else (
                    404,
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404},
                )
            )
        if resource == "nodes" and name is None:
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}
        kind, api = {
            "nodes": ("Node", "v1"),
            "daemonsets": ("DaemonSet", "apps/v1"),
            "scaledobjects": ("ScaledObject", "keda.sh/v1alpha1"),
        }[resource]
        # Every node cordoned, so that uncordon patches (cordon and drain then find it cordoned already).
        spec = {"unschedulable": True} if resource == "nodes" else {}
        metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
        return 200, {"kind": kind, "apiVersion": api, "metadata": metadata, "spec": spec}


@contextmanager
def recording_api(home: Path) -> Iterator[Any]:
    """Runs `sent(args)`: the requests a real kubectl (on PATH) sends to the double for `kubectl <args>`."""
    handler = cast(type[Recording], type("Handler", (Recording,), {"requests": [], "evicted": set()}))
    served = Served(handler)
    config = home / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": served.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(home)}

    def sent(args: Sequence[str]) -> list[Request]:
        handler.requests.clear()
        handler.evicted.clear()
        subprocess.run(list(args), env=env, capture_output=True, timeout=30, check=True)
        return list(handler.requests)

    try:
        yield sent
    finally:
        served.stop()
