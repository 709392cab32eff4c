"""What the cluster would really run: every Helm release of the stack rendered by the real Helm, from the chart
mirror, with the values the stack passes, and every object it renders validated.

Helm ignores values a chart does not read, so a values dict that only we check proves little. Core kinds are
validated by kubernetes-validate (strict: an unknown field fails) for the site's Kubernetes version; custom kinds
against the CRDs the same charts ship, strict as the API server's pruning of unknown fields. Objects an operator
creates later (the GPU Operator's DaemonSets from its ClusterPolicy) are not in a render: their custom resource is.
"""

import functools
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# No types ship; types-jsonschema would let this go.
import jsonschema  # type: ignore[import-untyped]

from components.charts import pinned, sha256_of
from runbooks.children import exit_status, tail
from runbooks.offline.engine import Resource, ResourceGraph
from runbooks.plan import yaml_worker
from runbooks.plan.out_dir import PlanFolder
from runbooks.plan.schemas import CoreVerdict, core_verdict, rejection
from runbooks.plan.yaml_stream import Document

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
TIMEOUT_S = 120
"""s one `helm template` may take (the largest chart here renders in about a second)."""
HELM_ENV = {"GOGC": "off", "GOMEMLIMIT": "1GiB"}
"""Go's garbage collector only past 1 GiB of heap (the environment's own settings win): a `helm template` lives 0.05-0.3
s and peaks at 44 MB here either way, and the collector was a fifth of Helm's CPU (1.90 -> 1.44 s for prod's 13
charts, the least of four runs each)."""


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
    documents: list[Document] = field(default_factory=list)
    """Each object's document, as helm/<release>.yaml holds it: as Helm printed it, or rewritten where the plan
    changed the object."""
    verdicts: list[CoreVerdict | None] = field(default_factory=list)
    """Each object's core verdict as its YAML worker judged it, None for one the plan changed since; validate() judges
    an object without one itself (all of them where the list is empty)."""


@dataclass(frozen=True)
class Invalid:
    source: str
    """The release that rendered the object."""
    kind: str
    name: str
    reason: str




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


@dataclass(frozen=True)
class ChartSource:
    """Where `pulumi up` installs the charts from, as rendering needs to know it."""

    charts: str | None = None
    """The site's chart mirror (site.mirror.charts): a release whose chart it names is rendered from there."""
    plain_http: bool = False
    """Its OCI registry speaks HTTP without TLS (a test registry; Helm's --plain-http)."""


PINNED_ONLY = ChartSource()
"""No site chart mirror: every chart from the --chart-mirror folder."""


def fetch(chart: str, version: str, mirror: Path | None, source: ChartSource, helm: str, scratch: Path) -> Path:
    """The archive of a release's chart: what the site's chart mirror (site.mirror.charts) holds where the release
    names it (`helm pull` from its OCI registry, or its folder's file), else the pinned chart in the --chart-mirror
    folder; its sha256 checked against the pin where components/charts.py knows it."""
    if source.charts and chart.startswith(source.charts):
        if chart.startswith("oci://"):
            into = Path(tempfile.mkdtemp(dir=scratch))
            argv = [helm, "pull", chart, "--version", version, "-d", str(into),
                    *(["--plain-http"] if source.plain_http else [])]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise HelmError(f"helm pull {chart} did not finish within {TIMEOUT_S} s") from None
            if done.returncode != 0:
                raise HelmError("\n  ".join([f"helm pull {chart} --version {version} {exit_status(done.returncode)}",
                                             *tail(done.stderr)]))
            (archive,) = into.iterdir()
        else:
            archive = Path(chart)
            if not archive.is_file():
                raise HelmError(f"chart {archive.name} is not in the site's chart mirror {source.charts}: "
                                f"copy it there (`gpuctl mirror bundle` carries it)")
    elif mirror is None:
        raise HelmError(f"chart {chart} {version} is in no chart mirror: give --chart-mirror, or set mirror.charts")
    else:
        archive = chart_archive(mirror, chart, version)
    pin = pinned(archive.name)
    if pin is not None and pin.sha256 and sha256_of(archive) != pin.sha256:
        raise HelmError(f"chart archive {archive} has sha256 {sha256_of(archive)}, not the {pin.sha256} that "
                        f"components/charts.py pins for {pin.name} {pin.version}")
    return archive


