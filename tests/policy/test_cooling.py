"""Cooling policies on small rack/node fixtures: one breaking and one passing case per rule, unknowns fail closed."""

from typing import Any

import cooling
import pytest
from common import GPU_NODE_TYPE, RACK_TYPE
from pulumi_policy import StackValidationPolicy
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE

from tests.policy.builders import changed, judge_stack, resource

RACK: dict[str, Any] = {
    "power_budget_kw": 40, "usable_kw": 32, "it_load_kw": 25.96, "heat_load_kw": 25.96, "cooling_type": "rear-door",
    "cooling_capacity_kw": 40, "feed_capacity_kw": {"A": 32, "B": 32}, "gpu_count": 32,
}
A800 = {"rack": "a01", "gpu_model": "A800-SXM4-80GB", "gpu_class": "dense", "gpu_count": 8, "pool": "slurm"}
RTX4090 = {"rack": "a01", "gpu_model": "RTX-4090", "gpu_class": "consumer", "gpu_count": 8, "pool": "kubernetes"}


def judge(policy: StackValidationPolicy, rack: dict[str, Any], node: dict[str, Any] = A800) -> list[str]:
    rack_resource = resource(RACK_TYPE, "a01", rack)
    return judge_stack(policy, rack_resource, resource(GPU_NODE_TYPE, "gpu-a800-01", node, rack_resource)).messages


NODES = "(GPU nodes: gpu-a800-01)"


@pytest.mark.parametrize(("policy", "rack", "node", "expected"), [
    pytest.param(cooling.RACK_HEAT_WITHIN_COOLING, changed(RACK, heat_load_kw=41.6, cooling_capacity_kw=15), A800,
                 [f"Rack a01: heat load 41.6 kW exceeds cooling capacity 15 kW {NODES}"],
                 id="should deny a GPU node in a rack whose heat load exceeds its cooling"),
    pytest.param(cooling.RACK_HEAT_WITHIN_COOLING, RACK, A800, [],
                 id="should admit a GPU node in a rack whose cooling removes its heat"),
    pytest.param(cooling.RACK_LOAD_WITHIN_POWER, changed(RACK, it_load_kw=33.5), A800,
                 [f"Rack a01: IT load 33.5 kW exceeds usable power 32 kW {NODES}"],
                 id="should deny a GPU node in a rack drawing more than its usable power"),
    pytest.param(cooling.RACK_LOAD_WITHIN_POWER, RACK, A800, [],
                 id="should admit a GPU node in a rack within its usable power"),
    pytest.param(cooling.RACK_DUAL_FEEDS, changed(RACK, feed_capacity_kw__B=20), A800,
                 [f"Rack a01: feed B carries 20 kW, under the IT load of 25.96 kW "
                  f"(each feed must carry the whole rack alone) {NODES}"],
                 id="should deny a rack whose feed B cannot carry the whole load"),
    pytest.param(cooling.RACK_DUAL_FEEDS, changed(RACK, feed_capacity_kw={"A": 32}), A800,
                 [f"Rack a01: feed_capacity_kw.B is missing {NODES}"],
                 id="should deny a rack with a single feed"),
    pytest.param(cooling.RACK_DUAL_FEEDS, RACK, A800, [],
                 id="should admit a rack whose feeds each carry the whole load"),
    pytest.param(cooling.DENSE_GPUS_IN_DENSE_RACKS, changed(RACK, power_budget_kw=15, cooling_type="air"), A800,
                 ["Rack a01 holds dense GPUs on gpu-a800-01 (A800-SXM4-80GB) but its power budget is 15 kW "
                  "(dense racks need >= 40 kW) and it is air-cooled (dense racks need liquid or rear-door cooling) "
                  + NODES],
                 id="should deny dense GPUs in an air-cooled 15 kW rack"),
    pytest.param(cooling.DENSE_GPUS_IN_DENSE_RACKS, changed(RACK, power_budget_kw=15, cooling_type="air"), RTX4090,
                 [], id="should admit consumer GPUs in an air-cooled 15 kW rack"),
    pytest.param(cooling.DENSE_GPUS_IN_DENSE_RACKS, RACK, A800, [],
                 id="should admit dense GPUs in a 40 kW rear-door rack"),
    pytest.param(cooling.RACK_HEAT_WITHIN_COOLING, changed(RACK, heat_load_kw=UNKNOWN_NUMBER_VALUE), A800,
                 [f"Rack a01: heat_load_kw is unknown at preview; this policy fails closed {NODES}"],
                 id="should deny a rack whose heat load is unknown at preview"),
    pytest.param(cooling.RACK_DUAL_FEEDS, changed(RACK, feed_capacity_kw__A=UNKNOWN_NUMBER_VALUE), A800,
                 [f"Rack a01: feed_capacity_kw.A is unknown at preview; this policy fails closed {NODES}"],
                 id="should deny a rack whose feed capacity is unknown at preview"),
    pytest.param(cooling.DENSE_GPUS_IN_DENSE_RACKS, RACK, changed(A800, gpu_class=UNKNOWN_STRING_VALUE),
                 [f"GpuNode gpu-a800-01: gpu_class is unknown at preview; this policy fails closed {NODES}"],
                 id="should deny a node whose GPU class is unknown at preview"),
    pytest.param(cooling.RACK_HEAT_WITHIN_COOLING, changed(RACK, heat_load_kw="26 kW"), A800,
                 [f"Rack a01: heat_load_kw must be a number, got '26 kW' {NODES}"],
                 id="should deny a rack whose heat load is not a number"),
])
def test_rack_rules(policy: StackValidationPolicy, rack: dict[str, Any], node: dict[str, Any],
                    expected: list[str]) -> None:
    assert judge(policy, rack, node) == expected


def test_should_report_a_bad_rack_once_against_the_rack() -> None:
    rack = resource(RACK_TYPE, "a01", changed(RACK, heat_load_kw=41.6, cooling_capacity_kw=15))
    nodes = [resource(GPU_NODE_TYPE, f"gpu-a800-0{i}", A800, rack) for i in (2, 1)]
    outcome = judge_stack(cooling.RACK_HEAT_WITHIN_COOLING, rack, *nodes)
    assert outcome.violations == [
        ("Rack a01: heat load 41.6 kW exceeds cooling capacity 15 kW (GPU nodes: gpu-a800-01, gpu-a800-02)",
         rack.urn),
    ]


@pytest.mark.parametrize(("parent_type", "expected"), [
    pytest.param("gpucluster:facility:Facility", ["GpuNode gpu-a800-01 has Facility prod-facility instead of a "
                                                  "Rack, so its power and cooling are unplanned"],
                 id="should deny a GPU node parented outside a rack"),
    pytest.param(None, ["GpuNode gpu-a800-01 has no parent instead of a Rack, so its power and cooling are "
                        "unplanned"], id="should deny a GPU node without a parent"),
    pytest.param(RACK_TYPE, [], id="should admit a GPU node inside a rack"),
])
def test_gpu_node_in_rack(parent_type: str | None, expected: list[str]) -> None:
    parent = resource(parent_type, "prod-facility", RACK) if parent_type else None
    assert judge_stack(cooling.GPU_NODE_IN_RACK, resource(GPU_NODE_TYPE, "gpu-a800-01", A800, parent)).messages \
        == expected
