"""One Team per onboarded team: its namespace, GPU quotas, Kueue ClusterQueue and LocalQueue, NFS StorageClass.

Its Slurm account is made by the Slurm accounting commands, its dashboards and alert route by the monitoring
stack; the Team records where they are (outputs), it does not make them twice. Names and inputs depend on the
team and on site-wide facts no stage changes, so a later stage adds Teams and leaves the earlier ones as they were.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.k8s import custom, fields
from components.site.wellknown import TEAM_TYPE
from components.storage.tiers import nfs_storage_class
from components.teams.plan import (
    TeamPlan,
    namespace_manifest,
    reserved_priority_quota_manifest,
    resource_quota_manifest,
    team_facts,
)


class Team(pulumi.ComponentResource):
    def __init__(self, name: str, plan: TeamPlan, opts: pulumi.ResourceOptions) -> None:
        """opts must depend on the monitoring stack (the team serves traffic) and on the Scheduling and storage
        components (the queues need Kueue's CRDs and flavors, the StorageClass the NFS driver)."""
        facts = team_facts(plan)
        super().__init__(TEAM_TYPE, name, facts, opts)
        self.plan_name = plan.name
        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", **fields(namespace_manifest(plan.name)),
                                          opts=pulumi.ResourceOptions(parent=self))
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        kubernetes.core.v1.ResourceQuota(f"{name}-gpu-quota", **fields(resource_quota_manifest(plan)),
                                         opts=in_namespace)
        if plan.reserved_classes:
            kubernetes.core.v1.ResourceQuota(
                f"{name}-reserved-priority", **fields(reserved_priority_quota_manifest(plan)),
                opts=in_namespace)
        caps = kubernetes.apiextensions.CustomResource(
            f"{name}-cluster-queue", **custom(plan.cluster_queue),
            opts=pulumi.ResourceOptions(parent=self))
        kubernetes.apiextensions.CustomResource(f"{name}-queue", **custom(plan.local_queue),
                                                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, caps]))
        kubernetes.storage.v1.StorageClass(f"{name}-nfs-hot", **fields(nfs_storage_class(plan.share)),
                                           opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs(facts)
