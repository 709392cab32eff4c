"""Storage tiers: local NVMe for weights and LoRA, NFS hot for recent checkpoints, Ceph cold for the rest.

Never one NFS for everything: each team's share lives on one of several NFS servers, checkpoints
older than the newest few move to CephFS, and model weights load from local NVMe. Value names
follow each chart's values.yaml: sig-storage-local-static-provisioner (classes[]), csi-driver-nfs
(StorageClass parameters server/share), rook-ceph-cluster (cephFileSystems[], cephBlockPools[],
cephObjectStores[]). docs/storage.md explains the choices.
"""

from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import (
    BUSYBOX_IMAGE,
    CSI_DRIVER_NFS,
    LOCAL_STATIC_PROVISIONER,
    PYTHON_IMAGE,
    ROOK_CEPH,
    ROOK_CEPH_CLUSTER,
)
from components.k8s import fields, release
from components.spec.site import Site
from components.spec.wellknown import COLD_FILESYSTEM, MOVER_LOCK, POOL_TAINT, STORAGE_TYPE, UNVALIDATED_TAINT
from components.teams.plan import team_shares
from hosts import CHECKPOINT_MOVER

NAMESPACE = "storage"
CEPH_NAMESPACE = "rook-ceph"
NVME_CLASS = "nvme-local"
COLD_CLASS = "ceph-cold"
COLD_CLAIM = "checkpoint-archive"
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
"""node-exporter's textfile collector directory on each node: the mover's metrics land here."""


def nvme_storage_class() -> dict[str, Any]:
    # Local volumes cannot move: bind only once the pod's node is chosen (WaitForFirstConsumer).
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": NVME_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def local_provisioner_values(site: Site) -> dict[str, Any]:
    disks = site.storage.nvme.disks_path
    # The StorageClass is ours (above), so the chart must not create a second one.
    return {"classes": [{"name": NVME_CLASS, "hostDir": disks, "mountDir": disks, "volumeMode": "Filesystem",
                         "fsType": "ext4", "storageClass": False}]}


def ceph_cluster_values() -> dict[str, Any]:
    # CephFS, not an object store: the mover and Slurm nodes use plain POSIX paths on every tier.
    return {
        "operatorNamespace": CEPH_NAMESPACE,
        "cephBlockPools": [],
        "cephObjectStores": [],
        "cephFileSystems": [{
            "name": COLD_FILESYSTEM,
            "spec": {
                "metadataPool": {"replicated": {"size": 3}},
                "dataPools": [{"name": "data0", "replicated": {"size": 3}}],
                "metadataServer": {"activeCount": 1, "activeStandby": True},
            },
            "storageClass": {"enabled": True, "name": COLD_CLASS, "reclaimPolicy": "Retain"},
        }],
    }


GPU_NODE_TOLERATIONS = [
    {"key": UNVALIDATED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    {"key": POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"},
]


def prefetch_daemonset(site: Site) -> dict[str, Any]:
    """Fills every GPU node's NVMe cache from the model registry before first use; cp -ru copies only what
    is missing or newer, so a restart after a new model is added copies just that model."""
    nvme, nfs = site.storage.nvme, site.storage.nfs_hot
    copy = " && ".join(f"mkdir -p /cache/{m} && cp -ru /models/{m}/. /cache/{m}/" for m in nvme.prefetch) or "true"
    labels = {"app.kubernetes.io/name": "model-cache-prefetch"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "model-cache-prefetch", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": GPU_NODE_TOLERATIONS,
                    "initContainers": [{
                        "name": "prefetch", "image": BUSYBOX_IMAGE,
                        "command": ["sh", "-c", f"{copy} && touch /cache/.prefetched"],
                        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True},
                                         {"name": "cache", "mountPath": "/cache"}],
                    }],
                    # The pod stays up so the DaemonSet reports the cache as ready on every node.
                    "containers": [{"name": "hold", "image": BUSYBOX_IMAGE, "command": ["sleep", "2147483647"],
                                    "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}],
                    "volumes": [
                        {"name": "models",
                         "nfs": {"server": nfs.servers[0], "path": nfs.models_export, "readOnly": True}},
                        {"name": "cache", "hostPath": {"path": nvme.cache_path, "type": "DirectoryOrCreate"}},
                    ],
                },
            },
        },
    }


