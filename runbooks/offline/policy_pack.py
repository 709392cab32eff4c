"""Run the CrossGuard pack on a ResourceGraph the way the Pulumi engine does, without the engine.

The CLI starts a Python pack as `python -m pulumi.policy <engine-address> <pack-dir>`; the pack's runtime parses the
engine address but never dials it, builds the PolicyPack, prints the port its gRPC server listens on and serves
until killed. We start it the same way, then speak the Analyzer protocol to it: GetAnalyzerInfo, Configure (every
policy, like the CLI, so an unset level never falls back to the proto default, advisory), then for every custom
resource Remediate and Analyze on its inputs, and AnalyzeStack once on every resource's outputs with parents and
dependencies. Secrets travel in their wire form with a placeholder value; unknowns as the engine's sentinel.
"""

import os
import re
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# No stubs for grpcio/protobuf are pinned in pyproject; types-grpcio and types-protobuf would let these go.
import grpc  # type: ignore[import-untyped]
from google.protobuf import empty_pb2, struct_pb2  # type: ignore[import-untyped]
from pulumi.output import Unknown
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi.runtime.proto.analyzer_pb2_grpc import AnalyzerStub

from runbooks.children import cause, exit_status, tail
from runbooks.offline.engine import Resource, ResourceGraph, Secret, no_collection

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
ENGINE_ADDRESS = "127.0.0.1:0"
"""Required by the pack's command line, never dialed: the pack only serves."""
START_TIMEOUT_S = 30.0
IN_FLIGHT = 64
"""Resources whose Remediate and Analyze calls are under way at once: enough to keep the pack busy while this side
builds requests; thousands at once had the channel cancel calls (8,192 GPUs, 4,420 custom resources)."""
SECRET_WIRE_VALUE = "[secret]"
"""The graph never holds a secret's value; the pack gets this in the secret's place."""
LEVELS = ("advisory", "mandatory", "remediate", "disabled")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class PolicyPackError(Exception):
    """The pack's process did not start or died: the program failed, not the input."""


class PolicyConfigError(Exception):
    """The policy config names a policy or level the pack does not have: invalid input."""


@dataclass(frozen=True)
class Finding:
    message: str
    """The policy's own message (the pack prefixes the policy's description; that prefix is removed)."""
    urn: str
    """The resource it names; empty for a finding on the whole stack."""
    enforcement_level: str
    """As reported: an unknown value a policy does not handle comes back advisory (`can't run policy`)."""


@dataclass
class PolicyResult:
    name: str
    enforcement_level: str
    """The level the pack ran the policy at, after the policy config."""
    violations: list[Finding] = field(default_factory=list)
    remediated: list[str] = field(default_factory=list)
    """URNs whose inputs the policy rewrote (remediation policies)."""
    not_applicable: list[str] = field(default_factory=list)
    """Reasons the policy gave for not judging (deduplicated)."""

    @property
    def passed(self) -> bool:
        return not self.violations


class PolicyPack:
    """The pack's process, started as the CLI starts it; it serves once it has printed its port. Started before the
    program runs, it loads its modules meanwhile (0.25-0.35 s of wall time here), on the core the program leaves."""

    def __init__(self, policy_dir: Path, project: str, stack: str) -> None:
        self.project, self.stack = project, stack
        env = {**os.environ, "PULUMI_PROJECT": project, "PULUMI_STACK": stack, "PULUMI_DRY_RUN": "true"}
        # stderr goes to a file: a pack that logs a lot must never block on a full pipe.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close(), with the process)
        self._process = subprocess.Popen([sys.executable, "-m", "pulumi.policy", ENGINE_ADDRESS, str(policy_dir)],
                                         stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self._port: int | None = None

    def port(self) -> int:
        """The port it serves on, once it says it (PolicyPackError where it dies or stays silent first)."""
        if self._port is None:
            self._port = _read_port(self._process, self._stderr)
        return self._port

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> "PolicyPack":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def check_policies(graph: ResourceGraph, config: dict[str, Any] | None = None,
                   policy_dir: Path = POLICY_DIR, pack: PolicyPack | None = None) -> list[PolicyResult]:
    """Every policy in the pack, judged on the graph, with `config` in the `--policy-pack-config` JSON form: by pack,
    started for the graph's project and stack (the caller closes it), else by a pack started now."""
    if config is not None and not isinstance(config, dict):
        raise PolicyConfigError(f"policy config must be a JSON object of policy names, got {type(config).__name__}")
    with _serve(policy_dir, graph, pack) as stub, no_collection():
        info = stub.GetAnalyzerInfo(empty_pb2.Empty())
        levels = _levels(info, config or {})
        stub.Configure(proto.ConfigureAnalyzerRequest(policyConfig={
            policy.name: proto.PolicyConfig(
                enforcementLevel=proto.EnforcementLevel.Value(levels[policy.name].upper()),
                properties=_struct(_properties((config or {}).get(policy.name))),
            ) for policy in info.policies
        }))
        results = {name: PolicyResult(name, level) for name, level in levels.items()}
        # Each resource is remediated, then analyzed on what the remediation made of it, as the engine does; the
        # resources are independent, so IN_FLIGHT of them have their calls under way at once (a call's round trip,
        # not the pack's work, was most of the per-resource cost), read back in the graph's order.
        custom = [resource for resource in graph.resources.values() if resource.custom]
        for start in range(0, len(custom), IN_FLIGHT):
            batch = [(r.urn, _analyze_request(r, graph)) for r in custom[start:start + IN_FLIGHT]]
            remediating = [stub.Remediate.future(request) for _, request in batch]
            analyzing = []
            for (urn, request), remediate in zip(batch, remediating, strict=True):
                for remediation in remediate.result().remediations:
                    if remediation.HasField("properties"):
                        results[remediation.policyName].remediated.append(urn)
                        request.properties.CopyFrom(remediation.properties)
                analyzing.append(stub.Analyze.future(request))
            for analyze in analyzing:
                _collect(analyze.result(), results)
        _collect(stub.AnalyzeStack(proto.AnalyzeStackRequest(
            resources=[_stack_resource(r, graph) for r in graph.resources.values()])), results)
    return list(results.values())


@contextmanager
def _serve(policy_dir: Path, graph: ResourceGraph, pack: PolicyPack | None) -> Iterator[AnalyzerStub]:
    with nullcontext(pack) if pack else PolicyPack(policy_dir, graph.project, graph.stack) as serving:
        assert (serving.project, serving.stack) == (graph.project, graph.stack), "a pack started for another stack"
        with grpc.insecure_channel(f"127.0.0.1:{serving.port()}") as channel:
            yield AnalyzerStub(channel)


def _read_port(process: "subprocess.Popen[bytes]", stderr: Any) -> int:
    assert process.stdout is not None
    # A pack that dies closes its stdout, which ends this wait at once; only a live, silent pack waits it out.
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    line = process.stdout.readline() if ready else b""
    if line.strip().isdigit():
        return int(line)
    if ready and not line:
        what = f"the policy pack {exit_status(process.wait(timeout=START_TIMEOUT_S))} before it served"
    else:
        process.kill()
        process.wait()
        what = (f"the policy pack printed {line!r} where its port belongs" if line
                else f"the policy pack printed no port within {START_TIMEOUT_S:g} s")
    stderr.seek(0)
    said = stderr.read().decode(errors="replace")
    reason = cause(said)
    raise PolicyPackError("\n  ".join([f"{what}: {reason}" if reason else what, *tail(said)]))


def _levels(info: Any, config: dict[str, Any]) -> dict[str, str]:
    declared = {p.name: proto.EnforcementLevel.Name(p.enforcementLevel).lower() for p in info.policies}
    unknown = set(config) - set(declared) - {"all"}
    if unknown:
        raise PolicyConfigError(f"policy config names policies the pack lacks: {', '.join(sorted(unknown))}")
    levels = dict(declared)
    for name in ["all", *declared]:
        entry = config.get(name)
        level = entry.get("enforcementLevel") if isinstance(entry, dict) else entry
        if level is None:
            continue
        if level not in LEVELS:
            raise PolicyConfigError(
                f"policy config {name}: enforcementLevel {level!r} is not one of {', '.join(LEVELS)}")
        levels.update(dict.fromkeys(declared if name == "all" else [name], level))
    return levels


def _properties(entry: Any) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "enforcementLevel"} if isinstance(entry, dict) else {}


