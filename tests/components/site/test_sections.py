"""Type errors and cross-field rules are reported together: a section that fails to parse skips only the rules that
read it (issue 21, case 12)."""

from typing import Any

import pytest

from components.site.sections import validate_sections
from components.site.site import Site
from components.validate import RULES
from tests.builders import parse, problems, with_changes

FIVE_PROBLEMS = {
    "racks__0__power_budget_kw": "lots",
    "slack__approvals_required": "two",
    "teams__6__stage": "beta",
    "monitoring": {"hot_retention_days": 30, "cold_retention_days": 10},
    "gpu_operator": {"driver_version": "470.1"},
}
"""Two type errors and three broken cross-field rules, none of which reads a section with a type error."""

FIVE_REPORTED = [
    'racks[0].power_budget_kw: Input should be a valid number, unable to parse string as a number (got "lots")',
    'slack.approvals_required: Input should be a valid integer, unable to parse string as an integer (got "two")',
    'teams[6].stage: no stage named "beta" (known: platform, canary, half, full)',
    "monitoring.cold_retention_days: the cold tier (10 days) must outlast the hot tier (30 days)",
    "gpu_operator.driver_version: 470.1 is older than node_check.min_driver_version 535.104.05, the oldest driver "
    "the site accepts",
]


def test_should_report_type_errors_and_cross_field_rules_in_one_run(prod: dict[str, Any]) -> None:
    assert problems(with_changes(prod, **FIVE_PROBLEMS)) == FIVE_REPORTED


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {"monitoring": {"hot_retention_days": "a month", "cold_retention_days": 10}},
            ['monitoring.hot_retention_days: Input should be a valid integer, unable to parse string as an integer '
             '(got "a month")'],
            id="skips the retention rule when monitoring failed to parse",
        ),
        pytest.param(
            # node racks and rack power read racks; the nodes' GPU models do not, and still count.
            {"racks__0__cooling": {"type": "fog"}, "node_groups__0__gpu_model": "A900"},
            ["racks[0].cooling.type: Input should be 'air', 'rear_door', 'in_row_chilled_water', 'direct_liquid' or "
             "'immersion' (got \"fog\")",
             "racks[0].cooling.capacity_kw: required key is missing",
             'node_groups[0].gpu_model: no gpu_catalog entry named "A900" (known: A100-SXM4-80GB, A800-SXM4-80GB, '
             'H100-SXM5-80GB, L40S, RTX-4090)'],
            id="runs the rules that do not read a failed section",
        ),
        pytest.param(
            {"stages": [{"name": "canary"}], "teams__0__stage": "beta"},
            ["stages[0].min_soak_days: required key is missing"],
            id="skips the stage references when stages failed to parse",
        ),
    ],
)
def test_should_skip_only_the_rules_that_read_a_failed_section(
    prod: dict[str, Any], changes: dict[str, Any], expected: list[str]
) -> None:
    assert problems(with_changes(prod, **changes)) == expected


BROKEN_RULES = {
    "teams__6__stage": "beta", "teams__2__stage": "canary", "racks__1__room": "hall-z",
    "node_groups__0__gpu_model": "A900", "node_groups__3__nodes__0__rack": "z99", "racks__3__cooling__capacity_kw": 15,
    "monitoring": {"hot_retention_days": 30, "cold_retention_days": 10}, "gpu_operator": {"driver_version": "470.1"},
    "teams__0__gpu_quota": {"a800-flex": 8}, "teams__1__name": "root",
}
"""Every section parses; most rules find something, so their problem branches run too."""


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.id} ({r.check.__name__}) reads {', '.join(sorted(r.reads))}")
@pytest.mark.parametrize("changes", [{}, BROKEN_RULES],
                         ids=["on the prod site", "on a site breaking rules"])
def test_should_read_only_the_sections_a_rule_declares(
    prod: dict[str, Any], rule: Any, changes: dict[str, Any]
) -> None:
    values = with_changes(prod, **changes)
    sections = validate_sections(values, unreadable=set(Site.model_fields) - rule.reads)
    assert not rule.reads & sections.failed, sections.problems
    rule.check(sections.site)  # a section it reads but does not declare is absent: AttributeError


def test_should_leave_every_rule_across_sections_to_a_rule() -> None:
    # validate_sections checks each section with its own type: a validator on Site itself would be skipped.
    decorators = Site.__pydantic_decorators__
    assert not (decorators.field_validators or decorators.model_validators or decorators.validators)


def test_should_build_the_same_site_section_by_section(prod: dict[str, Any]) -> None:
    assert validate_sections(prod).site == Site.model_validate(prod) == parse(prod)
