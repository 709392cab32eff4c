"""The storage tiers as the stack deploys them (local NVMe, NFS hot, CephFS cold, the checkpoint mover), rendered
from the site spec, and each team's NFS share: which server, which class, which mount options. Pure: no pulumi.

Value names follow each chart's values.yaml: sig-storage-local-static-provisioner (classes[], tolerations),
csi-driver-nfs (StorageClass parameters server/share), rook-ceph-cluster (cephFileSystems[], cephBlockPools[],
cephObjectStores[]).
"""

import shlex
from dataclasses import dataclass
from typing import Any

from components.charts import (
    BUSYBOX_IMAGE,
    PYTHON_IMAGE,
)
from components.mirror.images import pulled
from components.site.derived import once_per_site
from components.site.site import Site
from components.site.wellknown import (
    CEPH_NAMESPACE,
    COLD_CLASS,
    COLD_FILESYSTEM,
    POOL_TAINT,
    PREFETCHED_MARKER,
    STORAGE_NAMESPACE,
    TEAM_LABEL,
    TEXTFILE_DIR,
    UNVALIDATED_TAINT,
)

NAMESPACE = STORAGE_NAMESPACE


NVME_CLASS = "nvme-local"

NFS_MOUNT_OPTIONS = ["nfsvers=4.1", "hard", "nconnect=8"]
"""nconnect spreads one client's traffic over several TCP connections (nfs(5)); hard never loses a write."""

HOT_CLASS_PREFIX = "nfs-hot-"
"""A team's hot StorageClass is nfs-hot-<team>; the storage isolation policy keys on the prefix."""


@dataclass(frozen=True)
class TeamShare:
    team: str
    server: str
    share: str

    @property
    def storage_class(self) -> str:
        return f"{HOT_CLASS_PREFIX}{self.team}"


def team_shares(site: Site) -> list[TeamShare]:
    """Onboarded teams' shares. Servers are assigned by a team's place in the spec, so onboarding more
    teams never moves an earlier team to another server."""
    nfs, onboarded = site.storage.nfs_hot, {t.name for t in site.teams_onboarded()}
    return [
        TeamShare(team.name, nfs.servers[index % len(nfs.servers)], f"{nfs.export_root}/{team.name}")
        for index, team in enumerate(site.teams) if team.name in onboarded
    ]


def nfs_storage_class(share: TeamShare) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": share.storage_class, "labels": {TEAM_LABEL: share.team}},
        "provisioner": "nfs.csi.k8s.io",
        "parameters": {"server": share.server, "share": share.share},
        "mountOptions": NFS_MOUNT_OPTIONS,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


MOVER_GRACE_S = 600
"""s a mover run past its deadline may take to finish the checkpoint it is copying before it is stopped."""


@once_per_site
def mover_args(site: Site) -> list[str]:
    """The checkpoint mover's settings (hosts/checkpoint_mover.py), the same for the CronJob and the Slurm epilog."""
    nfs, cold = site.storage.nfs_hot, site.storage.ceph_cold
    return ["--keep", str(nfs.keep_checkpoints), "--archive-after-days", str(cold.archive_after_days),
            "--max-checkpoint-gib", str(cold.max_checkpoint_gib), "--max-run-gib", str(cold.max_run_gib),
            "--deadline-s", str(cold.mover_deadline_minutes * 60)]


def mover_stop_after_s(site: Site) -> int:
    """s after which a mover run is stopped (the CronJob's activeDeadlineSeconds, the epilog's timeout)."""
    return site.storage.ceph_cold.mover_deadline_minutes * 60 + MOVER_GRACE_S


COLD_CLAIM = "checkpoint-archive"


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


GPU_NODE_TOLERATIONS = [
    {"key": UNVALIDATED_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    {"key": POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"},
]


def local_provisioner_values(site: Site) -> dict[str, Any]:
    disks = site.storage.nvme.disks_path
    # The StorageClass is ours (above), so the chart must not create a second one.
    return {"classes": [{"name": NVME_CLASS, "hostDir": disks, "mountDir": disks, "volumeMode": "Filesystem",
                         "fsType": "ext4", "storageClass": False}],
            # Every GPU node is tainted (pool, unvalidated until its check passes); the chart tolerates none.
            "tolerations": GPU_NODE_TOLERATIONS}


CEPHFS_CSI_PARAMETERS = {
    "csi.storage.k8s.io/provisioner-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/provisioner-secret-namespace": CEPH_NAMESPACE,
    "csi.storage.k8s.io/controller-expand-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/controller-expand-secret-namespace": CEPH_NAMESPACE,
    "csi.storage.k8s.io/node-stage-secret-name": "rook-csi-cephfs-node",
    "csi.storage.k8s.io/node-stage-secret-namespace": CEPH_NAMESPACE,
}


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
            # Helm replaces the chart's cephFileSystems list whole, so the StorageClass parameters ceph-csi needs to
            # provision and mount (rook-ceph-cluster v1.17.5 values.yaml) are repeated; the secrets are Rook's.
            "storageClass": {"enabled": True, "name": COLD_CLASS, "reclaimPolicy": "Retain", "pool": "data0",
                             "parameters": CEPHFS_CSI_PARAMETERS},
        }],
    }


def prefetched_dirs(site: Site) -> list[str]:
    """Model directories every GPU node's NVMe cache holds: the spec's prefetch list and each served model's revision
    (relative to the registry and to the cache)."""
    return list(dict.fromkeys([*site.storage.nvme.prefetch, *(m.cache_dir for m in site.inference.models)]))


