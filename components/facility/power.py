"""Rack power and cooling planning: what each node draws, what each rack must carry and shed.

Pure: the same plan feeds the spec checks (fail before any resource) and the facility components
(whose props and outputs carry the figures and verdicts the policy pack judges).
"""

import math
from collections import Counter
from dataclasses import dataclass

from components.site import defaults
from components.site.catalog import GpuClass
from components.site.derived import once_per_site
from components.site.problems import Problem
from components.site.rules import Rule, rule
from components.site.site import CoolingType, Feed, NodeGroup, Pdu, Rack, Site

RACK_READS = ("racks", "node_groups", "gpu_catalog")
"""What a rack's plan is made of: the rack, the nodes in it and their GPUs' draw."""


@dataclass(frozen=True)
class NodeLoad:
    name: str
    group: str
    rack: str
    pool: str
    gpu_model: str
    gpu_class: GpuClass
    gpus: int
    draw_kw: float
    """kW at the wall with every GPU at TDP: (GPUs x TDP + platform) / PSU efficiency."""


@dataclass(frozen=True)
class RackPlan:
    index: int
    rack: Rack
    nodes: tuple[NodeLoad, ...]
    problems: tuple[Problem, ...]

    @property
    def it_load_kw(self) -> float:
        return sum(n.draw_kw for n in self.nodes)

    @property
    def heat_load_kw(self) -> float:
        # Every watt a rack draws leaves it as heat.
        return self.it_load_kw

    @property
    def usable_kw(self) -> float:
        return usable_kw(self.rack)

    @property
    def gpu_count(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def feed_capacity_kw(self) -> dict[str, float]:
        return {feed.value: feed_capacity_kw(self.rack, feed) for feed in Feed}

    @property
    def verdicts(self) -> dict[str, bool]:
        broken = {p.rule for p in self.problems}
        return {r.id: r.id not in broken for r in RULES}


def node_draw_kw(site: Site, group: NodeGroup) -> float:
    gpu = site.gpu(group)
    return (group.gpus_per_node * gpu.tdp_w + site.platform_w(group)) / group.psu_efficiency / 1000


def usable_kw(rack: Rack) -> float:
    return rack.power_budget_kw * (1 - rack.headroom_pct / 100)


def pdu_capacity_kw(pdu: Pdu) -> float:
    """kW one PDU carries continuously: V x A (x sqrt(3) for three-phase) x 80 % derating."""
    phase_factor = math.sqrt(3) if pdu.phases == 3 else 1.0
    return pdu.voltage_v * pdu.current_a * phase_factor * defaults.PDU_CONTINUOUS_DERATING / 1000


def feed_capacity_kw(rack: Rack, feed: Feed) -> float:
    return sum(pdu_capacity_kw(p) for p in rack.pdus if p.feed == feed)


def node_loads(site: Site) -> list[NodeLoad]:
    """Every node whose GPU model is known, with its draw; unknown models are reported elsewhere."""
    loads = []
    for group in site.node_groups:
        if group.gpu_model not in site.gpu_catalog:
            continue
        gpu = site.gpu(group)
        draw = node_draw_kw(site, group)
        for node in group.nodes:
            loads.append(
                NodeLoad(node.name, group.name, node.rack, group.pool.value, group.gpu_model,
                         gpu.gpu_class, group.gpus_per_node, draw)
            )
    return loads


@once_per_site
def plan_racks(site: Site) -> list[RackPlan]:
    by_rack: dict[str, list[NodeLoad]] = {}
    for load in node_loads(site):
        by_rack.setdefault(load.rack, []).append(load)
    plans = []
    for index, rack in enumerate(site.racks):
        nodes = tuple(by_rack.get(rack.name, ()))
        draft = RackPlan(index, rack, nodes, ())
        plans.append(RackPlan(index, rack, nodes, tuple(p for r in RULES for p in r.judge(draft))))
    return plans


def on_every_rack(rack_rule: Rule[RackPlan]) -> Rule[Site]:
    """The rack rule as a rule of the site: its problems on every rack of the (once-made) plan."""
    def check_racks(site: Site) -> list[Problem]:
        return [p for plan in plan_racks(site) for p in plan.problems if p.rule == rack_rule.id]
    return rule(rack_rule.id, check_racks, *RACK_READS)


def _describe(nodes: tuple[NodeLoad, ...]) -> str:
    counts = Counter(n.gpu_model for n in nodes)
    return " + ".join(f"{count} x {model}" for model, count in counts.items()) + " nodes"


def check_power_budget(plan: RackPlan) -> list[Problem]:
    rack = plan.rack
    if plan.it_load_kw <= plan.usable_kw:
        return []
    return [Problem(
        f"racks[{plan.index}].power_budget_kw",
        f"planned draw {plan.it_load_kw:.1f} kW of {_describe(plan.nodes)} exceeds budget "
        f"{rack.power_budget_kw:g} kW less {rack.headroom_pct:g} % headroom ({plan.usable_kw:.1f} kW usable)",
    )]


def check_cooling(plan: RackPlan) -> list[Problem]:
    cooling = plan.rack.cooling
    path = f"racks[{plan.index}].cooling.capacity_kw"
    problems = []
    limit = defaults.COOLING_MAX_KW[cooling.type.value]
    if cooling.capacity_kw > limit:
        problems.append(Problem(
            path,
            f"{cooling.type.value} cooling removes at most {limit:g} kW per rack, not {cooling.capacity_kw:g} kW",
        ))
    if plan.heat_load_kw > cooling.capacity_kw:
        problems.append(Problem(
            path,
            f"{cooling.capacity_kw:g} kW cannot remove {plan.heat_load_kw:.1f} kW of heat from {_describe(plan.nodes)}",
        ))
    return problems


def check_dense_placement(plan: RackPlan) -> list[Problem]:
    dense = sorted({n.gpu_model for n in plan.nodes if n.gpu_class == GpuClass.DENSE})
    if not dense:
        return []
    rack, models = plan.rack, ", ".join(dense)
    problems = []
    if rack.power_budget_kw < defaults.DENSE_RACK_MIN_KW:
        problems.append(Problem(
            f"racks[{plan.index}].power_budget_kw",
            f"dense GPUs ({models}) need a rack of at least {defaults.DENSE_RACK_MIN_KW:g} kW, "
            f"not {rack.power_budget_kw:g} kW",
        ))
    if rack.cooling.type == CoolingType.AIR:
        problems.append(Problem(
            f"racks[{plan.index}].cooling.type",
            f"dense GPUs ({models}) never go in an air-cooled rack; use in-row chilled water, "
            "direct liquid or immersion",
        ))
    return problems


def check_pdus(plan: RackPlan) -> list[Problem]:
    rack, base = plan.rack, f"racks[{plan.index}].pdus"
    problems = []
    for j, pdu in enumerate(rack.pdus):
        if pdu.current_a not in defaults.PDU_SOCKET_RATINGS_A:
            problems.append(Problem(
                f"{base}[{j}].current_a",
                f"{pdu.current_a} A is not a site socket rating (32 or 63 A)",
            ))
        if pdu.phases not in (1, 3):
            problems.append(Problem(f"{base}[{j}].phases", f"{pdu.phases} phases: must be 1 or 3"))
    for feed in Feed:
        capacity = feed_capacity_kw(rack, feed)
        if capacity == 0:
            problems.append(Problem(
                base, f"no PDU on feed {feed.value}; every rack needs dual-path power (feeds A and B)",
            ))
        elif capacity < plan.it_load_kw:
            problems.append(Problem(
                base,
                f"feed {feed.value} alone carries {capacity:.1f} kW at "
                f"{defaults.PDU_CONTINUOUS_DERATING * 100:g} % continuous derating, less than the rack's "
                f"{plan.it_load_kw:.1f} kW",
            ))
    return problems


RULES: tuple[Rule[RackPlan], ...] = (
    rule("rack-load-within-power", check_power_budget, *RACK_READS),
    rule("rack-heat-within-cooling", check_cooling, *RACK_READS),
    rule("dense-gpus-in-dense-racks", check_dense_placement, *RACK_READS),
    rule("rack-dual-feeds", check_pdus, *RACK_READS),
)
"""The rack rules, named as the policy pack's policies that judge the same rack facts again
(tests/policy/test_contract.py)."""
