"""The node health controller's alerts, proven by promtool on the rendered rules: NodeHandedToAHuman fires for the
node handed off and no other, HealthDrainBudgetExhausted when a suspect node waits 15 minutes for the drain budget,
HealthControllerDown when the controller stops deciding on fresh inputs (down, never scraped, or paused on stale DCGM
data)."""

from pathlib import Path

from components.monitoring.health_metrics import BUDGET_WAITING, LAST_DECISION, NODE_PHASE
from tests.components.monitoring.test_alerts import Case, alert_test, needs_promtool, promtool_test, series, site

HANDED = ("gpu-a800-02 failed 2 diagnoses (or relapsed) within 168 h: the health controller keeps it drained and "
          "cordoned until a human acts")
BUDGET = ("1 GPU nodes with a DCGM finding stay in service: the health controller already holds 10 % of the GPU nodes "
          "(health.max_drained_pct)")
DOWN = "The node health controller has not decided on fresh inputs for over 300 s: failing GPUs are not drained"

HANDED_NODE = {"node": "gpu-a800-02", "phase": "handed"}
CASES: list[tuple[str, Case]] = [
    ("a node handed off fires, a suspect one does not",
     Case("NodeHandedToAHuman", "3m", [series(NODE_PHASE, HANDED_NODE, "1x3"),
                                       series(NODE_PHASE, {"node": "gpu-a800-01", "phase": "suspect"}, "1x3")],
          [({"node": "gpu-a800-02"}, HANDED)])),
    # The series ends when the controller no longer holds the node; Prometheus's 5 m lookback passes by 7 m.
    ("a node the human resumed stays quiet", Case("NodeHandedToAHuman", "7m", [series(NODE_PHASE, HANDED_NODE,
                                                                                      "1 _x7")])),
    ("a suspect node waiting for the budget 15 m fires",
     Case("HealthDrainBudgetExhausted", "16m", [series(BUDGET_WAITING, {}, "1x16")], [({}, BUDGET)])),
    ("a wait for the budget under 15 m stays quiet",
     Case("HealthDrainBudgetExhausted", "16m", [series(BUDGET_WAITING, {}, "1x10 0x6")])),
    # Stale from 301 s on; pending for 5 m: fires from 11 m.
    ("a controller paused on stale inputs since it started fires",
     Case("HealthControllerDown", "11m", [series(LAST_DECISION, {}, "0x11")], [({}, DOWN)])),
    ("a controller paused for less than 5 m past its bound stays quiet",
     Case("HealthControllerDown", "9m", [series(LAST_DECISION, {}, "0x9")])),
    ("a controller never scraped fires",
     Case("HealthControllerDown", "6m", [series("up", {"job": "x"}, "1x6")], [({}, DOWN)])),
    ("a controller deciding every minute stays quiet",
     Case("HealthControllerDown", "12m", [series(LAST_DECISION, {}, "0+60x12")])),
]


@needs_promtool
def test_should_fire_exactly_when_the_rule_says(tmp_path: Path) -> None:
    # One promtool run for every case (0.5 s each as separate runs); its output names the case that failed.
    s = site()
    result = promtool_test(s, [{**alert_test(s, case), "name": name} for name, case in CASES], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
