"""The node health controller's alerts, proven by promtool on the rendered rules: NodeHandedToAHuman fires for the
node handed off and no other, HealthControllerDown when the controller stops deciding on fresh inputs (down, never
scraped, or paused on stale DCGM data)."""

from pathlib import Path

import pytest

from components.monitoring.health_metrics import LAST_DECISION, NODE_PHASE
from tests.components.monitoring.test_alerts import Case, alert_test, needs_promtool, promtool_test, series, site

HANDED = ("gpu-a800-02 failed 2 diagnoses (or relapsed) within 168 h: the health controller keeps it drained and "
          "cordoned until a human acts")
DOWN = "The node health controller has not decided on fresh inputs for over 300 s: failing GPUs are not drained"

CASES = [
    pytest.param(Case("NodeHandedToAHuman", "3m", [
        series(NODE_PHASE, {"node": "gpu-a800-02", "phase": "handed"}, "1x3"),
        series(NODE_PHASE, {"node": "gpu-a800-01", "phase": "suspect"}, "1x3")],
                      [({"node": "gpu-a800-02"}, HANDED)]), id="a node handed off fires, a suspect one does not"),
    # The series ends when the controller no longer holds the node; Prometheus's 5 m lookback passes by 7 m.
    pytest.param(Case("NodeHandedToAHuman", "7m", [series(NODE_PHASE, {"node": "gpu-a800-02", "phase": "handed"},
                                                          "1 _x7")]),
                 id="a node the human resumed stays quiet"),
    # Stale from 301 s on; pending for 5 m: fires from 11 m.
    pytest.param(Case("HealthControllerDown", "11m", [series(LAST_DECISION, {}, "0x11")], [({}, DOWN)]),
                 id="a controller paused on stale inputs since it started fires"),
    pytest.param(Case("HealthControllerDown", "9m", [series(LAST_DECISION, {}, "0x9")]),
                 id="a controller paused for less than 5 m past its bound stays quiet"),
    pytest.param(Case("HealthControllerDown", "6m", [series("up", {"job": "x"}, "1x6")], [({}, DOWN)]),
                 id="a controller never scraped fires"),
    pytest.param(Case("HealthControllerDown", "12m", [series(LAST_DECISION, {}, "0+60x12")]),
                 id="a controller deciding every minute stays quiet"),
]


@needs_promtool
@pytest.mark.parametrize("case", CASES)
def test_should_fire_exactly_when_the_rule_says(case: Case, tmp_path: Path) -> None:
    s = site()
    result = promtool_test(s, [alert_test(s, case)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
