"""Rack power and cooling: every GPU node sits in a rack that can feed it and carry its heat away.

Judged on the Rack and GpuNode components' registered outputs (AnalyzeStack), once per rack that holds GPU
nodes, so a bad rack is one violation naming its nodes rather than one per node.
"""

from collections.abc import Callable

from common import GPU_NODE_TYPE, RACK_TYPE, ViolationError, describe, number, of_type, text
from pulumi_policy import (
    PolicyResource,
    ReportViolation,
    StackValidation,
    StackValidationArgs,
    StackValidationPolicy,
)

DENSE_CLASS = "dense"
DENSE_MIN_POWER_BUDGET_KW = 40.0
"""kW a rack needs before it may hold dense GPUs (A800/A100/H100, ~6.5 kW per 8-GPU node)."""
DENSE_FORBIDDEN_COOLING = "air"
"""Air alone cannot remove a dense rack's heat; it needs rear-door or direct liquid cooling."""
FEEDS = ("A", "B")

RackCheck = Callable[[PolicyResource, list[PolicyResource]], None]
"""A rule on one rack and the GPU nodes in it; raises ViolationError when the rack breaks it."""


def racks_of_gpu_nodes(args: StackValidationArgs) -> list[tuple[PolicyResource, list[PolicyResource]]]:
    """Each rack that holds GPU nodes, with those nodes (nodes without a Rack parent are gpu-node-in-rack's)."""
    racks: dict[str, tuple[PolicyResource, list[PolicyResource]]] = {}
    for node in of_type(args, GPU_NODE_TYPE):
        if node.parent is not None and node.parent.resource_type == RACK_TYPE:
            racks.setdefault(node.parent.urn, (node.parent, []))[1].append(node)
    return list(racks.values())


def per_rack(check: RackCheck) -> StackValidation:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        for rack, nodes in racks_of_gpu_nodes(args):
            try:
                check(rack, nodes)
            except ViolationError as problem:
                report(f"{problem} (GPU nodes: {', '.join(sorted(n.name for n in nodes))})", rack.urn)
    return validate


def validate_in_rack(args: StackValidationArgs, report: ReportViolation) -> None:
    for node in of_type(args, GPU_NODE_TYPE):
        if node.parent is None or node.parent.resource_type != RACK_TYPE:
            parent = describe(node.parent) if node.parent is not None else "no parent"
            report(f"{describe(node)} has {parent} instead of a Rack, so its power and cooling are unplanned",
                   node.urn)


def check_heat(rack: PolicyResource, nodes: list[PolicyResource]) -> None:
    heat, cooling = number(rack, "heat_load_kw"), number(rack, "cooling_capacity_kw")
    if heat > cooling:
        raise ViolationError(f"{describe(rack)}: heat load {heat:g} kW exceeds cooling capacity {cooling:g} kW")


def check_power(rack: PolicyResource, nodes: list[PolicyResource]) -> None:
    load, usable = number(rack, "it_load_kw"), number(rack, "usable_kw")
    if load > usable:
        raise ViolationError(f"{describe(rack)}: IT load {load:g} kW exceeds usable power {usable:g} kW")


def check_feeds(rack: PolicyResource, nodes: list[PolicyResource]) -> None:
    load = number(rack, "it_load_kw")
    short = [f"feed {feed} carries {kw:g} kW" for feed in FEEDS
             if (kw := number(rack, f"feed_capacity_kw.{feed}")) < load]
    if short:
        raise ViolationError(f"{describe(rack)}: {' and '.join(short)}, under the IT load of {load:g} kW "
                        "(each feed must carry the whole rack alone)")


def check_dense(rack: PolicyResource, nodes: list[PolicyResource]) -> None:
    dense = [f"{n.name} ({text(n, 'gpu_model')})" for n in sorted(nodes, key=lambda n: n.name)
             if text(n, "gpu_class") == DENSE_CLASS]
    if not dense:
        return
    budget, cooling = number(rack, "power_budget_kw"), text(rack, "cooling_type")
    faults = []
    if budget < DENSE_MIN_POWER_BUDGET_KW:
        faults.append(f"its power budget is {budget:g} kW (dense racks need >= {DENSE_MIN_POWER_BUDGET_KW:g} kW)")
    if cooling == DENSE_FORBIDDEN_COOLING:
        faults.append(f"it is {cooling}-cooled (dense racks need liquid or rear-door cooling)")
    if faults:
        raise ViolationError(f"{describe(rack)} holds dense GPUs on {', '.join(dense)} but {' and '.join(faults)}")


GPU_NODE_IN_RACK = StackValidationPolicy(
    name="gpu-node-in-rack",
    description="Every GPU node is a child of the Rack whose power and cooling plan covers it.",
    validate=validate_in_rack,
)
RACK_HEAT_WITHIN_COOLING = StackValidationPolicy(
    name="rack-heat-within-cooling",
    description="A rack holding GPU nodes produces no more heat than its cooling removes.",
    validate=per_rack(check_heat),
)
RACK_LOAD_WITHIN_POWER = StackValidationPolicy(
    name="rack-load-within-power",
    description="A rack holding GPU nodes draws no more IT load than its usable power after headroom.",
    validate=per_rack(check_power),
)
RACK_DUAL_FEEDS = StackValidationPolicy(
    name="rack-dual-feeds",
    description="A rack holding GPU nodes has feeds A and B, each able to carry its whole IT load.",
    validate=per_rack(check_feeds),
)
DENSE_GPUS_IN_DENSE_RACKS = StackValidationPolicy(
    name="dense-gpus-in-dense-racks",
    description=f"Dense GPUs sit only in racks of >= {DENSE_MIN_POWER_BUDGET_KW:g} kW that are not air-cooled.",
    validate=per_rack(check_dense),
)

POLICIES = [GPU_NODE_IN_RACK, RACK_HEAT_WITHIN_COOLING, RACK_LOAD_WITHIN_POWER, RACK_DUAL_FEEDS,
            DENSE_GPUS_IN_DENSE_RACKS]
