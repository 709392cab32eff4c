"""Storage tiers from the spec: NVMe cache, per-team NFS hot shares, Ceph cold archive and the mover."""

from typing import Any

from components.storage.tiers import (
    COLD_CLASS,
    NVME_CLASS,
    ceph_cluster_values,
    cold_claim,
    mover_cronjob,
    nvme_storage_class,
    prefetch_daemonset,
    tier_facts,
)
from tests.builders import parse, with_changes


def test_should_bind_nvme_volumes_only_with_their_pod() -> None:
    assert nvme_storage_class()["volumeBindingMode"] == "WaitForFirstConsumer"


def test_should_prefetch_every_listed_model_onto_the_nvme_cache(prod: dict[str, Any]) -> None:
    site = parse(prod)
    pod = prefetch_daemonset(site)["spec"]["template"]["spec"]
    script = pod["initContainers"][0]["command"][2]
    for model in site.storage.nvme.prefetch:
        assert f"cp -ru /models/{model}/. /cache/{model}/" in script
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cache"]["hostPath"]["path"] == "/var/lib/gpucluster/model-cache"
    assert volumes["models"]["nfs"] == {"server": "nfs-hot-01.dc1.internal", "path": "/exports/models",
                                        "readOnly": True}


def test_should_run_the_mover_with_the_specs_keep_and_age(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, storage__nfs_hot__keep_checkpoints=5,
                              storage__ceph_cold__archive_after_days=14))
    job = mover_cronjob(site, "nfs-hot-02.dc1.internal", 1)
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][container["command"].index("--keep") + 1] == "5"
    assert container["command"][container["command"].index("--archive-after-days") + 1] == "14"
    assert job["spec"]["schedule"] == "*/30 * * * *"
    # The lock the Slurm epilog's mover takes too: never two sweeps of one NFS server at once.
    assert container["command"][:3] == ["flock", "-n", "/hot/.checkpoint-mover.lock"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    # Bounded: by apparent bytes per checkpoint and per run, and in time, so a stuck run cannot block the next.
    command = container["command"]
    assert [command[command.index(flag) + 1] for flag in ("--max-checkpoint-gib", "--max-run-gib", "--deadline-s")] \
        == ["2048", "8192", "7200"]
    assert job["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 7800


def test_should_archive_to_cephfs_not_an_object_store(prod: dict[str, Any]) -> None:
    values = ceph_cluster_values()
    assert values["cephObjectStores"] == [] and values["cephBlockPools"] == []
    assert values["cephFileSystems"][0]["storageClass"]["name"] == COLD_CLASS
    assert cold_claim(parse(prod))["spec"]["resources"]["requests"]["storage"] == "2000Ti"


def test_should_report_all_three_tiers(prod: dict[str, Any]) -> None:
    facts = tier_facts(parse(prod))
    assert facts["nvme"]["storage_class"] == NVME_CLASS
    assert facts["nfs_hot"]["storage_classes"] == ["nfs-hot-nlp-foundation", "nfs-hot-speech"]
    assert facts["ceph_cold"]["enabled"] is True
