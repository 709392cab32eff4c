"""A site whose charts and images come from its own registry, here Debian's docker-registry (distribution 2.8) on
127.0.0.1: Helm pushes the pinned charts to it over OCI, every release renders from it by the real Helm, every image
the render names comes from it, images-from-mirror fails (alone) when one does not, skopeo puts an image built here
(umoci, no container engine) where the render names it and reads it back; the bundle made from that render is checked
and a tampered one refused. One module, so the stack renders once."""

import copy
import dataclasses
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.charts import CHARTS
from components.mirror.images import in_mirror
from components.site.site import Site
from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.mirror.bundle import write_bundle
from runbooks.offline.engine import ResourceGraph
from runbooks.plan import helm
from runbooks.plan import plan as planning
from runbooks.plan.cli import ChartsOutcome, render_charts
from runbooks.plan.helm import RELEASE_TYPE, find_helm
from runbooks.plan.images import images_from_mirror, images_pulled
from runbooks.plan.producers import Deployed
from tests.builders import REPO, copy_project
from tests.harness.registry import SKOPEO, LocalRegistry, missing, run, tiny_image

CHART_MIRROR = REPO.parent / "shared" / "charts"
ARTIFACTS = REPO / "build" / "artifacts"
HELM = find_helm()
pytestmark = [pytest.mark.registry, pytest.mark.skipif(
    HELM is None or not CHART_MIRROR.is_dir() or not ARTIFACTS.is_dir() or missing() is not None,
    reason=missing() or "needs helm (make test installs it in .venv/bin), the chart mirror ../shared/charts and "
                        "Slurm's host artifacts (make artifacts)")]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The registry's address, every pinned chart pushed to it under charts/ as the site would."""
    server = LocalRegistry(tmp_path_factory.mktemp("registry"))
    try:
        for chart in CHARTS:
            run([str(HELM), "push", str(CHART_MIRROR / chart.archive), f"oci://{server.address}/charts",
                 "--plain-http"])
        yield server.address
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mirrored(registry: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Site, ResourceGraph]:
    def change(config: dict[str, Any]) -> None:
        config["gpu-cluster:mirror"] = {"charts": f"oci://{registry}/charts", "images": registry}

    return planning.run(copy_project(tmp_path_factory.mktemp("mirrored"), change), "prod")


@pytest.fixture(scope="module")
def charts(mirrored: tuple[Site, ResourceGraph]) -> ChartsOutcome:
    # No --chart-mirror: every chart comes from the spec's mirror, pulled by Helm (`gpuctl plan --plain-http`).
    return render_charts(*mirrored, None, True)


def test_should_install_every_release_from_the_mirror_and_pull_every_image_from_it(
        registry: str, mirrored: tuple[Site, ResourceGraph], charts: ChartsOutcome) -> None:
    _, graph = mirrored
    assert not charts.error and not charts.skipped, charts.error or charts.skipped
    releases = graph.of_type(RELEASE_TYPE)
    assert len(releases) == len(charts.releases) == 13
    assert {r.inputs["chart"] for r in releases} == {
        f"oci://{registry}/charts/{c.archive.removesuffix(f'-{c.version}.tgz')}" for c in CHARTS}
    assert all("repositoryOpts" not in r.inputs for r in releases)
    assert [(i.name, i.violations) for i in charts.invariants if i.violations] == []
    pulled = [u.reference for uses in charts.images.values() for u in uses]
    assert len(charts.images) >= 40 and all(in_mirror(r, registry) for r in pulled)
    # Listed by their sources: what `gpuctl mirror bundle` copies into the mirror.
    assert "quay.io/thanos/thanos:v0.39.2" in charts.images
    assert "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-distroless" in charts.images


def without(values: dict[str, Any], path: str) -> dict[str, Any]:
    changed = copy.deepcopy(values)
    *parents, leaf = path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    del node[leaf]
    return changed


def test_should_break_only_images_from_mirror_naming_the_object_and_value_when_one_image_stays_public(
        registry: str, mirrored: tuple[Site, ResourceGraph], charts: ChartsOutcome,
        monkeypatch: pytest.MonkeyPatch) -> None:
    site, graph = mirrored
    (prometheus,) = [dataclasses.replace(r, inputs=dict(r.inputs)) for r in graph.of_type(RELEASE_TYPE)
                     if r.inputs["name"] == "kube-prometheus-stack"]
    prometheus.inputs["values"] = without(prometheus.inputs["values"], "prometheusOperator.thanosImage.registry")
    # Only the mutated release is rendered again, by the real Helm; the other twelve are as rendered above.
    (again,) = helm.render_releases(ResourceGraph(graph.project, graph.stack, {prometheus.urn: prometheus}), None,
                                    site.kubernetes_version, str(HELM), helm.ChartSource(site.mirror.charts, True))
    monkeypatch.setattr(helm, "render_releases", lambda *_: [again if r.release == again.release else r
                                                             for r in charts.releases])
    charts = render_charts(site, graph, None)
    broken = {i.name: i.violations for i in charts.invariants if i.violations}
    assert broken == {"images-from-mirror": [
        "Deployment monitoring/kube-prometheus-stack-operator spec.template.spec.containers[0].args[9] pulls "
        f"quay.io/thanos/thanos:v0.39.2, not from the mirror {registry}: set kube-prometheus-stack-77.5.0 value "
        f"prometheusOperator.thanosImage.registry to {registry}/quay.io"]}


