"""Reading the facts a policy needs from what the engine sent, failing closed on anything unknown or missing.

The engine sends values it cannot know at preview as sentinel strings; the SDK's proxy raises UnknownValueError
when one is read, and its servicer turns that into an advisory "can't run policy during preview". A mandatory
policy must not pass that way, so every read goes through `fact`, which turns an unknown into a ViolationError the
policy reports.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs
from pulumi_policy.proxy import UnknownValueError

FACILITY = "gpucluster:facility"
RACK_TYPE = f"{FACILITY}:Rack"
GPU_NODE_TYPE = f"{FACILITY}:GpuNode"
MONITORING_STACK_TYPE = "gpucluster:monitoring:Stack"
STORAGE_TIERS_TYPE = "gpucluster:storage:Tiers"
SLURM_TYPE = "gpucluster:slurm:Slurm"
TEAM_LABEL = "gpucluster.io/team"
"""Marks a team's namespace and its queues."""
# These names mirror the program's components/site/wellknown.py (the pack imports nothing from the program);
# tests/policy/test_contract.py holds the two to one value.


class ViolationError(Exception):
    """A resource breaks a rule, or a fact the rule needs is unknown at preview, missing or of the wrong kind."""


class Judged(Protocol):
    """What a policy reads: a PolicyResource (AnalyzeStack) or a ResourceValidationArgs (Analyze)."""

    resource_type: str
    name: str
    props: Mapping[str, Any]


def describe(resource: Judged) -> str:
    """`Rack a01`: the last segment of the type token and the resource's name."""
    return f"{resource.resource_type.rsplit(':', 1)[-1]} {resource.name}"


_REQUIRED: Any = object()


def fact(resource: Judged, path: str, default: Any = _REQUIRED) -> Any:
    """The value at a dotted path of the resource's properties, as plain dicts and lists, or a ViolationError.

    A missing value is `default` when one is given; an unknown one always fails closed.
    """
    value: Any = resource.props
    try:
        for key in path.split("."):
            if not isinstance(value, Mapping) or key not in value:
                if default is not _REQUIRED:
                    return default
                raise ViolationError(f"{describe(resource)}: {path} is missing")
            value = value[key]
        return _materialize(value)
    except UnknownValueError as unknown:
        raise ViolationError(
            f"{describe(resource)}: {'.'.join(unknown.props)} is unknown at preview; this policy fails closed"
        ) from None


def number(resource: Judged, path: str) -> float:
    value = fact(resource, path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ViolationError(f"{describe(resource)}: {path} must be a number, got {value!r}")
    return float(value)


def text(resource: Judged, path: str) -> str:
    value = fact(resource, path)
    if not isinstance(value, str) or not value:
        raise ViolationError(f"{describe(resource)}: {path} must be a non-empty string, got {value!r}")
    return value


def flag(resource: Judged, path: str) -> bool:
    value = fact(resource, path)
    if not isinstance(value, bool):
        raise ViolationError(f"{describe(resource)}: {path} must be true or false, got {value!r}")
    return value


def items(resource: Judged, path: str) -> list[Any]:
    value = fact(resource, path)
    if not isinstance(value, list):
        raise ViolationError(f"{describe(resource)}: {path} must be a list, got {value!r}")
    return value


def _materialize(value: Any) -> Any:
    # Reading every element through the proxy surfaces an unknown anywhere below, with its full path.
    if isinstance(value, Mapping):
        return {key: _materialize(value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_materialize(value[i]) for i in range(len(value))]
    return value


def of_type(args: StackValidationArgs, type_: str) -> list[PolicyResource]:
    return [r for r in args.resources if r.resource_type == type_]


def lineage(resource: PolicyResource) -> Iterator[PolicyResource]:
    """The resource itself, then its parent, grandparent, ... up to the root Stack."""
    current: PolicyResource | None = resource
    while current is not None:
        yield current
        current = current.parent


def config_number(args: StackValidationArgs, key: str, default: float) -> float:
    value = args.get_config().get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ViolationError(f"policy config {key} must be a number, got {value!r}")
    return float(value)


def config_names(args: StackValidationArgs, key: str, default: Sequence[str]) -> list[str]:
    value = args.get_config().get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ViolationError(f"policy config {key} must be a list of names, got {value!r}")
    return list(value)


def present(args: StackValidationArgs, type_: str) -> list[PolicyResource]:
    """The components of a type; the policy is not applicable without one (another policy requires it)."""
    found = of_type(args, type_)
    if not found:
        args.not_applicable(f"no {type_} component in the stack")
    return found


def report_each(resources: Sequence[PolicyResource], report: ReportViolation,
                check: Callable[[PolicyResource], None]) -> None:
    """Run `check(resource)` on each; a ViolationError it raises is reported against that resource."""
    for resource in resources:
        try:
            check(resource)
        except ViolationError as problem:
            report(str(problem), resource.urn)