def prefetch_script(site: Site) -> str:
    """Refuses a cache that is no NVMe filesystem of cache_gib (a bare directory on the root disk would fill it), copies
    each directory (cp -ru copies only what is missing or newer, so a restart after a new model copies just that one),
    marks it complete, and fails if the cache outgrew cache_gib."""
    kib = site.storage.nvme.cache_gib * 1024 * 1024
    size = "$(df -Pk /cache | awk 'NR==2 {print $2}')"
    steps = [f'size={size}; [ "$size" -ge {kib} ] || '
             f'{{ echo "/cache is $size KiB, not the {kib} KiB NVMe cache: mount it first" >&2; exit 1; }}']
    for d in prefetched_dirs(site):
        cache, registry = shlex.quote(f"/cache/{d}"), shlex.quote(f"/models/{d}/.")
        steps.append(f"mkdir -p {cache} && cp -ru {registry} {cache}/ && touch {cache}/{PREFETCHED_MARKER}")
    steps.append(f"used=$(du -sk /cache | awk '{{print $1}}'); [ \"$used\" -le {kib} ] || "
                 f"{{ echo \"the cache holds $used KiB, over storage.nvme.cache_gib\" >&2; exit 1; }}")
    return " && ".join(steps) + f" && touch /cache/{PREFETCHED_MARKER}"


def prefetch_daemonset(site: Site) -> dict[str, Any]:
    """Fills every GPU node's NVMe cache from the model registry before first use."""
    nvme, nfs = site.storage.nvme, site.storage.nfs_hot
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
                        "name": "prefetch", "image": pulled(BUSYBOX_IMAGE, site.mirror),
                        "command": ["sh", "-c", prefetch_script(site)],
                        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True},
                                         {"name": "cache", "mountPath": "/cache"}],
                    }],
                    # The pod stays up so the DaemonSet reports the cache as ready on every node.
                    "containers": [{"name": "hold", "image": pulled(BUSYBOX_IMAGE, site.mirror),
                                    "command": ["sleep", "2147483647"],
                                    "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}],
                    "volumes": [
                        {"name": "models",
                         "nfs": {"server": nfs.servers[0], "path": nfs.models_export, "readOnly": True}},
                        # Directory, not DirectoryOrCreate: the cache is the node's NVMe filesystem, mounted there.
                        {"name": "cache", "hostPath": {"path": nvme.cache_path, "type": "Directory"}},
                    ],
                },
            },
        },
    }


def mover_cronjob(site: Site, server: str, index: int) -> dict[str, Any]:
    """One mover per NFS server: its teams' run directories, to the CephFS archive."""
    nfs, cold = site.storage.nfs_hot, site.storage.ceph_cold
    name = f"checkpoint-mover-{index}"
    # The mover takes the export's lock itself (in a folder only root enters, hosts/checkpoint_mover.tier_lock), the
    # one the Slurm epilog's mover takes, so the two never sweep one server at once. A run lands on any node and the
    # file stays on each node it ran on: its metrics carry the mover's name, and the alerts judge each mover by its
    # newest run (components/monitoring/alerts.py, storage_alerts).
    args = ["python3", "/mover/checkpoint_tiering.py", "--hot", "/hot", "--cold", "/cold", *mover_args(site),
            "--hot-fill-threshold-pct", f"{nfs.fill_alert_pct:g}",
            "--metrics-file", f"/metrics/checkpoint-tiering-{index}.prom", "--mover-name", name]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedule": cold.mover_schedule,
            "concurrencyPolicy": "Forbid",  # the mover is idempotent, but two at once would race on partials
            # A run that outlives its deadline is stopped, so a stuck one never blocks the later ones for long; a
            # missed start is skipped, not run late on top of the next.
            "startingDeadlineSeconds": mover_stop_after_s(site),
            "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": mover_stop_after_s(site),
                                     "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "mover", "image": pulled(PYTHON_IMAGE, site.mirror), "command": args,
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


ISOLATION_POLICY = "team-storage-isolation"


def team_isolation_policy(site: Site) -> dict[str, Any]:
    """The API server refuses, in a team's namespace, a claim on another team's hot StorageClass and a pod that
    mounts NFS itself or a host path outside the node's NVMe cache (either would reach other teams' shares, which
    every Slurm node mounts). A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30):
    CEL over the object and its namespace (`namespaceObject`), no webhook to run."""
    cache = site.storage.nvme.cache_path.rstrip("/")
    team = f"namespaceObject.metadata.labels['{TEAM_LABEL}']"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ISOLATION_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["persistentvolumeclaims", "pods"]}]},
            "validations": [
                {"expression": f"object.kind != 'PersistentVolumeClaim' || !has(object.spec.storageClassName) || "
                               f"!object.spec.storageClassName.startsWith('{HOT_CLASS_PREFIX}') || "
                               f"object.spec.storageClassName == '{HOT_CLASS_PREFIX}' + {team}",
                 "message": "a team's claims may use only its own hot StorageClass"},
                {"expression": "object.kind != 'Pod' || !has(object.spec.volumes) || object.spec.volumes.all(v, "
                               f"!has(v.nfs) && (!has(v.hostPath) || (!v.hostPath.path.contains('..') && "
                               f"(v.hostPath.path == '{cache}' || v.hostPath.path.startsWith('{cache}/')))))",
                 "message": f"a team's pods mount storage through their claims: no NFS volume, no host path "
                            f"outside {cache}"},
            ],
        },
    }


def team_isolation_binding() -> dict[str, Any]:
    """Binds the policy, denying, to every namespace a team owns."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": ISOLATION_POLICY},
        "spec": {"policyName": ISOLATION_POLICY, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchExpressions": [
                     {"key": TEAM_LABEL, "operator": "Exists"}]}}},
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
