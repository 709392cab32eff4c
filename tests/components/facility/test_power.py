"""The power model's arithmetic, checked against hand-computed figures."""

from typing import Any

import pytest

from components.facility.power import RULES, feed_capacity_kw, node_draw_kw, pdu_capacity_kw, plan_racks
from components.site.site import Feed, Pdu
from tests.builders import parse, with_changes


def test_should_draw_gpus_at_tdp_plus_platform_over_psu_efficiency(prod: dict[str, Any]) -> None:
    site = parse(prod)
    a800, rtx4090 = site.node_groups[0], site.node_groups[3]
    assert node_draw_kw(site, a800) == pytest.approx((8 * 400 + 2900) / 0.94 / 1000)
    assert node_draw_kw(site, rtx4090) == pytest.approx((8 * 450 + 1200) / 0.94 / 1000)


def test_should_use_the_node_groups_own_platform_and_psu_figures(prod: dict[str, Any]) -> None:
    site = parse(with_changes(prod, node_groups__0__platform_w=2000, node_groups__0__psu_efficiency=0.9))
    assert node_draw_kw(site, site.node_groups[0]) == pytest.approx((3200 + 2000) / 0.9 / 1000)


@pytest.mark.parametrize(
    ("volts", "amps", "phases", "kw"),
    [
        pytest.param(380, 63, 3, 380 * 63 * 3**0.5 * 0.8 / 1000, id="three-phase counts sqrt(3)"),
        pytest.param(230, 32, 1, 230 * 32 * 0.8 / 1000, id="single-phase is V x A"),
    ],
)
def test_should_derate_a_pdu_to_80_percent(volts: int, amps: int, phases: int, kw: float) -> None:
    pdu = Pdu(name="p", feed=Feed.A, voltage_v=volts, current_a=amps, phases=phases)
    assert pdu_capacity_kw(pdu) == pytest.approx(kw)


def test_should_plan_each_rack_from_its_nodes(prod: dict[str, Any]) -> None:
    site = parse(prod)
    plans = {p.rack.name: p for p in plan_racks(site)}
    a01 = plans["a01"]
    assert [n.name for n in a01.nodes] == ["gpu-a800-01", "gpu-a800-02", "gpu-a800-03", "gpu-a800-04"]
    assert a01.it_load_kw == pytest.approx(4 * node_draw_kw(site, site.node_groups[0]))
    assert a01.heat_load_kw == a01.it_load_kw
    assert a01.usable_kw == pytest.approx(32.0)
    assert a01.feed_capacity_kw == {"A": feed_capacity_kw(a01.rack, Feed.A), "B": feed_capacity_kw(a01.rack, Feed.B)}
    assert a01.verdicts == {r.id: True for r in RULES}
    assert sum(p.gpu_count for p in plans.values()) == 128


def test_should_give_a_false_verdict_only_for_the_broken_rule(prod: dict[str, Any]) -> None:
    # Valid structure, broken cooling: the plan still has every rack, with the failed rule marked.
    site = parse(prod)
    broken = site.model_copy(update={"racks": [
        site.racks[0].model_copy(update={"cooling": site.racks[0].cooling.model_copy(update={"capacity_kw": 20.0})}),
        *site.racks[1:],
    ]})
    verdicts = plan_racks(broken)[0].verdicts
    assert verdicts == {"rack-load-within-power": True, "rack-heat-within-cooling": False,
                        "dense-gpus-in-dense-racks": True, "rack-dual-feeds": True}
