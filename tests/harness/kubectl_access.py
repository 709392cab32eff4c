"""Whether a kubectl command line is allowed to a user by RBAC objects: the API requests kubectl makes for it, each
judged as Kubernetes' RBAC authorizer judges it (Roles and ClusterRoles, their bindings, apiGroups, resources with
subresources, verbs, resourceNames; `*` anywhere)."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RESOURCES = {
    "node": ("", "nodes"),
    "nodes": ("", "nodes"),
    "pod": ("", "pods"),
    "pods": ("", "pods"),
    "scaledobject": ("keda.sh", "scaledobjects"),
    "scaledobjects": ("keda.sh", "scaledobjects"),
}
"""kubectl's names of the kinds the controllers name -> (API group, resource)."""
CLUSTER_SCOPED = {"nodes"}


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    namespace: str | None
    """None: cluster-scoped, or any namespace (only a ClusterRoleBinding grants it)."""
    name: str | None
    """None: no one object (a list), or one kubectl cannot know beforehand (only a rule without resourceNames)."""


def _namespace(args: Sequence[str], resource: str) -> str | None:
    if resource in CLUSTER_SCOPED or "--all-namespaces" in args or "-A" in args:
        return None
    for flag in ("--namespace", "-n"):
        if flag in args:
            return args[args.index(flag) + 1]
    raise ValueError(f"{' '.join(args)}: no namespace; the kubeconfig's default is no fact a test can judge")


def requests(args: Sequence[str]) -> list[Request]:
    """The API requests `kubectl <args>` makes, as kubectl 1.32 sent them to a recording API server: label,
    annotate, cordon, uncordon and patch GET the object, then PATCH it (uncordon of a schedulable node only GETs);
    get without a name LISTs; drain cordons, LISTs the node's pods in every namespace, GETs the DaemonSet owning a pod
    (--ignore-daemonsets), POSTs each pod's eviction and GETs the pod until it is gone. A subcommand not known here
    raises: its requests must be added before it is judged."""
    verb = args[1]
    if verb in ("cordon", "uncordon"):
        return [Request("get", "", "nodes", None, args[2]), Request("patch", "", "nodes", None, args[2])]
    if verb in ("label", "annotate", "patch"):
        group, resource = RESOURCES[args[2]]
        return [Request(v, group, resource, _namespace(args, resource), args[3]) for v in ("get", "patch")]
    if verb == "get":
        group, resource = RESOURCES[args[2]]
        named = len(args) > 3 and not args[3].startswith("-")
        return [
            Request("get" if named else "list", group, resource, _namespace(args, resource), args[3] if named else None)
        ]
    if verb == "drain":
        node = args[2]
        return [
            Request("get", "", "nodes", None, node),
            Request("patch", "", "nodes", None, node),
            Request("list", "", "pods", None, None),
            Request("get", "apps", "daemonsets", None, None),
            Request("create", "", "pods/eviction", None, None),
            Request("get", "", "pods", None, None),
        ]
    raise ValueError(f"kubectl {verb}: its API requests are not known here (tests/harness/kubectl_access.py)")


def _matches(rule: Mapping[str, Any], request: Request) -> bool:
    def has(key: str, value: str) -> bool:
        return "*" in rule.get(key, []) or value in rule.get(key, [])

    names = rule.get("resourceNames")
    return (
        has("apiGroups", request.group)
        and has("resources", request.resource)
        and has("verbs", request.verb)
        and (not names or request.name in names)
    )


@dataclass(frozen=True)
class Access:
    """The RBAC objects of a rendered stack, as the authorizer reads them."""

    objects: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, manifests: Iterable[Mapping[str, Any]]) -> "Access":
        return cls(tuple(m for m in manifests if m.get("apiVersion") == "rbac.authorization.k8s.io/v1"))

    def _role(self, kind: str, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        return next(
            (
                m
                for m in self.objects
                if m["kind"] == kind and m["metadata"]["name"] == name and m["metadata"].get("namespace") == namespace
            ),
            None,
        )

    def allows(self, user: str, request: Request) -> bool:
        for binding in self.objects:
            if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not any(
                s.get("kind") == "User" and s.get("name") == user for s in binding.get("subjects", [])
            ):
                continue
            where = binding["metadata"].get("namespace")
            # A RoleBinding grants in its own namespace only, whichever role it names.
            if binding["kind"] == "RoleBinding" and request.namespace != where:
                continue
            ref = binding["roleRef"]
            role = self._role(ref["kind"], ref["name"], where if ref["kind"] == "Role" else None)
            if role and any(_matches(rule, request) for rule in role.get("rules", [])):
                return True
        return False

    def refused(self, user: str, calls: Iterable[Sequence[str]]) -> list[tuple[str, Request]]:
        """Each call's requests the user is not allowed, with the call."""
        return [
            (" ".join(call), request) for call in calls for request in requests(call) if not self.allows(user, request)
        ]