def _collect(response: Any, results: dict[str, PolicyResult]) -> None:
    for diagnostic in response.diagnostics:
        message = diagnostic.message.removeprefix(f"{diagnostic.description}\n")
        level = proto.EnforcementLevel.Name(diagnostic.enforcementLevel).lower()
        results[diagnostic.policyName].violations.append(Finding(message, diagnostic.urn, level))
    for skipped in response.not_applicable:
        reasons = results[skipped.policy_name].not_applicable
        if skipped.reason not in reasons:
            reasons.append(skipped.reason)


def _wire(value: Any) -> Any:
    """A recorded value in the form the engine sends it."""
    if isinstance(value, Secret):
        return {rpc._special_sig_key: rpc._special_secret_sig, "value": SECRET_WIRE_VALUE}
    if isinstance(value, Unknown):
        return rpc.UNKNOWN
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_wire(values))
    return struct


def _seconds(duration: str) -> float:
    return sum(float(n) * _SECONDS[unit] for n, unit in _DURATION.findall(duration))


def _options(resource: Resource) -> proto.AnalyzerResourceOptions:
    options = resource.options
    timeouts = options.get("custom_timeouts")
    return proto.AnalyzerResourceOptions(
        protect=bool(options.get("protect")),
        ignoreChanges=options.get("ignore_changes", []),
        deleteBeforeReplace=bool(options.get("delete_before_replace")),
        deleteBeforeReplaceDefined="delete_before_replace" in options,
        additionalSecretOutputs=options.get("additional_secret_outputs", []),
        customTimeouts=proto.AnalyzerResourceOptions.CustomTimeouts(
            **{k: _seconds(v) for k, v in timeouts.items()}) if timeouts else None,
        parent=resource.parent,
    )


def _provider(resource: Resource, graph: ResourceGraph) -> proto.AnalyzerProviderResource | None:
    reference = resource.options.get("provider")
    provider = graph.resources.get(reference.rsplit("::", 1)[0]) if reference else None
    if provider is None:
        return None
    return proto.AnalyzerProviderResource(type=provider.type, properties=_struct(provider.inputs),
                                          urn=provider.urn, name=provider.name)


def _analyze_request(resource: Resource, graph: ResourceGraph) -> proto.AnalyzeRequest:
    return proto.AnalyzeRequest(type=resource.type, properties=_struct(resource.inputs), urn=resource.urn,
                                name=resource.name, options=_options(resource), provider=_provider(resource, graph))


def _stack_resource(resource: Resource, graph: ResourceGraph) -> proto.AnalyzerResource:
    return proto.AnalyzerResource(
        type=resource.type,
        properties=_struct(resource.outputs),
        urn=resource.urn,
        name=resource.name,
        options=_options(resource),
        provider=_provider(resource, graph),
        parent=resource.parent,
        dependencies=resource.dependencies,
        propertyDependencies={k: proto.AnalyzerPropertyDependencies(urns=v)
                              for k, v in resource.property_dependencies.items()},
    )