class Renders:
    """`helm template` of each Helm release, started as soon as it is known (`gpuctl plan` starts each as the program
    registers it, on the core the program leaves idle), each on a thread of its own, as many at once as there are
    cores, a thread taking the next chart without waiting for a parse (one after another, the 13 Helm runs of prod
    took 1.6-2.5 s of wall time here, and parsing their 9 MB took 1.9 s of CPU more). collect() hands each output to
    a YAML worker process as soon as Helm is done and waits for them; close() lets go of what was not collected."""

    def __init__(self, mirror: Path | None, kube_version: str, helm: str, source: ChartSource = PINNED_ONLY) -> None:
        yaml_workers()  # forked before the first Helm run starts (yaml_workers says why)
        self._args = mirror, kube_version, helm
        self._source = source
        self._scratch = tempfile.TemporaryDirectory()
        self._pool = ThreadPoolExecutor(os.cpu_count() or 1)
        self._lock = threading.Lock()
        self._started: dict[str, Future[tuple[Path, str]]] = {}

    def start(self, resource: Resource) -> None:
        """Render the release, unless it is started already; any other resource is no release, and left alone."""
        if resource.type != RELEASE_TYPE:
            return
        with self._lock:
            if resource.urn not in self._started:
                self._started[resource.urn] = self._pool.submit(
                    template, resource, *self._args, Path(self._scratch.name), self._source)

    def collect(self, graph: ResourceGraph) -> list[RenderedRelease]:
        """Each registered release rendered (those not started yet start now); the first that fails, in the graph's
        order, is the error."""
        resources = graph.of_type(RELEASE_TYPE)
        rendered = []
        try:
            for resource in resources:
                self.start(resource)
            # Parsed only now, each as soon as its Helm is done: what a parse gives back would otherwise arrive while
            # the program runs without the collector, and the collections after it would walk the releases' millions
            # of objects too (prod, parsed as Helm finished: the collector 0.36 -> 0.71 s in a run, 0.65 s of CPU more
            # in the median of 5 runs at load 9-11).
            workers = yaml_workers()
            parses = {future: workers.submit(yaml_worker.read, future.result()[1], self._args[1])
                      for future in as_completed(self._started[r.urn] for r in resources) if not future.exception()}
            for resource in resources:
                helm_run = self._started[resource.urn]
                archive, _ = helm_run.result()
                inputs = resource.inputs
                read, verdicts = parses[helm_run].result()
                rendered.append(RenderedRelease(inputs.get("name") or resource.name,
                                                archive.name.removesuffix(".tgz"), inputs["version"],
                                                inputs.get("namespace", "default"), read.objects, read.documents,
                                                verdicts))
        finally:
            self.close()
        _place_in_release_namespaces(rendered)
        return rendered

    def close(self) -> None:
        """Cancel the renders not begun, wait for those running (each bounded by TIMEOUT_S), remove the scratch."""
        self._pool.shutdown(cancel_futures=True)
        self._scratch.cleanup()


def render_releases(graph: ResourceGraph, mirror: Path | None, kube_version: str, helm: str,
                    source: ChartSource = PINNED_ONLY, renders: Renders | None = None) -> list[RenderedRelease]:
    """Each registered Helm release rendered as `helm template` renders it, CRDs included: by renders, where the
    caller started them as the program registered the releases, else by renders started now (Renders)."""
    return (renders or Renders(mirror, kube_version, helm, source)).collect(graph)


@functools.cache
def yaml_workers() -> ProcessPoolExecutor:
    """Processes that parse the charts' YAML and judge their core objects beside this one (yaml_worker.read), one per
    core, started once per run: libyaml and jsonschema hold the GIL, so threads of this process would only take turns.
    All start at the first call, not with the first chart's output: Renders makes it, `gpuctl plan`'s before its
    program runs.

    They are forked: each has the modules this process imported, where a spawned one started a fresh interpreter and
    imported the reader and the schemas' modules (prod, 6 paired rounds: 4.0 -> 3.5 s wall, 6.3 -> 5.4 s of CPU,
    medians). A fork copies every descriptor open at that moment, so it happens before this process's threads start
    any child (Renders makes the pool before its first Helm run): a worker holding the write end of a Helm run's
    pipe would keep that run's reader waiting until the worker exits.

    They run without Python's cyclic garbage collector: a parse makes millions of objects and no cycle, and the
    collector passed over them again and again as they piled up (and once more as they were pickled back), 40 % of
    the parse: prod's charts parsed and pickled in one process in 1.3 s of CPU with it, 0.8 s without."""
    cores = os.cpu_count() or 1
    workers = ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("fork"),
                                  initializer=yaml_worker.start)
    for _ in range(cores):  # the pool starts a process for each task it cannot hand to an idle one
        workers.submit(int)
    return workers


def release_yaml_workers() -> None:
    """Let the YAML workers go without waiting for them: they exit while the plan's checks run, where at this
    process's exit it would wait for them (0.2 s of wall time on prod). A later yaml_workers() starts new ones."""
    if yaml_workers.cache_info().currsize:
        yaml_workers().shutdown(wait=False)
        yaml_workers.cache_clear()


