"""What the lending and health controllers' kubectl may do, as RBAC: a ClusterRole per controller bound to the user
its kubeconfig authenticates as (lending.kubernetes_user, health.kubernetes_user), and a Role in the inference
namespace for the lent models' replica floor. Each rule is a request their kubectl calls make (runbooks/flex/lending.py,
runbooks/health/nodes.py), no more; tests/components/scheduling/test_controller_access.py holds every call to them.
Pure: manifests only."""

from typing import Any

from components.scheduling.lending_decision import flex_node_gpus
from components.site.site import Site
from components.site.wellknown import INFERENCE_NAMESPACE

FLEX_CONTROLLER = "gpucluster-flex-controller"
HEALTH_CONTROLLER = "gpucluster-health-controller"
REPLICA_FLOOR = "gpucluster-flex-replica-floor"
RBAC = "rbac.authorization.k8s.io/v1"

# kubectl's requests (kubectl 1.32 against a recording API server: label, annotate, cordon, uncordon and patch GET the
# object and PATCH it; drain cordons, LISTs the node's pods, GETs the DaemonSet owning a pod (--ignore-daemonsets),
# POSTs each pod's eviction and GETs the pod until it is gone; `get <kind>` without a name LISTs).
NODES_READ = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
PODS_READ = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
DRAIN = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
]


def _nodes_changed(nodes: list[str]) -> dict[str, Any]:
    """GET and PATCH of these nodes alone (RBAC's resourceNames; a LIST is never limited by them)."""
    return {"apiGroups": [""], "resources": ["nodes"], "resourceNames": nodes, "verbs": ["get", "patch"]}


def _bound(
    kind: str, name: str, user: str, rules: list[dict[str, Any]], namespace: str | None = None
) -> list[dict[str, Any]]:
    """The role and its binding to the user, both named `name` (in `namespace` for a Role)."""
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return [
        {"apiVersion": RBAC, "kind": kind, "metadata": metadata, "rules": rules},
        {
            "apiVersion": RBAC,
            "kind": f"{kind}Binding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]


def flex_controller_access(site: Site) -> list[dict[str, Any]]:
    """Lend (label, uncordon), reclaim (unlabel, drain, uncordon) and status (the lent nodes' list): the flex nodes'."""
    rules = [NODES_READ, _nodes_changed(list(flex_node_gpus(site))), PODS_READ, *DRAIN]
    return _bound("ClusterRole", FLEX_CONTROLLER, site.lending.kubernetes_user, rules)


def health_controller_access(site: Site) -> list[dict[str, Any]]:
    """Read every node and the running pods; cordon, uncordon and annotate the site's GPU nodes."""
    nodes = [n.name for g in site.node_groups for n in g.nodes]
    rules = [NODES_READ, _nodes_changed(nodes), PODS_READ]
    return _bound("ClusterRole", HEALTH_CONTROLLER, site.health.kubernetes_user, rules)


def replica_floor_access(site: Site, scaled_objects: list[str]) -> list[dict[str, Any]]:
    """GET and PATCH of the lent models' ScaledObjects (KEDA's keda.sh group; `kubectl patch` reads the object before
    it patches), by name, in the inference namespace: the lending controller's replica floor. None with no lent
    model: RBAC reads an empty resourceNames as every name."""
    if not scaled_objects:
        return []
    rule = {
        "apiGroups": ["keda.sh"],
        "resources": ["scaledobjects"],
        "resourceNames": scaled_objects,
        "verbs": ["get", "patch"],
    }
    return _bound("Role", REPLICA_FLOOR, site.lending.kubernetes_user, [rule], INFERENCE_NAMESPACE)
