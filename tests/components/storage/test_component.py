"""Storage tiers from the spec: NVMe cache, per-team NFS hot shares, Ceph cold archive and the mover."""

from typing import Any

import cel
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from components.storage.tiers import (
    COLD_CLASS,
    NVME_CLASS,
    ceph_cluster_values,
    cold_claim,
    mover_cronjob,
    nvme_storage_class,
    prefetch_daemonset,
    prefetched_dirs,
    team_isolation_binding,
    team_isolation_policy,
    tier_facts,
)
from tests.builders import parse, with_changes


def test_should_bind_nvme_volumes_only_with_their_pod() -> None:
    assert nvme_storage_class()["volumeBindingMode"] == "WaitForFirstConsumer"


def test_should_prefetch_every_listed_model_onto_the_nvme_cache(prod: dict[str, Any]) -> None:
    site = parse(prod)
    pod = prefetch_daemonset(site)["spec"]["template"]["spec"]
    script = pod["initContainers"][0]["command"][2]
    served = [f"{m.source}/{m.revision}" for m in site.inference.models]
    assert served and prefetched_dirs(site) == [*site.storage.nvme.prefetch, *served]
    for model in prefetched_dirs(site):
        assert f"cp -ru /models/{model}/. /cache/{model}/ && touch /cache/{model}/.prefetched" in script
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cache"]["hostPath"] == {"path": "/mnt/nvme-cache", "type": "Directory"}
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
    # The mover takes the export's lock itself, as the Slurm epilog's does: never two sweeps of one server at once,
    # and no lock a user can open (flock(1) made one every user could hold).
    assert container["command"][:4] == ["python3", "/mover/checkpoint_tiering.py", "--hot", "/hot"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    # Bounded: by apparent bytes per checkpoint and per run, and in time, so a stuck run cannot block the next.
    command = container["command"]
    assert [command[command.index(flag) + 1] for flag in ("--max-checkpoint-gib", "--max-run-gib", "--deadline-s")] \
        == ["2048", "8192", "7200"]
    assert job["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 7800
    # Its metrics name it, whichever node it runs on (the alerts judge each mover by its newest run).
    assert command[command.index("--mover-name") + 1] == job["metadata"]["name"] == "checkpoint-mover-1"


def test_should_archive_to_cephfs_not_an_object_store(prod: dict[str, Any]) -> None:
    values = ceph_cluster_values()
    assert values["cephObjectStores"] == [] and values["cephBlockPools"] == []
    assert values["cephFileSystems"][0]["storageClass"]["name"] == COLD_CLASS
    assert cold_claim(parse(prod))["spec"]["resources"]["requests"]["storage"] == "2000Ti"


def test_should_report_all_three_tiers(prod: dict[str, Any]) -> None:
    facts = tier_facts(parse(prod))
    assert facts["nvme"]["storage_class"] == NVME_CLASS
    # The hot tier's servers at every stage; a storage class per onboarded team (none at the first stage).
    assert facts["nfs_hot"]["servers"] == ["nfs-hot-01.dc1.internal", "nfs-hot-02.dc1.internal"]
    assert facts["nfs_hot"]["storage_classes"] == []
    assert tier_facts(parse(with_changes(prod, stage="canary")))["nfs_hot"]["storage_classes"] == [
        "nfs-hot-nlp-foundation", "nfs-hot-speech"]
    assert facts["ceph_cold"]["enabled"] is True


def admits(site_values: dict[str, Any], obj: dict[str, Any], team: str = "speech") -> bool:
    """The isolation policy's validations on `obj` in team's namespace, evaluated by a CEL engine."""
    namespace = {"metadata": {"name": team, "labels": {"gpucluster.io/team": team}}}
    return all(cel.evaluate(v["expression"], {"object": obj, "namespaceObject": namespace}) is True
               for v in team_isolation_policy(parse(site_values))["spec"]["validations"])


def claim(storage_class: str | None) -> dict[str, Any]:
    spec = {} if storage_class is None else {"storageClassName": storage_class}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": spec}


def pod(*volumes: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c"}], "volumes": list(volumes)}}


@pytest.mark.parametrize(("obj", "admitted"), [
    pytest.param(claim("nfs-hot-speech"), True, id="should admit a claim on the team's own hot class"),
    pytest.param(claim("nfs-hot-vision"), False, id="should deny a claim on another team's hot class"),
    pytest.param(claim("nvme-local"), True, id="should admit a claim on the local NVMe class"),
    pytest.param(claim(None), True, id="should leave a claim without a class to the default"),
    pytest.param(pod({"name": "v", "persistentVolumeClaim": {"claimName": "ckpt"}}), True,
                 id="should admit a pod that mounts its claims"),
    pytest.param(pod({"name": "v", "nfs": {"server": "nfs-hot-01", "path": "/exports/vision"}}), False,
                 id="should deny a pod that mounts NFS itself"),
    pytest.param(pod({"name": "v", "hostPath": {"path": "/mnt/ckpt-hot"}}), False,
                 id="should deny a pod that mounts the node's hot-tier mounts"),
    pytest.param(pod({"name": "v", "hostPath": {"path": "/"}}), False, id="should deny a pod that mounts /"),
    pytest.param(pod({"name": "v", "hostPath": {"path": "/mnt/nvme-cache/../../../../mnt"}}), False,
                 id="should deny a path that climbs out of the cache"),
    pytest.param(pod({"name": "v", "hostPath": {"path": "/mnt/nvme-cache/llama"}}), True,
                 id="should admit the node's model cache"),
])
def test_should_keep_a_team_to_its_own_storage(prod: dict[str, Any], obj: dict[str, Any], admitted: bool) -> None:
    assert admits(prod, obj) is admitted


def test_should_bind_the_isolation_policy_in_every_team_namespace_as_the_api_server_validates_it(
        prod: dict[str, Any]) -> None:
    for manifest in (team_isolation_policy(parse(prod)), team_isolation_binding()):
        kubernetes_validate.validate(manifest, "1.30", strict=True)
    assert team_isolation_binding()["spec"]["validationActions"] == ["Deny"]