def test_should_name_an_image_the_program_registers_and_an_image_without_a_tag(
        registry: str, mirrored: tuple[Site, ResourceGraph]) -> None:
    _, graph = mirrored
    (prefetch,) = [o for o in planning.kubernetes_objects(graph).values() if o["kind"] == "DaemonSet"]
    prefetch = copy.deepcopy(prefetch)
    prefetch["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox"
    deployed = Deployed([prefetch], [prefetch], {}, image_mirror=registry)
    assert images_from_mirror(deployed) == [
        "DaemonSet storage/model-cache-prefetch spec.template.spec.containers[0].image: busybox names no tag or digest "
        "but latest: pin it",
        "DaemonSet storage/model-cache-prefetch spec.template.spec.containers[0].image pulls busybox, not from the "
        f"mirror {registry}: the program registers it: name the image through components.mirror.images.pulled"]
    # Without a mirror only the pin counts.
    assert images_from_mirror(dataclasses.replace(deployed, image_mirror=None)) == [
        "DaemonSet storage/model-cache-prefetch spec.template.spec.containers[0].image: busybox names no tag or digest "
        "but latest: pin it"]
    # Listed by source: the mirrored init container's image and the public one are the same image, tagged or not.
    assert list(images_pulled([prefetch], registry)) == ["docker.io/library/busybox",
                                                         "docker.io/library/busybox:1.36.1"]


@pytest.fixture(scope="module")
def bundle(mirrored: tuple[Site, ResourceGraph], charts: ChartsOutcome,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    site, graph = mirrored
    out = tmp_path_factory.mktemp("bundle") / "bundle"
    write_bundle(out, site, graph, charts.images, None, helm.ChartSource(site.mirror.charts, True), str(HELM),
                 ARTIFACTS)
    return out


def test_should_bundle_what_the_render_needs_and_pass_its_check(registry: str, charts: ChartsOutcome,
                                                                bundle: Path) -> None:
    assert sorted(p.name for p in (bundle / "charts").iterdir()) == sorted(f"{r.chart}.tgz" for r in charts.releases)
    assert sorted(p.name for p in (bundle / "host-artifacts").iterdir()) == sorted(
        p.name for p in ARTIFACTS.glob("*.deb"))
    listed = [line.split("\t") for line in (bundle / "images.txt").read_text().splitlines() if line[0] != "#"]
    assert [source for source, _ in listed] == list(charts.images)
    assert ["quay.io/thanos/thanos:v0.39.2", f"{registry}/quay.io/thanos/thanos:v0.39.2"] in listed
    assert "meta-llama/Llama-3.1-8B-Instruct/v1\t" in (bundle / "models.txt").read_text()
    checked = CliRunner().invoke(app, ["mirror", "check", str(bundle)])
    assert checked.exit_code == 0, checked.output
    # sha256sum(1) reads the same manifest.
    assert subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=bundle).returncode == 0


def test_should_refuse_a_bundle_with_a_changed_a_missing_and_an_unlisted_file(bundle: Path, tmp_path: Path) -> None:
    tampered = Path(shutil.copytree(bundle, tmp_path / "tampered"))
    with (tampered / "charts" / "kueue-0.14.1.tgz").open("ab") as archive:
        archive.write(b"\0")
    (tampered / "host-artifacts" / "enroot_4.1.2-1_amd64.deb").unlink()
    (tampered / "charts" / "extra-1.0.0.tgz").write_bytes(b"")
    checked = CliRunner().invoke(app, ["mirror", "check", str(tampered)])
    assert checked.exit_code == ExitCode.INVALID
    lines = checked.output.splitlines()
    assert any(line.startswith("  charts/kueue-0.14.1.tgz: sha256 ") for line in lines), checked.output
    assert "  host-artifacts/enroot_4.1.2-1_amd64.deb: missing" in lines
    assert "  charts/extra-1.0.0.tgz: not in the manifest" in lines


def test_should_serve_an_image_where_the_render_names_it(registry: str, charts: ChartsOutcome, tmp_path: Path) -> None:
    """The site copies each image to where the render names it; skopeo does it here with an image built without an
    engine, in Docker's v2 schema 2, which enroot and the kubelet's runtimes read (local-registry.md), and reads it
    back by the reference the prefetch DaemonSet pulls."""
    assert SKOPEO is not None
    (named,) = {u.reference for u in charts.images["docker.io/library/busybox:1.36.1"]}
    assert named == f"{registry}/docker.io/library/busybox:1.36.1"
    digest = tmp_path / "digest"
    run([SKOPEO, "copy", "--format", "v2s2", "--dest-tls-verify=false", "--digestfile", str(digest),
         tiny_image(tmp_path), f"docker://{named}"])
    inspected = json.loads(run([SKOPEO, "inspect", "--tls-verify=false", f"docker://{named}"]))
    assert inspected["Digest"] == digest.read_text().strip()
    assert inspected["Name"] == named.rsplit(":", 1)[0]
