"""The pack's analyzer answers AnalyzeStack exactly as the SDK's own servicer does, building the stack once."""

import contextvars
import copy
import inspect
from typing import Any

import analyzer
import pack
import pulumi
import pytest
from pulumi.output import UNKNOWN
from pulumi_policy import EnforcementLevel
from pulumi_policy import policy as sdk

from runbooks.offline.engine import ResourceGraph, run_program
from runbooks.offline.policy_pack import _stack_resource
from tests.builders import REPO

MONITORING_STACK_TYPE = "gpucluster:monitoring:Stack"


@pytest.fixture(scope="module")
def prod() -> ResourceGraph:
    return run_program(REPO, "prod")


def pack_policies() -> list[Any]:
    # What the pack's __main__.py serves (importing it would serve the pack and never return).
    return pack.all_policies()


def servicers(initial_config: dict[str, Any] | None) -> tuple[Any, Any]:
    made = [cls("gpu-cluster", "0.1.0", pack_policies(), EnforcementLevel.MANDATORY, initial_config, None, None, None,
                None, None, None) for cls in (analyzer.SDK_SERVICER, analyzer.StackBuiltOnceServicer)]
    return made[0], made[1]


def unknown_heat(graph: ResourceGraph) -> None:
    rack = next(r for r in graph.resources.values() if r.type == "gpucluster:facility:Rack")
    rack.outputs["heat_load_kw"] = UNKNOWN


def no_monitoring(graph: ResourceGraph) -> None:
    for urn in [u for u, r in graph.resources.items() if r.type == MONITORING_STACK_TYPE]:
        del graph.resources[urn]


def hot_rack(graph: ResourceGraph) -> None:
    for rack in (r for r in graph.resources.values() if r.type == "gpucluster:facility:Rack"):
        rack.outputs["cooling_capacity_kw"] = 1


@pytest.mark.parametrize(("mutate", "initial_config", "findings"), [
    pytest.param(lambda g: None, None, 0, id="the prod stack"),
    pytest.param(hot_rack, None, 4, id="violations on every rack"),
    pytest.param(unknown_heat, None, 1, id="a value unknown at preview"),
    pytest.param(no_monitoring, None, 8, id="not applicable without the monitoring stack"),
    pytest.param(hot_rack, {"rack-heat-within-cooling": EnforcementLevel.ADVISORY,
                            "rack-load-within-power": EnforcementLevel.DISABLED,
                            "gpu-node-in-rack": EnforcementLevel.REMEDIATE}, 4, id="levels set by config"),
])
def test_should_answer_as_the_sdks_servicer(prod: ResourceGraph, mutate: Any, initial_config: Any,
                                            findings: int) -> None:
    graph = copy.deepcopy(prod)
    mutate(graph)
    resources = [_stack_resource(r, graph) for r in graph.resources.values()]
    request = analyzer.PROTO.AnalyzeStackRequest(resources=resources)
    theirs, ours = servicers(initial_config)
    expected, got = theirs.AnalyzeStack(request, None), ours.AnalyzeStack(request, None)
    assert got == expected
    assert len(expected.diagnostics) + len(expected.not_applicable) >= findings


def test_should_be_the_servicer_the_pack_serves() -> None:
    source = (REPO / "policy" / "__main__.py").read_text()
    assert "sdk._PolicyAnalyzerServicer = analyzer.StackBuiltOnceServicer" in source
    assert sdk.PolicyPack.__init__.__code__.co_names.count("_PolicyAnalyzerServicer") == 1


def test_should_learn_the_settings_signature_once_and_still_configure_every_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert sdk.signature(pulumi.runtime.Settings) == inspect.signature(pulumi.runtime.Settings)
    assert sdk.signature(pulumi.runtime.Settings) is sdk.signature(pulumi.runtime.Settings)
    for name, value in {"PULUMI_PROJECT": "gpu-cluster", "PULUMI_STACK": "prod", "PULUMI_DRY_RUN": "true"}.items():
        monkeypatch.setenv(name, value)
    _, ours = servicers(None)

    def configured() -> tuple[str, str, bool]:
        ours._configure_runtime_settings()
        return pulumi.get_project(), pulumi.get_stack(), pulumi.runtime.is_dry_run()

    # gRPC runs each call in a fresh context, where the SDK keeps its settings: each one gets them.
    assert [contextvars.Context().run(configured) for _ in range(2)] == [("gpu-cluster", "prod", True)] * 2
