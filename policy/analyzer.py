"""The pack's analyzer: the SDK's own, except that AnalyzeStack builds the stack once, not once per stack policy,
and a fact about the installed SDK is learnt once, not on every call.

pulumi-policy's servicer turns every resource the engine sent into a PolicyResource (protobuf to dict, secrets and
unknowns decoded, an unknown-checking proxy, parents and dependencies linked) for each stack policy in turn: with
18 stack policies that was 11-12.5 s of a 21.8 s pack run at 8,192 GPUs (issue 22), the policies' own code about
1 % of it. Built once and handed to every policy, the resources are the same objects the SDK would build (its own
helpers build them); the policies only read them (the pack's modules are side-effect-free), so each still judges
the stack as the engine sent it. Everything else (levels, config, reports, not-applicable, unknowns at preview) is
the SDK's behaviour per policy, unchanged. The SDK makes its servicer by the name this replaces: pinned with it
(pulumi-policy==1.21.0, requirements.txt), and tests/policy/test_analyzer.py holds the two to the same response.

Every call the SDK's servicer answers (two a resource) first makes the runtime settings from the pack's environment,
and asks inspect.signature whether pulumi.runtime.Settings takes an `organization`: 36 % of the time the servicer
spent on a resource at 8,192 GPUs. The installed SDK fixes the answer, so the SDK's module gets it cached; the
settings are still made on every call (gRPC runs each call in a fresh context, where the SDK keeps them).
"""

import asyncio
import functools
import inspect
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyResource, StackValidationArgs, StackValidationPolicy
from pulumi_policy import policy as sdk
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

SDK_SERVICER = sdk._PolicyAnalyzerServicer
sdk.signature = functools.cache(inspect.signature)  # type: ignore[attr-defined]  # the same answers, each asked once
# The SDK's own protobuf modules (the pack may import nothing else of Pulumi's); the module does not re-export them.
PROTO: Any = sdk.proto  # type: ignore[attr-defined]
MESSAGE_TO_DICT: Any = sdk.json_format.MessageToDict  # type: ignore[attr-defined]


class StackBuiltOnceServicer(SDK_SERVICER):
    def AnalyzeStack(self, request: Any, _context: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        self._configure_runtime_settings()  # type: ignore[no-untyped-call]
        response = PROTO.AnalyzeResponse()
        resources = self._stack(request)
        for policy in self._sdk("policies"):
            level = self._get_enforcement_level(policy)
            if level == EnforcementLevel.DISABLED or not isinstance(policy, StackValidationPolicy):
                continue
            if level == EnforcementLevel.REMEDIATE:  # stack policies cannot remediate: mandatory, as the SDK
                level = EnforcementLevel.MANDATORY
            report = self._create_report_violation(response, policy.name, policy.description, level, policy.severity)
            args = StackValidationArgs(resources, self._get_policy_config(policy.name),
                                       self._sdk("stack_tags"))
            try:
                result = policy.validate(args, report)
                if inspect.isawaitable(result):
                    loop = asyncio.new_event_loop()
                    loop.run_until_complete(result)
                    loop.close()
            except UnknownValueError as unknown:
                pack, version = self._sdk("policy_pack_name"), self._sdk("policy_pack_version")
                response.diagnostics.append(PROTO.AnalyzeDiagnostic(
                    policyName=policy.name,
                    policyPackName=pack,
                    policyPackVersion=version,
                    message=(f"can't run policy '{policy.name}' from policy pack '{pack}@v{version}' during preview: "
                             f"{unknown.message}"),
                    urn="",
                    description=policy.description,
                    enforcementLevel=self._map_enforcement_level(EnforcementLevel.ADVISORY),
                ))
            except sdk._NotApplicableError as skipped:
                response.not_applicable.append(PROTO.PolicyNotApplicable(policy_name=policy.name,
                                                                             reason=skipped.reason or ""))
        return response

    def _sdk(self, name: str) -> Any:
        """An attribute the SDK's servicer keeps private (its name mangled by the class)."""
        return getattr(self, f"_PolicyAnalyzerServicer__{name}")

    def _stack(self, request: Any) -> list[PolicyResource]:
        """Every resource as the SDK builds it for a stack policy, parents and dependencies linked."""
        built = [
            PolicyResource(r.type, unknown_checking_proxy(deserialize_properties(MESSAGE_TO_DICT(
                r.properties))), r.urn, r.name, self._get_resource_options(r), self._get_provider_resource(r), None,
                [], {})
            for r in request.resources
        ]
        by_urn = {resource.urn: resource for resource in built}
        for r, resource in zip(request.resources, built, strict=True):
            resource.parent = by_urn.get(r.parent)
            resource.dependencies.extend(by_urn[d] for d in r.dependencies if d in by_urn)
            for key, dependencies in r.propertyDependencies.items():
                resource.property_dependencies[key] = [by_urn[d] for d in dependencies.urns if d in by_urn]
        return built
