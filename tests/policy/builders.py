"""Fixture builders for policy tests: resources, stacks and validation args shaped as the SDK's servicer makes them.

Props go through the SDK's unknown-checking proxy (Analyze, AnalyzeStack) or its secrets-preserving
deserializer (Remediate), so unknowns and secrets behave as they do under the engine.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.policy import _NotApplicableError
from pulumi_policy.proxy import unknown_checking_proxy

from tests.builders import with_changes

OPTS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
STACK_TYPE = "pulumi:pulumi:Stack"


def resource(type_: str, name: str, props: Mapping[str, Any] | None = None, parent: PolicyResource | None = None,
             dependencies: tuple[PolicyResource, ...] = ()) -> PolicyResource:
    urn = f"urn:pulumi:prod::gpu-cluster::{type_}::{name}"
    return PolicyResource(type_, unknown_checking_proxy(dict(props or {})), urn, name, OPTS, None, parent,
                          list(dependencies), {})


def stack_root() -> PolicyResource:
    return resource(STACK_TYPE, "gpu-cluster-prod")


def changed(props: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy with each path set: `prometheus__hot_retention_days=7`."""
    return with_changes(props, **changes)


def secret(value: Any) -> dict[str, Any]:
    """A value in the engine's wire form for a secret."""
    return {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": value}


@dataclass
class Outcome:
    violations: list[tuple[str, str | None]] = field(default_factory=list)
    not_applicable: str | None = None

    @property
    def messages(self) -> list[str]:
        return [message for message, _ in self.violations]


def judge_stack(policy: StackValidationPolicy, *resources: PolicyResource,
                config: Mapping[str, Any] | None = None) -> Outcome:
    outcome = Outcome()
    try:
        policy.validate(StackValidationArgs(list(resources), config),
                        lambda message, urn: outcome.violations.append((message, urn)))
    except _NotApplicableError as skipped:
        outcome.not_applicable = skipped.reason
    return outcome


def judge_resource(policy: ResourceValidationPolicy, type_: str, name: str, props: Mapping[str, Any]) -> Outcome:
    outcome = Outcome()
    args = ResourceValidationArgs(type_, unknown_checking_proxy(dict(props)), f"urn:{name}", name, OPTS, None)
    policy.validate(args, lambda message, urn: outcome.violations.append((message, urn)))
    return outcome


def remediate(policy: ResourceValidationPolicy, type_: str, name: str, wire: Mapping[str, Any]) -> Any:
    """What the policy's remediation returns for inputs in wire form, deserialized as Remediate does."""
    props = unknown_checking_proxy(deserialize_properties(dict(wire), proxy_secrets=True))
    return policy.remediate(ResourceValidationArgs(type_, props, f"urn:{name}", name, OPTS, None))
