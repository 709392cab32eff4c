"""One Team per onboarded team: its namespace, GPU quota, Kueue LocalQueue and NFS StorageClass.

Its Slurm account is made by the Slurm accounting commands, its dashboards and alert route by the monitoring
stack; the Team records where they are (outputs), it does not make them twice. Names and inputs depend only on
the team, so a later stage adds Teams and leaves the earlier ones as they were.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.onboarding import (
    TeamPlan,
    local_queue_manifest,
    namespace_manifest,
    nfs_storage_class,
    resource_quota_manifest,
    team_facts,
)

TEAM_TYPE = "gpucluster:teams:Team"


class Team(pulumi.ComponentResource):
    def __init__(self, name: str, plan: TeamPlan, opts: pulumi.ResourceOptions) -> None:
        """opts must depend on the monitoring stack (the team serves traffic) and on the Scheduling and storage
        components (the LocalQueue needs Kueue's CRDs and queue, the StorageClass the NFS driver)."""
        facts = team_facts(plan)
        super().__init__(TEAM_TYPE, name, facts, opts)
        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", metadata=namespace_manifest(plan)["metadata"],
                                          opts=pulumi.ResourceOptions(parent=self))
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        quota = resource_quota_manifest(plan)
        kubernetes.core.v1.ResourceQuota(f"{name}-gpu-quota", metadata=quota["metadata"], spec=quota["spec"],
                                         opts=in_namespace)
        queue = local_queue_manifest(plan)
        kubernetes.apiextensions.CustomResource(f"{name}-queue", api_version=queue["apiVersion"], kind=queue["kind"],
                                                metadata=queue["metadata"], spec=queue["spec"], opts=in_namespace)
        share = nfs_storage_class(plan.share)
        kubernetes.storage.v1.StorageClass(
            f"{name}-nfs-hot", metadata=share["metadata"], provisioner=share["provisioner"],
            parameters=share["parameters"], mount_options=share["mountOptions"],
            reclaim_policy=share["reclaimPolicy"], volume_binding_mode=share["volumeBindingMode"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(facts)
