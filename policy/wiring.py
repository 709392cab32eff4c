"""Wire before traffic: everything that serves traffic depends on the monitoring stack, so GPUs are watched first.

A resource depends on the monitoring stack when one of its dependencies, or one of its ancestors' dependencies,
is the `gpucluster:monitoring:Stack` component or any resource inside it. The Python SDK sends a dependency on a
component as the component's custom descendants, so both forms count.
"""

import re

from common import (
    MONITORING_STACK_TYPE,
    SLURM_TYPE,
    TEAM_LABEL,
    ViolationError,
    describe,
    fact,
    lineage,
    of_type,
)
from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
SERVING_TYPES = frozenset({
    "kubernetes:core/v1:ResourceQuota",
    "kubernetes:scheduling.k8s.io/v1:PriorityClass",
    SLURM_TYPE,
})
KUEUE_QUEUE = re.compile(r"^kubernetes:kueue\.x-k8s\.io/[^:]+:(LocalQueue|ClusterQueue)$")


def serves_traffic(resource: PolicyResource) -> bool:
    if resource.resource_type == NAMESPACE_TYPE:
        labels = fact(resource, "metadata").get("labels") or {}
        return TEAM_LABEL in labels
    return resource.resource_type in SERVING_TYPES or KUEUE_QUEUE.match(resource.resource_type) is not None


def depends_on(resource: PolicyResource, targets: set[str]) -> bool:
    """Whether the resource or an ancestor depends on a target or on anything whose parent chain holds one."""
    return any(
        any(ancestor.urn in targets for ancestor in lineage(dependency))
        for holder in lineage(resource)
        for dependency in holder.dependencies
    )


def validate_wired(args: StackValidationArgs, report: ReportViolation) -> None:
    monitoring = {stack.urn for stack in of_type(args, MONITORING_STACK_TYPE)}
    for resource in args.resources:
        try:
            serving = serves_traffic(resource)
        except ViolationError as problem:
            report(str(problem), resource.urn)
            continue
        if not serving:
            continue
        if not monitoring:
            report(f"{describe(resource)} serves traffic but there is no monitoring stack to depend on", resource.urn)
        elif not depends_on(resource, monitoring):
            report(f"{describe(resource)} serves traffic but neither it nor its parents depend on the monitoring "
                   "stack; add depends_on=[monitoring] to it or to its component", resource.urn)


SERVING_AFTER_MONITORING = StackValidationPolicy(
    name="serving-after-monitoring",
    description="Team namespaces, quotas, Kueue queues, priority classes and Slurm depend on monitoring.",
    validate=validate_wired,
)

POLICIES = [SERVING_AFTER_MONITORING]
