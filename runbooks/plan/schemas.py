"""The core kinds' schemas: what Kubernetes' own API accepts of an object, judged as kubernetes-validate judges it
(strict: an unknown field fails) for the site's Kubernetes version: in the plan's YAML workers, for the objects of the
chart each parsed (runbooks/plan/yaml_worker.py), and in this process for any other."""

import functools
import re
import warnings
from dataclasses import dataclass
from typing import Any

# Neither ships types; types-jsonschema would let the first go.
import jsonschema  # type: ignore[import-untyped]
import referencing
from kubernetes_validate.utils import (  # type: ignore[import-untyped]
    VersionNotSupportedError,
    all_versions,
    major_minor,
    schema_contents,
)


@dataclass(frozen=True)
class CoreVerdict:
    """An object judged by its core kind's schema."""

    schema: bool
    """Whether Kubernetes (the site's version) defines the object's apiVersion and kind."""
    reason: str | None = None
    """What the schema rejects, as rejection() words it; None where it accepts the object or there is no schema."""


def core_verdict(obj: dict[str, Any], kube_version: str) -> CoreVerdict:
    validator = core_validator(kube_version, str(obj["apiVersion"]), str(obj["kind"]))
    if validator is None:
        return CoreVerdict(schema=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validator.validate(obj)
    except jsonschema.ValidationError as error:
        return CoreVerdict(schema=True, reason=rejection(error))
    return CoreVerdict(schema=True)


def rejection(error: jsonschema.ValidationError) -> str:
    """Where in the object a schema rejects it, and why."""
    return f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"


@functools.cache
def core_validator(kube_version: str, api_version: str, kind: str) -> Any | None:
    """The validator `kubernetes_validate.validate(obj, kube_version, strict=True)` builds for a kind, built once;
    None where the library has no schema for it.

    The library reads and parses the kind's schema and the 1.2 MB of definitions it shares with every other kind for
    each object it validates: most of the 3.5 s of CPU that validating prod's 401 rendered objects took (0.6 s with
    validators built once, the CRDs' included). Here the same files are found the same way (the newest schemas not
    newer than the site's Kubernetes, the strict ones), with the library's own helpers, and judged by the same Draft
    2020-12 validator; a test compares the verdicts with the library's on every kind the stack renders."""
    wanted = major_minor(kube_version.removeprefix("v"))
    if wanted > all_versions()[-1]:
        raise VersionNotSupportedError(version=wanted)
    folder = f"kubernetes-json-schema/v{[v for v in all_versions() if major_minor(v) <= wanted][-1]}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = schema_contents(f"{folder}/{kind.lower()}-{api}.json", kube_version)
    except FileNotFoundError:
        return None
    registry = referencing.Resource.from_contents(_core_definitions(folder, kube_version)) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.cache
def _core_definitions(folder: str, kube_version: str) -> Any:
    """The definitions every kind's schema refers to, read once."""
    return schema_contents(f"{folder}/_definitions.json", kube_version)

