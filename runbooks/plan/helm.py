"""What the cluster would really run: every Helm release of the stack rendered by the real Helm, from the chart
mirror, with the values the stack passes, and every object it renders validated.

Helm ignores values a chart does not read, so a values dict that only we check proves little. Core kinds are
validated by kubernetes-validate (strict: an unknown field fails) for the site's Kubernetes version; custom kinds
against the CRDs the same charts ship, strict as the API server's pruning of unknown fields. Objects an operator
creates later (the GPU Operator's DaemonSets from its ClusterPolicy) are not in a render: their custom resource is.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Neither ships types; types-jsonschema would let the first go.
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from runbooks.children import exit_status, tail
from runbooks.offline.engine import ResourceGraph

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
TIMEOUT_S = 120
"""s one `helm template` may take (the largest chart here renders in about a second)."""


KNOWN_DEFECTS = {
    ("gpu-operator-v25.10.1", "Job", "gpu-operator-node-feature-discovery-prune",
     "spec.template.spec: Additional properties are not allowed ('resources' was unexpected)"):
        "node-feature-discovery's post-delete-job.yaml indents master.resources at the pod, not the container; "
        "the API server drops the field, and the Job runs only on `helm uninstall`",
}
"""Objects an upstream chart renders wrong that no value of ours can fix: (chart archive, kind, name, error) ->
why it is harmless. Anything else a schema rejects fails the plan."""


class HelmError(Exception):
    """A release could not be rendered: Helm failed, or its chart is not in the mirror."""


@dataclass
class RenderedRelease:
    release: str
    """Helm's release name."""
    chart: str
    version: str
    namespace: str
    objects: list[dict[str, Any]]


