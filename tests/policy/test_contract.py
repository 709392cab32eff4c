"""The pack's names and thresholds, held to the program's: the pack imports nothing from the program at run time,
so each value it re-declares is pinned here to the one the program uses."""

from typing import Any

import common
import cooling
import pytest
import teams

from components.facility.power import RULES as RACK_RULES
from components.scheduling.kueue import TEAM_QUEUE
from components.spec import defaults, wellknown
from components.spec.catalog import GpuClass
from components.spec.site import CoolingType

PINNED = [
    ("common.RACK_TYPE", common.RACK_TYPE, wellknown.RACK_TYPE),
    ("common.GPU_NODE_TYPE", common.GPU_NODE_TYPE, wellknown.GPU_NODE_TYPE),
    ("common.MONITORING_STACK_TYPE", common.MONITORING_STACK_TYPE, wellknown.MONITORING_TYPE),
    ("common.STORAGE_TIERS_TYPE", common.STORAGE_TIERS_TYPE, wellknown.STORAGE_TYPE),
    ("common.SLURM_TYPE", common.SLURM_TYPE, wellknown.SLURM_TYPE),
    ("common.TEAM_LABEL", common.TEAM_LABEL, wellknown.TEAM_LABEL),
    ("cooling.DENSE_CLASS", cooling.DENSE_CLASS, GpuClass.DENSE.value),
    ("cooling.DENSE_MIN_POWER_BUDGET_KW", cooling.DENSE_MIN_POWER_BUDGET_KW, defaults.DENSE_RACK_MIN_KW),
    ("cooling.DENSE_FORBIDDEN_COOLING", cooling.DENSE_FORBIDDEN_COOLING, CoolingType.AIR.value),
    ("teams.DEFAULT_QUEUE", teams.DEFAULT_QUEUE, TEAM_QUEUE),
]


@pytest.mark.parametrize(("name", "pack", "program"), PINNED, ids=[p[0] for p in PINNED])
def test_should_hold_the_packs_value_to_the_programs(name: str, pack: Any, program: Any) -> None:
    assert pack == program, f"{name} is {pack!r} in the pack, {program!r} in the program"


def test_should_key_only_on_type_tokens_the_program_registers() -> None:
    tokens = {value for name, value in vars(common).items() if name.endswith("_TYPE") and isinstance(value, str)}
    registered = {value for name, value in vars(wellknown).items() if name.endswith("_TYPE")}
    assert tokens <= registered


def test_should_name_each_rack_rule_as_the_pack_names_the_policy_that_judges_it() -> None:
    assert {r.id for r in RACK_RULES} <= {policy.name for policy in cooling.POLICIES}
