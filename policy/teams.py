"""Teams share GPUs within limits: every team namespace caps what it may hold.

A team namespace is a `kubernetes:core/v1:Namespace` labelled `gpucluster.io/team`. It needs a ResourceQuota on
`requests.nvidia.com/gpu` (the backstop for GPU pods no queue admits) and a Kueue LocalQueue named `default`
(Kueue puts a team job that names no queue there). Each of its LocalQueues submits to a ClusterQueue that admits
only this namespace and limits `nvidia.com/gpu` on every flavor: in a cohort, a borrowing limit; outside one, the
nominal quota is the limit. Judged on resource properties.
"""

from typing import Any

from common import TEAM_LABEL, ViolationError, describe, fact, of_type, text
from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by Kubernetes on every namespace to its name."""
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
QUOTA_TYPE = "kubernetes:core/v1:ResourceQuota"
LOCAL_QUEUE_TYPE = "kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue"
CLUSTER_QUEUE_TYPE = "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue"
DEFAULT_QUEUE = "default"
GPU = "nvidia.com/gpu"
GPU_REQUESTS = f"requests.{GPU}"


def _team_namespaces(args: StackValidationArgs) -> list[tuple[str, PolicyResource]]:
    found = []
    for ns in of_type(args, NAMESPACE_TYPE):
        if TEAM_LABEL in (fact(ns, "metadata").get("labels") or {}):
            found.append((text(ns, "metadata.name"), ns))
    return found


def _in_namespace(args: StackValidationArgs, type_: str, namespace: str) -> list[PolicyResource]:
    return [r for r in of_type(args, type_) if fact(r, "metadata").get("namespace") == namespace]


def _uncapped_flavors(queue: PolicyResource) -> list[str]:
    """Flavors on which the queue's GPUs have no limit."""
    spec: dict[str, Any] = fact(queue, "spec")
    limit = "borrowingLimit" if spec.get("cohort") else "nominalQuota"
    uncapped = []
    for group in spec.get("resourceGroups") or []:
        if GPU not in (group.get("coveredResources") or []):
            continue
        for flavor in group.get("flavors") or []:
            gpu: dict[str, Any] = next((r for r in flavor.get("resources") or [] if r.get("name") == GPU), {})
            value = gpu.get(limit)
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                uncapped.append(str(flavor.get("name")))
    return uncapped


def _admits_only(queue: PolicyResource, namespace: str) -> bool:
    """Whether the ClusterQueue's namespaceSelector pins one namespace: its team label, or its name label."""
    selector = fact(queue, "spec").get("namespaceSelector") or {}
    labels = selector.get("matchLabels") or {}
    return labels.get(TEAM_LABEL) == namespace or labels.get(NAME_LABEL) == namespace


def check_team(args: StackValidationArgs, namespace: str, ns: PolicyResource) -> None:
    quotas = [q for q in _in_namespace(args, QUOTA_TYPE, namespace)
              if GPU_REQUESTS in (fact(q, "spec", {}).get("hard") or {})]
    if not quotas:
        raise ViolationError(f"{describe(ns)}: no ResourceQuota sets hard {GPU_REQUESTS}; GPU pods that no queue "
                             "admits would be unlimited")
    local_queues = _in_namespace(args, LOCAL_QUEUE_TYPE, namespace)
    if not any(fact(q, "metadata").get("name") == DEFAULT_QUEUE for q in local_queues):
        raise ViolationError(f"{describe(ns)}: no Kueue LocalQueue named {DEFAULT_QUEUE}; a team job that names no "
                             "queue would run outside the team's GPU limits")
    for local_queue in local_queues:
        name, target = text(local_queue, "metadata.name"), text(local_queue, "spec.clusterQueue")
        found = [q for q in of_type(args, CLUSTER_QUEUE_TYPE) if fact(q, "metadata").get("name") == target]
        if not found:
            raise ViolationError(f"{describe(ns)}: LocalQueue {name} submits to ClusterQueue {target}, which the "
                                 "stack does not define")
        if not _admits_only(found[0], namespace):
            raise ViolationError(f"ClusterQueue {target} (LocalQueue {name} of team {namespace}) does not admit "
                                 f"only namespace {namespace}, so the team would share its limits; select it by "
                                 f"matchLabels {TEAM_LABEL}: {namespace}")
        uncapped = _uncapped_flavors(found[0])
        if uncapped:
            raise ViolationError(f"ClusterQueue {target} (team {namespace}) puts no limit on {GPU} for flavor "
                                 f"{', '.join(uncapped)}; set a borrowingLimit (nominalQuota outside a cohort)")


def validate_capped(args: StackValidationArgs, report: ReportViolation) -> None:
    try:
        teams = _team_namespaces(args)
    except ViolationError as problem:
        report(str(problem), None)
        return
    if not teams:
        args.not_applicable("no team namespace in the stack")
    for namespace, ns in teams:
        try:
            check_team(args, namespace, ns)
        except ViolationError as problem:
            report(str(problem), ns.urn)


TEAM_GPUS_CAPPED = StackValidationPolicy(
    name="team-gpus-capped",
    description="Every team namespace caps its GPUs: a namespace quota and a default Kueue queue limited per flavor.",
    validate=validate_capped,
)

POLICIES = [TEAM_GPUS_CAPPED]
