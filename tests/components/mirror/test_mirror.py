"""The mirror's names: image references read as Docker reads them, the charts' image values checked against the
charts' own defaults, and the spec section's bounds."""

import io
import re
import tarfile
from typing import Any

import pytest
import yaml

from components.charts import CHARTS, GPU_OPERATOR, KUBE_PROMETHEUS_STACK, KUEUE, Chart
from components.mirror.charts import CHART_IMAGES, chart_reference, image_values, merged
from components.mirror.images import mirrored, parse, pulled, source
from components.site.mirror import Mirror
from tests.builders import REPO, problems, with_changes
from tests.builders import parse as parse_site

CHART_MIRROR = REPO.parent / "shared" / "charts"


@pytest.mark.parametrize(("reference", "name", "tag", "digest"), [
    pytest.param("busybox:1.36.1", "docker.io/library/busybox", "1.36.1", None,
                 id="puts a one-part name under library/"),
    pytest.param("vllm/vllm-openai:v0.10.2", "docker.io/vllm/vllm-openai", "v0.10.2", None,
                 id="reads a first part without a dot as a Docker Hub user"),
    pytest.param("127.0.0.1:5055/library/tiny:2", "127.0.0.1:5055/library/tiny", "2", None,
                 id="reads a first part with a port as a host"),
    pytest.param("localhost/x", "localhost/x", None, None, id="reads localhost as a host and no tag as none"),
    pytest.param(f"quay.io/ceph/ceph:v19@sha256:{'a' * 64}", "quay.io/ceph/ceph", "v19", f"sha256:{'a' * 64}",
                 id="keeps a digest apart from the tag"),
])
def test_should_read_a_reference_as_docker_does(reference: str, name: str, tag: str | None,
                                                digest: str | None) -> None:
    assert (parse(reference).name, parse(reference).tag, parse(reference).digest) == (name, tag, digest)


def test_should_keep_the_source_under_the_mirror_and_read_it_back() -> None:
    assert mirrored("busybox:1.36.1", "registry.site:5000/gpu") == \
        "registry.site:5000/gpu/docker.io/library/busybox:1.36.1"
    assert source("registry.site:5000/gpu/quay.io/ceph/ceph:v19.2.2", "registry.site:5000/gpu").reference == \
        "quay.io/ceph/ceph:v19.2.2"
    assert pulled("busybox:1.36.1", Mirror()) == "busybox:1.36.1"


@pytest.mark.parametrize(("mirror", "expected"), [
    pytest.param(Mirror(), ("oci://registry.k8s.io/kueue/charts/kueue", None), id="installs the pin without a mirror"),
    pytest.param(Mirror(charts="oci://registry.site:5000/charts"), ("oci://registry.site:5000/charts/kueue", None),
                 id="installs from the OCI mirror by the name helm push gives"),
    pytest.param(Mirror(charts="/srv/charts"), ("/srv/charts/kueue-0.14.1.tgz", None),
                 id="installs the archive of a folder mirror"),
])
def test_should_name_the_chart_where_the_mirror_keeps_it(mirror: Mirror, expected: tuple[str, str | None]) -> None:
    assert chart_reference(KUEUE, mirror) == expected


def test_should_merge_the_image_values_over_the_stacks_own() -> None:
    values = merged({"driver": {"enabled": True, "version": "535"}}, image_values(GPU_OPERATOR, Mirror(images="m:1")))
    assert values["driver"] == {"enabled": True, "version": "535", "repository": "m:1/nvcr.io/nvidia",
                                "manager": {"repository": "m:1/nvcr.io/nvidia/cloud-native"}}
    assert image_values(KUBE_PROMETHEUS_STACK, Mirror()) == {}


def _chart_values(chart: Chart) -> tuple[dict[str, Any], str]:
    """The chart's default values, each subchart's under its name with the parent's over it (as Helm merges them),
    and its appVersion."""
    with tarfile.open(CHART_MIRROR / chart.archive) as archive:
        def load(member: str) -> Any:
            return yaml.safe_load(archive.extractfile(member) or io.BytesIO()) or {}

        top = chart.archive.removesuffix(f"-{chart.version}.tgz")
        values = load(f"{top}/values.yaml")
        for member in archive.getnames():
            sub = re.fullmatch(rf"{re.escape(top)}/charts/([^/]+)/values\.yaml", member)
            if sub:
                values[sub.group(1)] = merged(load(member), values.get(sub.group(1)) or {})
        return values, str(load(f"{top}/Chart.yaml").get("appVersion", ""))


@pytest.mark.skipif(not CHART_MIRROR.is_dir(), reason="needs the chart mirror ../shared/charts")
@pytest.mark.parametrize("chart", list(CHART_IMAGES), ids=lambda c: f"names values {c.archive} has")
def test_should_name_values_the_chart_has_with_the_default_it_gives(chart: Chart) -> None:
    """Helm ignores a value a chart does not read: each value must be there, naming the source it is mirrored by."""
    values, app_version = _chart_values(chart)
    for value in CHART_IMAGES[chart]:
        node: Any = values
        parent: dict[str, Any] = {}
        for key in value.path.split("."):
            assert isinstance(node, dict) and key in node, f"{chart.archive} has no value {value.path}"
            parent, node = node, node[key]
        if value.image != value.source.split(":")[0]:
            # A registry (or a GPU operand's repository): the rest of the image is its sibling value.
            rest = parent["repository"] if value.path.endswith(".registry") else parent["image"]
            assert f"{value.source}/{rest}" == value.image, f"{chart.archive} {value.path} leads to {rest}"
        default = re.sub(r"\{\{\s*\.Chart\.AppVersion\s*\}\}", app_version, str(node or ""))
        assert value.source in (default, f"docker.io/{default}") or (default == "" and value.source == "docker.io"), \
            f"{chart.archive} {value.path} defaults to {default!r}, not {value.source}"


def test_should_pin_every_chart_the_images_table_names() -> None:
    assert set(CHART_IMAGES) <= set(CHARTS)


@pytest.mark.parametrize(("changes", "expected"), [
    pytest.param({"mirror": {"charts": "https://charts.site/x"}}, "mirror.charts: String should match pattern",
                 id="rejects a chart source that is neither oci:// nor a folder"),
    pytest.param({"mirror": {"images": "Registry.Site:5000"}}, "mirror.images: String should match pattern",
                 id="rejects an upper-case registry"),
    pytest.param({"mirror": {"images": "registry.site:5000/"}}, "mirror.images: String should match pattern",
                 id="rejects a registry with a trailing slash"),
])
def test_should_reject_a_mirror_that_names_no_source(prod: dict[str, Any], changes: dict[str, Any],
                                                     expected: str) -> None:
    (problem,) = problems(with_changes(prod, **changes))
    assert problem.startswith(expected)


def test_should_accept_an_oci_chart_mirror_and_a_registry_with_a_path(prod: dict[str, Any]) -> None:
    site = parse_site(with_changes(prod, mirror={"charts": "oci://127.0.0.1:5055/charts",
                                                 "images": "127.0.0.1:5055/gpu-cluster"}))
    assert site.mirror == Mirror(charts="oci://127.0.0.1:5055/charts", images="127.0.0.1:5055/gpu-cluster")
    assert parse_site(prod).mirror == Mirror()
