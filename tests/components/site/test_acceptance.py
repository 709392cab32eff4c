"""The acceptance section: documented defaults that hold the mission's numbers, and clear refusals of a campaign that
could not prove anything."""

from typing import Any

import pytest

from components.site.acceptance import DrillKind
from tests.builders import parse, problems, prod_values, with_changes


def drills(**change: Any) -> list[dict[str, Any]]:
    """The default drills as the stack file would write them, the first one changed."""
    listed = [d.model_dump(mode="json", exclude_none=True) for d in parse(prod_values()).acceptance.drills]
    listed[0] = {**listed[0], **change}
    return listed


def test_should_default_to_the_missions_week_long_soak_3x_shock_and_every_failure_mode() -> None:
    acceptance = parse(prod_values()).acceptance
    assert (acceptance.soak_h, acceptance.shock_factor, acceptance.time_scale) == (168, 3.0, 1.0)
    assert [d.kind for d in acceptance.drills] == list(DrillKind)
    assert acceptance.checkpoint_gib == 300
    assert acceptance.scaled(168 * 3600) == 604_800


def test_should_scale_every_duration_by_the_time_scale() -> None:
    # Slurm must see a dead node within the scaled node-failure deadline (1.5 s): the node-failure-detectable rule.
    acceptance = parse(with_changes(prod_values(), acceptance={"time_scale": 0.001},
                                    slurm__slurmd_timeout_s=1)).acceptance
    assert acceptance.scaled(acceptance.soak_h * 3600) == pytest.approx(604.8)


@pytest.mark.parametrize(("section", "expected"), [
    pytest.param({"time_scale": 0}, "acceptance.time_scale: Input should be greater than 0",
                 id="should refuse a campaign scaled to nothing"),
    pytest.param({"time_scale": 2}, "acceptance.time_scale: Input should be less than or equal to 1",
                 id="should refuse a campaign stretched past its real length"),
    pytest.param({"shock_factor": 0.5}, "acceptance.shock_factor: Input should be greater than or equal to 1",
                 id="should refuse a shock under the peak"),
    pytest.param({"drills": drills()[1:]}, "acceptance: Value error, drills must cover every failure mode: no drill "
                 "for node_failure", id="should refuse a campaign missing a failure mode"),
    pytest.param({"drills": drills(hold_s=60, detect_within_s=120)},
                 "acceptance.drills[0]: Value error, detect_within_s (120) must not exceed hold_s (60)",
                 id="should refuse a fault reverted before it must be detected"),
    pytest.param({"drills": drills(revert_after_s=1800)},
                 "acceptance.drills[0]: Value error, revert_after_s (1800) must exceed hold_s (1800)",
                 id="should refuse a node deadline inside the hold"),
    pytest.param({"drills": drills(delay_ms=50)},
                 "acceptance.drills[0]: Value error, delay_ms is required for storage_jitter and only for it",
                 id="should refuse a delay on a drill that is not storage jitter"),
    pytest.param({"drills": drills(sop="../etc/passwd")}, "acceptance.drills[0].sop: String should match pattern",
                 id="should refuse an SOP name that is not a file under docs/sop"),
    pytest.param({"peak_source": "declared", "peak": {"inference_rps": 400}},
                 "acceptance: Value error, the shock's 1200 requests/s (peak.inference_rps x shock_factor) exceed "
                 "max_inference_rps 500", id="should refuse a declared shock past the load bound"),
    pytest.param({"soak_h": True}, "acceptance.soak_h: Value error, a boolean is not a number",
                 id="should refuse a boolean for hours"),
])
def test_should_refuse_an_acceptance_section_that_proves_nothing(section: dict[str, Any], expected: str) -> None:
    found = problems(with_changes(prod_values(), acceptance=section))
    assert any(p.startswith(expected) for p in found), found


def test_should_name_each_drill_by_its_kind_and_number_a_kind_drilled_twice() -> None:
    listed = drills()
    acceptance = parse(with_changes(prod_values(), acceptance={"drills": [*listed, listed[0]]})).acceptance
    assert [name for name, _ in acceptance.named_drills()] == [
        "node_failure#1", "network_partition", "storage_jitter", "model_hot_swap", "node_failure#2"]
    assert [name for name, _ in parse(prod_values()).acceptance.named_drills()] == list(DrillKind)