def template(release: Resource, mirror: Path | None, kube_version: str, helm: str, scratch: Path,
             source: ChartSource = PINNED_ONLY) -> tuple[Path, str]:
    """A Helm release's chart archive, and what `helm template` printed for it (its values file written in
    scratch)."""
    inputs = release.inputs
    name, namespace = inputs.get("name") or release.name, inputs.get("namespace", "default")
    archive = fetch(inputs["chart"], inputs["version"], mirror, source, helm, scratch)
    values = scratch / f"{name}.yaml"
    # Secrets never reach a values file: the plan holds only their marker.
    values.write_text(json.dumps(inputs.get("values") or {}, default=str))
    argv = [helm, "template", name, str(archive), "--namespace", namespace, "--values", str(values),
            "--include-crds", "--kube-version", f"{kube_version}.0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env={**HELM_ENV, **os.environ})
    except subprocess.TimeoutExpired:
        raise HelmError(f"helm template {name} did not finish within {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise HelmError("\n  ".join([f"helm template {name} ({archive.name}) {exit_status(done.returncode)}",
                                     *tail(done.stderr)]))
    return archive, done.stdout


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
    rendered CRD. The document of an object it changes is rewritten (PyYAML's bytes, under Helm's `# Source:` line)."""
    custom_scopes = {o["spec"]["names"]["kind"]: o["spec"].get("scope") for r in releases for o in r.objects
                     if o.get("kind") == "CustomResourceDefinition"}
    for release in releases:
        for index, obj in enumerate(release.objects):
            changed = "metadata" not in obj
            metadata = obj.setdefault("metadata", {})
            kind = obj.get("kind")
            if not metadata.get("namespace") and kind not in BUILTIN_CLUSTER_SCOPED and \
                    custom_scopes.get(kind) != "Cluster":
                metadata["namespace"] = release.namespace
                changed = True
            if changed:
                release.documents[index] = release.documents[index].rewritten(obj)
                if release.verdicts:
                    release.verdicts[index] = None


def validate(releases: list[RenderedRelease], kube_version: str) -> list[Invalid]:
    """Every object that its schema rejects, and every custom object whose kind no rendered CRD defines."""
    crds = _crd_validators(o for r in releases for o in r.objects)
    invalid = []
    for release in releases:
        for obj, verdict in zip(release.objects, release.verdicts or [None] * len(release.objects), strict=True):
            reason = _check(obj, kube_version, crds, verdict)
            if reason and (release.chart, obj.get("kind"), (obj.get("metadata") or {}).get("name"),
                           reason) not in KNOWN_DEFECTS:
                invalid.append(Invalid(release.release, str(obj.get("kind")), _name(obj), reason))
    return invalid


def _name(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata['namespace']}/{metadata.get('name')}" if metadata.get("namespace") else str(metadata.get("name"))


def _check(obj: dict[str, Any], kube_version: str, crds: dict[tuple[str, str], Any],
           verdict: CoreVerdict | None) -> str | None:
    """What rejects the object: the rendered CRD of its kind where there is one, else its core kind's schema (verdict,
    where a YAML worker judged it already)."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    validator = crds.get((f"{group}/{version}", str(obj.get("kind"))))
    if validator is not None:
        try:
            validator.validate(_defaulted(_without_nulls(obj), validator.schema))
        except jsonschema.ValidationError as error:
            return rejection(error)
        return None
    verdict = verdict or core_verdict(obj, kube_version)
    if not verdict.schema:
        return f"no schema: neither Kubernetes {kube_version} nor a rendered CRD defines {obj.get('apiVersion')} " \
               f"{obj.get('kind')}"
    return verdict.reason


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


def _crd_validators(objects: Any) -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> a validator of the CRD version's schema, made strict where the API server prunes unknown
    fields; built once per kind, not per object."""
    validators = {}
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
                validators[(f"{spec['group']}/{served['name']}", spec["names"]["kind"])] = \
                    jsonschema.Draft7Validator(top)
    return validators


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


def streams(releases: list[RenderedRelease]) -> list[str]:
    """Each release's YAML stream, as helm/<release>.yaml holds it: what Helm printed, the documents that hold no object
    left out, each plain `=` quoted, and each object the plan changed (a namespace placed) written by PyYAML. Read by
    PyYAML's safe loader, it gives the release's objects as the plan judged them (a test compares them on prod)."""
    return ["".join(document.text for document, _ in zip(release.documents, release.objects, strict=True))
            for release in releases]


def write(releases: list[RenderedRelease], streams: Iterable[str], folder: PlanFolder) -> list[Path]:
    """One YAML stream per release under helm/ (streams())."""
    return [folder.write(f"helm/{re.sub(r'[^A-Za-z0-9_.-]', '-', release.release)}.yaml", text)
            for release, text in zip(releases, streams, strict=True)]
