"""Every Kubernetes object `gpuctl plan` writes is judged by kubernetes-validate (strict: no unknown fields)."""


import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.plan.schemas import core_validator
from tests.builders import copy_project

KUBERNETES_VERSION = "1.30"
# kubernetes-validate knows no CRD schemas; these are checked by promtool (the rules) and by type here.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "PrometheusRule"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
                *(("kueue.x-k8s.io/v1beta1", kind) for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue"))}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    # At the canary stage, so that the teams' objects are judged too (prod's first stage onboards none).
    project = copy_project(tmp_path_factory.mktemp("project"), lambda config: config.update(
        {"gpu-cluster:stage": "canary"}))
    out = tmp_path_factory.mktemp("plan")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted((out / "kubernetes").glob("*.yaml"))}


def is_core(api_version: str) -> bool:
    """Built-in API groups: the legacy core group (`v1`), unqualified ones (`apps`) and `*.k8s.io`."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def test_should_write_only_core_objects_and_the_known_custom_resources(manifests: dict[str, dict[str, object]]) -> None:
    kinds = {(str(m["apiVersion"]), str(m["kind"])) for m in manifests.values()}
    assert {kind for kind in kinds if not is_core(kind[0])} == CUSTOM_KINDS


def test_should_pass_strict_schema_validation(manifests: dict[str, dict[str, object]]) -> None:
    checked = 0
    for name, manifest in manifests.items():
        if (manifest["apiVersion"], manifest["kind"]) in CUSTOM_KINDS:
            continue
        if manifest["kind"] == "Secret":
            # pulumi-kubernetes makes a Secret's data secret whole: the plan shows the placeholder, never the keys.
            assert manifest.get("stringData", manifest.get("data")) == "[secret]", name
            manifest = {k: v for k, v in manifest.items() if k not in ("stringData", "data")}
        if "Patch--" in name:
            # A server-side apply patch names only the fields it sets: each must exist (strict), none is required.
            validator = core_validator(KUBERNETES_VERSION, str(manifest["apiVersion"]), str(manifest["kind"]))
            errors = [e for e in validator.iter_errors(manifest) if e.validator != "required"]
            assert not errors, f"{name}: {errors[0].message} at {list(errors[0].path)}"
        else:
            try:
                kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{name}: {error.message} at {list(error.path)}")
        checked += 1
    assert checked >= 30  # 16 node patches, namespaces, StorageClasses, the DaemonSet, CronJobs, ...


def test_should_reject_an_unknown_field_in_a_patch_so_its_check_can_fail() -> None:
    patch = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "y"},
             "spec": {"template": {"spec": {"priorityClassName": "inference", "colour": "red"}}}}
    errors = [e.message for e in core_validator(KUBERNETES_VERSION, "apps/v1", "Deployment").iter_errors(patch)
              if e.validator != "required"]
    assert errors == ["Additional properties are not allowed ('colour' was unexpected)"]


def test_should_reject_an_unknown_field_so_the_check_can_fail() -> None:
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}, "spec": {"colour": "red"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