@dataclass(frozen=True)
class Invalid:
    source: str
    """The release that rendered the object."""
    kind: str
    name: str
    reason: str


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as Helm's output uses it: CRDs may hold `=`, the spec's "value" tag, as a plain string."""


def _plain_value(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:value", _plain_value)


def find_helm() -> str | None:
    """The helm `make` installs beside this Python, else one on PATH."""
    beside = Path(sys.executable).with_name("helm")
    return str(beside) if beside.exists() else shutil.which("helm")


def chart_archive(mirror: Path, chart: str, version: str) -> Path:
    """The archive `helm pull` writes for a chart: `<name>-<version>.tgz`; an OCI chart is named by its last part."""
    name = chart.rstrip("/").rsplit("/", 1)[-1]
    archive = mirror / f"{name}-{version}.tgz"
    if not archive.is_file():
        raise HelmError(f"chart {name} {version} is not in the chart mirror {mirror}: "
                        f"`helm pull {chart} --version {version} -d {mirror}` (with --repo for a repository chart)")
    return archive


def render_releases(graph: ResourceGraph, mirror: Path, kube_version: str, helm: str) -> list[RenderedRelease]:
    """Each registered Helm release rendered as `helm template` renders it, CRDs included."""
    rendered = []
    with tempfile.TemporaryDirectory() as scratch:
        for resource in graph.of_type(RELEASE_TYPE):
            inputs = resource.inputs
            release, namespace = inputs.get("name") or resource.name, inputs.get("namespace", "default")
            archive = chart_archive(mirror, inputs["chart"], inputs["version"])
            values = Path(scratch) / f"{release}.yaml"
            # Secrets never reach a values file: the plan holds only their marker.
            values.write_text(json.dumps(inputs.get("values") or {}, default=str))
            argv = [helm, "template", release, str(archive), "--namespace", namespace, "--values", str(values),
                    "--include-crds", "--kube-version", f"{kube_version}.0"]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise HelmError(f"helm template {release} did not finish within {TIMEOUT_S} s") from None
            if done.returncode != 0:
                raise HelmError("\n  ".join([f"helm template {release} ({archive.name}) "
                                             f"{exit_status(done.returncode)}", *tail(done.stderr)]))
            objects = [o for o in yaml.load_all(done.stdout, Loader=_Loader) if isinstance(o, dict)]
            rendered.append(RenderedRelease(release, archive.name.removesuffix(".tgz"), inputs["version"], namespace,
                                            objects))
    _place_in_release_namespaces(rendered)
    return rendered


BUILTIN_CLUSTER_SCOPED = frozenset({
    # `kubectl api-resources --namespaced=false` for the built-in API groups the charts use.
    "Namespace", "Node", "PersistentVolume", "StorageClass", "CSIDriver", "CSINode", "PriorityClass", "RuntimeClass",
    "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "APIService", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "VolumeAttachment", "IngressClass",
})


def _place_in_release_namespaces(releases: list[RenderedRelease]) -> None:
    """`helm install` puts every namespaced object a template leaves without a namespace into the release's namespace
    (litellm-helm's templates name none): so does the plan, with the scopes of the built-in kinds and of every
    rendered CRD."""
    custom_scopes = {o["spec"]["names"]["kind"]: o["spec"].get("scope") for r in releases for o in r.objects
                     if o.get("kind") == "CustomResourceDefinition"}
    for release in releases:
        for obj in release.objects:
            metadata = obj.setdefault("metadata", {})
            kind = obj.get("kind")
            if not metadata.get("namespace") and kind not in BUILTIN_CLUSTER_SCOPED and \
                    custom_scopes.get(kind) != "Cluster":
                metadata["namespace"] = release.namespace


def validate(releases: list[RenderedRelease], kube_version: str) -> list[Invalid]:
    """Every object that its schema rejects, and every custom object whose kind no rendered CRD defines."""
    crds = _crd_schemas(o for r in releases for o in r.objects)
    invalid = []
    for release in releases:
        for obj in release.objects:
            reason = _check(obj, kube_version, crds)
            if reason and (release.chart, obj.get("kind"), (obj.get("metadata") or {}).get("name"),
                           reason) not in KNOWN_DEFECTS:
                invalid.append(Invalid(release.release, str(obj.get("kind")), _name(obj), reason))
    return invalid


def _name(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata['namespace']}/{metadata.get('name')}" if metadata.get("namespace") else str(metadata.get("name"))


def _check(obj: dict[str, Any], kube_version: str, crds: dict[tuple[str, str], dict[str, Any]]) -> str | None:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    schema = crds.get((f"{group}/{version}", str(obj.get("kind"))))
    if schema is not None:
        try:
            jsonschema.Draft7Validator(schema).validate(_defaulted(_without_nulls(obj), schema))
        except jsonschema.ValidationError as error:
            return f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kubernetes_validate.validate(obj, kube_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"no schema: neither Kubernetes {kube_version} nor a rendered CRD defines {obj.get('apiVersion')} " \
               f"{obj.get('kind')}"
    return None


def _without_nulls(value: Any) -> Any:
    """The API server prunes a null in a custom resource, then fills in defaults, then validates (a nullable
    field's absence is as valid as its null), so `key: null` from a chart's template is no error."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _defaulted(value: Any, schema: Any) -> Any:
    """The object with the schema's defaults filled in where it leaves a field out, as the API server does."""
    if isinstance(value, dict) and isinstance(schema, dict):
        properties = schema.get("properties") or {}
        filled = {**{k: s["default"] for k, s in properties.items() if "default" in s and k not in value}, **value}
        return {k: _defaulted(v, properties.get(k, schema.get("additionalProperties"))) for k, v in filled.items()}
    if isinstance(value, list) and isinstance(schema, dict):
        return [_defaulted(v, schema.get("items")) for v in value]
    return value


def _crd_schemas(objects: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the CRD version's schema, made strict where the API server prunes unknown fields."""
    schemas = {}
    for crd in objects:
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd.get("spec") or {}
        for served in spec.get("versions") or []:
            schema = (served.get("schema") or {}).get("openAPIV3Schema")
            if schema is not None:
                top = dict(_strict(schema))
                # apiVersion, kind and metadata are the API server's, whatever the CRD says of them.
                top.setdefault("properties", {}).update(
                    {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
                schemas[(f"{spec['group']}/{served['name']}", spec["names"]["kind"])] = top
    return schemas


def _strict(schema: Any) -> Any:
    """An object schema with properties and no `x-kubernetes-preserve-unknown-fields` admits nothing else, as
    a structural schema prunes unknown fields on the API server."""
    if not isinstance(schema, dict):
        return schema
    strict = {k: (_strict(v) if k in ("items", "additionalProperties", "not") else
                  {p: _strict(s) for p, s in v.items()} if k in ("properties", "patternProperties") else
                  [_strict(s) for s in v] if k in ("allOf", "anyOf", "oneOf") else v)
              for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        strict.pop("type", None)
        strict["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in strict and "additionalProperties" not in strict \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        strict["additionalProperties"] = False
    return strict


def write(releases: list[RenderedRelease], out_dir: Path) -> list[Path]:
    """One YAML stream per release under helm/, as `helm template` printed it (re-serialized, key order kept)."""
    directory = out_dir / "helm"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for release in releases:
        path = directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', release.release)}.yaml"
        path.write_text(yaml.safe_dump_all(release.objects, sort_keys=False))
        written.append(path)
    return written