def mover_cronjob(site: Site, server: str, index: int) -> dict[str, Any]:
    """One mover per NFS server: its teams' run directories, to the CephFS archive."""
    nfs, cold = site.storage.nfs_hot, site.storage.ceph_cold
    # The same lock the Slurm epilog's mover takes on this export, so the two never sweep one server at once.
    args = ["flock", "-n", f"/hot/{MOVER_LOCK}",
            "python3", "/mover/checkpoint_tiering.py", "--hot", "/hot", "--cold", "/cold",
            "--keep", str(nfs.keep_checkpoints), "--archive-after-days", str(cold.archive_after_days),
            "--hot-fill-threshold-pct", f"{nfs.fill_alert_pct:g}",
            "--metrics-file", f"/metrics/checkpoint-tiering-{index}.prom"]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": f"checkpoint-mover-{index}", "namespace": NAMESPACE},
        "spec": {
            "schedule": cold.mover_schedule,
            "concurrencyPolicy": "Forbid",  # the mover is idempotent, but two at once would race on partials
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "mover", "image": PYTHON_IMAGE, "command": args,
                    "volumeMounts": [{"name": "mover", "mountPath": "/mover", "readOnly": True},
                                     {"name": "hot", "mountPath": "/hot"}, {"name": "cold", "mountPath": "/cold"},
                                     {"name": "metrics", "mountPath": "/metrics"}],
                }],
                "volumes": [
                    {"name": "mover", "configMap": {"name": "checkpoint-mover"}},
                    {"name": "hot", "nfs": {"server": server, "path": nfs.export_root}},
                    {"name": "cold", "persistentVolumeClaim": {"claimName": COLD_CLAIM}},
                    {"name": "metrics", "hostPath": {"path": TEXTFILE_DIR, "type": "DirectoryOrCreate"}},
                ],
            }}}},
        },
    }


def cold_claim(site: Site) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": COLD_CLAIM, "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": COLD_CLASS,
                 "resources": {"requests": {"storage": f"{site.storage.ceph_cold.capacity_tib:g}Ti"}}},
    }


def tier_facts(site: Site) -> dict[str, Any]:
    """What the policy pack and `gpuctl plan` read (docs/policy.md has the contract)."""
    storage = site.storage
    return {
        "nvme": {"storage_class": NVME_CLASS, "cache_path": storage.nvme.cache_path,
                 "cache_gib": storage.nvme.cache_gib, "prefetch": list(storage.nvme.prefetch)},
        "nfs_hot": {"storage_classes": [s.storage_class for s in team_shares(site)], "servers": storage.nfs_hot.servers,
                    "capacity_tib": storage.nfs_hot.capacity_tib, "keep_checkpoints": storage.nfs_hot.keep_checkpoints},
        "ceph_cold": {"enabled": True, "storage_class": COLD_CLASS, "capacity_tib": storage.ceph_cold.capacity_tib,
                      "archive_after_days": storage.ceph_cold.archive_after_days,
                      "mover_schedule": storage.ceph_cold.mover_schedule},
    }


class StorageTiers(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        facts = tier_facts(site)
        super().__init__(STORAGE_TYPE, name, facts, opts)

        def after(*resources: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=list(resources))

        ns = kubernetes.core.v1.Namespace(f"{name}-namespace", metadata={"name": NAMESPACE}, opts=after())
        ceph_ns = kubernetes.core.v1.Namespace(f"{name}-ceph-namespace", metadata={"name": CEPH_NAMESPACE},
                                               opts=after())
        # NVMe: the provisioner turns each mounted disk into a PV of our StorageClass.
        kubernetes.storage.v1.StorageClass(f"{name}-nvme-class", **fields(nvme_storage_class()), opts=after())
        release(f"{name}-nvme-provisioner", LOCAL_STATIC_PROVISIONER, NAMESPACE, local_provisioner_values(site),
                self, [ns])
        kubernetes.apps.v1.DaemonSet(f"{name}-model-prefetch", **fields(prefetch_daemonset(site)), opts=after(ns))
        # NFS hot: the CSI driver; each team's StorageClass belongs to its Team (components.teams.component).
        nfs = release(f"{name}-nfs-driver", CSI_DRIVER_NFS, "kube-system", {}, self, [])
        # Ceph cold: the operator, then the cluster with its CephFS and StorageClass, then the archive claim.
        operator = release(f"{name}-ceph-operator", ROOK_CEPH, CEPH_NAMESPACE, {}, self, [ceph_ns])
        ceph = release(f"{name}-ceph-cluster", ROOK_CEPH_CLUSTER, CEPH_NAMESPACE, ceph_cluster_values(), self,
                       [operator])
        claim = kubernetes.core.v1.PersistentVolumeClaim(f"{name}-cold-claim", **fields(cold_claim(site)),
                                                         opts=after(ns, ceph))
        mover = kubernetes.core.v1.ConfigMap(
            f"{name}-checkpoint-mover", metadata={"name": "checkpoint-mover", "namespace": NAMESPACE},
            data={"checkpoint_tiering.py": CHECKPOINT_MOVER.read_text()}, opts=after(ns),
        )
        for index, server in enumerate(site.storage.nfs_hot.servers):
            kubernetes.batch.v1.CronJob(f"{name}-mover-{index}", **fields(mover_cronjob(site, server, index)),
                                        opts=after(claim, mover, nfs))
        self.register_outputs(facts)
