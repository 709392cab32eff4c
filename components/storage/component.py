"""Storage tiers: local NVMe for weights and LoRA, NFS hot for recent checkpoints, Ceph cold for the rest.

Never one NFS for everything: each team's share lives on one of several NFS servers, checkpoints
older than the newest few move to CephFS, and model weights load from local NVMe. The plans are in
components/storage/tiers.py; docs/storage.md explains the choices.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import (
    CSI_DRIVER_NFS,
    LOCAL_STATIC_PROVISIONER,
    ROOK_CEPH,
    ROOK_CEPH_CLUSTER,
)
from components.k8s import fields, release
from components.site.mirror import Mirror
from components.site.site import Site
from components.site.wellknown import CEPH_NAMESPACE, COLD_TIER_TYPE, STORAGE_TYPE
from components.storage.tiers import (
    NAMESPACE,
    ceph_cluster_values,
    cold_claim,
    local_provisioner_values,
    mover_cronjob,
    nvme_storage_class,
    prefetch_daemonset,
    team_isolation_binding,
    team_isolation_policy,
    tier_facts,
)
from hosts import CHECKPOINT_MOVER


class ColdTier(pulumi.ComponentResource):
    """Ceph's operator, then the cluster with its CephFS and the cold StorageClass. Its own component because the
    monitoring stack's volumes are of that class: it comes before monitoring, the rest of the storage after."""

    def __init__(self, name: str, tiers_name: str, mirror: Mirror, opts: pulumi.ResourceOptions) -> None:
        """tiers_name: the StorageTiers' name, under which these resources were first created; mirror: the site's."""
        super().__init__(COLD_TIER_TYPE, name, None, opts)
        # Created under the StorageTiers component until the cold tier came first: the aliases keep their URNs, so
        # an existing stack adopts them instead of uninstalling the Ceph cluster and installing it again.
        tiers = pulumi.create_urn(tiers_name, STORAGE_TYPE, parent=opts.parent)

        def moved(role: str) -> list[pulumi.Alias]:
            return [pulumi.Alias(name=f"{tiers_name}-{role}", parent=tiers)]

        ceph_ns = kubernetes.core.v1.Namespace(
            f"{name}-ceph-namespace", metadata={"name": CEPH_NAMESPACE},
            opts=pulumi.ResourceOptions(parent=self, aliases=moved("ceph-namespace")))
        operator = release(f"{name}-ceph-operator", ROOK_CEPH, CEPH_NAMESPACE, {}, self, [ceph_ns],
                           mirror=mirror, aliases=moved("ceph-operator"))
        self.cluster = release(f"{name}-ceph-cluster", ROOK_CEPH_CLUSTER, CEPH_NAMESPACE, ceph_cluster_values(), self,
                               [operator], mirror=mirror, aliases=moved("ceph-cluster"))
        """The release that creates the cold StorageClass: what a claim of that class waits for."""
        self.register_outputs({})


class StorageTiers(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, cold: ColdTier, opts: pulumi.ResourceOptions) -> None:
        facts = tier_facts(site)
        super().__init__(STORAGE_TYPE, name, facts, opts)

        def after(*resources: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(resources))

        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", metadata={"name": NAMESPACE}, opts=after())
        # NVMe: the provisioner turns each mounted disk into a PV of our StorageClass.
        kubernetes.storage.v1.StorageClass(f"{name}-nvme-class", **fields(nvme_storage_class()), opts=after())
        release(f"{name}-nvme-provisioner", LOCAL_STATIC_PROVISIONER, NAMESPACE, local_provisioner_values(site),
                self, [ns], mirror=site.mirror)
        kubernetes.apps.v1.DaemonSet(f"{name}-model-prefetch", **fields(prefetch_daemonset(site)), opts=after(ns))
        # NFS hot: the CSI driver; each team's StorageClass belongs to its Team (components.teams.component), and
        # the API server keeps every team to its own.
        nfs = release(f"{name}-nfs-driver", CSI_DRIVER_NFS, "kube-system", {}, self, [], mirror=site.mirror)
        isolation = kubernetes.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-team-isolation", **fields(team_isolation_policy(site)), opts=after())
        kubernetes.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-team-isolation-binding", **fields(team_isolation_binding()), opts=after(isolation))
        # Ceph cold (ColdTier): the archive claim waits for the release that creates its StorageClass.
        claim = kubernetes.core.v1.PersistentVolumeClaim(f"{name}-cold-claim", **fields(cold_claim(site)),
                                                         opts=after(ns, cold.cluster))
        mover = kubernetes.core.v1.ConfigMap(
            f"{name}-checkpoint-mover", metadata={"name": "checkpoint-mover", "namespace": NAMESPACE},
            data={"checkpoint_tiering.py": CHECKPOINT_MOVER.read_text()}, opts=after(ns),
        )
        for index, server in enumerate(site.storage.nfs_hot.servers):
            kubernetes.batch.v1.CronJob(f"{name}-mover-{index}", **fields(mover_cronjob(site, server, index)),
                                        opts=after(claim, mover, nfs))
        self.register_outputs(facts)
