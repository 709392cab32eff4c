"""The physical hierarchy, Facility > Rack > GpuNode, carrying the power and cooling plan.

The figures and verdicts are each component's props (what Analyze sees) and outputs (what
AnalyzeStack sees), so the policy pack judges the same numbers the spec checks used.
"""

from typing import Any

import pulumi

from components.power import NodeLoad, RackPlan, plan_racks
from components.site import Site

FACILITY_TYPE = "gpucluster:facility:Facility"
RACK_TYPE = "gpucluster:facility:Rack"
GPU_NODE_TYPE = "gpucluster:facility:GpuNode"


def _kw(value: float) -> float:
    return round(value, 3)


class GpuNode(pulumi.ComponentResource):
    def __init__(self, load: NodeLoad, opts: pulumi.ResourceOptions) -> None:
        facts: dict[str, Any] = {
            "rack": load.rack,
            "node_group": load.group,
            "pool": load.pool,
            "gpu_model": load.gpu_model,
            "gpu_class": load.gpu_class.value,
            "gpu_count": load.gpus,
            "draw_kw": _kw(load.draw_kw),
        }
        super().__init__(GPU_NODE_TYPE, load.name, facts, opts)
        self.register_outputs(facts)


class Rack(pulumi.ComponentResource):
    def __init__(self, plan: RackPlan, opts: pulumi.ResourceOptions) -> None:
        rack = plan.rack
        facts: dict[str, Any] = {
            "room": rack.room,
            "power_budget_kw": rack.power_budget_kw,
            "headroom_pct": rack.headroom_pct,
            "usable_kw": _kw(plan.usable_kw),
            "it_load_kw": _kw(plan.it_load_kw),
            "heat_load_kw": _kw(plan.heat_load_kw),
            "cooling_type": rack.cooling.type.value,
            "cooling_capacity_kw": rack.cooling.capacity_kw,
            "feed_capacity_kw": {feed: _kw(kw) for feed, kw in plan.feed_capacity_kw.items()},
            "gpu_count": plan.gpu_count,
            "verdicts": plan.verdicts,
        }
        super().__init__(RACK_TYPE, rack.name, facts, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.nodes = [GpuNode(load, child) for load in plan.nodes]
        self.register_outputs(facts)


class Facility(pulumi.ComponentResource):
    def __init__(self, name: str, site: Site, opts: pulumi.ResourceOptions) -> None:
        super().__init__(FACILITY_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        plans = plan_racks(site)
        self.racks = [Rack(plan, child) for plan in plans]
        self.gpu_count = sum(p.gpu_count for p in plans)
        self.it_load_kw = _kw(sum(p.it_load_kw for p in plans))
        self.register_outputs({"gpu_count": self.gpu_count, "it_load_kw": self.it_load_kw})
