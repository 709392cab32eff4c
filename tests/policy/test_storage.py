"""Storage tiers: the Tiers component exists with NVMe, hot NFS and cold Ceph tiers."""

from typing import Any

import pytest
import storage
from common import STORAGE_TIERS_TYPE
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from tests.policy.builders import changed, judge_stack, resource

TIERS: dict[str, Any] = {
    "nvme": {"storage_class": "local-nvme"},
    "nfs_hot": {"servers": ["nfs-hot-01"], "storage_classes": ["nfs-hot-nlp-foundation"]},
    "ceph_cold": {"enabled": True},
}
T = "Tiers prod-storage"


@pytest.mark.parametrize(("tiers", "expected"), [
    pytest.param(None, ["no storage tiers: the stack registers no gpucluster:storage:Tiers component"],
                 id="should deny a stack without storage tiers"),
    pytest.param(TIERS, [], id="should admit all three tiers"),
    pytest.param(changed(TIERS, ceph_cold__enabled=False), [f"{T}: ceph_cold.enabled is false; checkpoints have no "
                                                            "cold tier"], id="should deny a disabled cold tier"),
    pytest.param(changed(TIERS, nfs_hot__servers=[]),
                 [f"{T}: nfs_hot.servers must name at least one NFS server, got []"],
                 id="should deny a hot tier without servers"),
    pytest.param(changed(TIERS, nfs_hot__storage_classes=[]), [],
                 id="should admit a hot tier before any team has its storage class"),
    pytest.param(changed(TIERS, nfs_hot__storage_classes=[""]),
                 [f"{T}: nfs_hot.storage_classes must be storage class names, got ['']"],
                 id="should deny an empty storage class name"),
    pytest.param(changed(TIERS, nvme={}), [f"{T}: nvme.storage_class is missing"],
                 id="should deny a missing NVMe tier"),
    pytest.param(changed(TIERS, nvme__storage_class=UNKNOWN_STRING_VALUE),
                 [f"{T}: nvme.storage_class is unknown at preview; this policy fails closed"],
                 id="should deny an NVMe storage class unknown at preview"),
])
def test_storage_tiers_present(tiers: dict[str, Any] | None, expected: list[str]) -> None:
    present = [resource(STORAGE_TIERS_TYPE, "prod-storage", tiers)] if tiers is not None else []
    assert judge_stack(storage.STORAGE_TIERS_PRESENT, *present).messages == expected
