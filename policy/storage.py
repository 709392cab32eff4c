"""Storage tiering: NVMe scratch, a hot NFS tier and a cold Ceph tier exist before checkpoints are written.

Judged on the `gpucluster:storage:Tiers` component's registered outputs (the contract is in docs/policy.md).
"""

from common import STORAGE_TIERS_TYPE, ViolationError, describe, flag, items, of_type, report_each, text
from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy


def check_tiers(tiers: PolicyResource) -> None:
    text(tiers, "nvme.storage_class")
    servers = items(tiers, "nfs_hot.servers")
    if not servers or not all(isinstance(s, str) and s for s in servers):
        raise ViolationError(f"{describe(tiers)}: nfs_hot.servers must name at least one NFS server, got {servers!r}")
    # A storage class per onboarded team: none before the first team (the first stage onboards none).
    classes = items(tiers, "nfs_hot.storage_classes")
    if not all(isinstance(c, str) and c for c in classes):
        raise ViolationError(f"{describe(tiers)}: nfs_hot.storage_classes must be storage class names, got {classes!r}")
    if not flag(tiers, "ceph_cold.enabled"):
        raise ViolationError(f"{describe(tiers)}: ceph_cold.enabled is false; checkpoints have no cold tier")


def validate_tiers(args: StackValidationArgs, report: ReportViolation) -> None:
    tiers = of_type(args, STORAGE_TIERS_TYPE)
    if not tiers:
        report(f"no storage tiers: the stack registers no {STORAGE_TIERS_TYPE} component", None)
    report_each(tiers, report, check_tiers)


STORAGE_TIERS_PRESENT = StackValidationPolicy(
    name="storage-tiers-present",
    description="The NVMe, hot NFS and cold Ceph storage tiers are all provisioned.",
    validate=validate_tiers,
)

POLICIES = [STORAGE_TIERS_PRESENT]
