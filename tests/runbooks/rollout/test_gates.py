"""Health gates against a real Prometheus scraping a fake exporter, with our rendered rules loaded."""

from runbooks.rollout.gates import PrometheusGates, Verdict
from tests.runbooks.rollout.conftest import GATE_WINDOW_MINUTES, Worlds, rollout_site


def verdicts(url: str) -> dict[str, tuple[Verdict, str]]:
    site = rollout_site(url)
    snapshot = PrometheusGates(url, site.rollout.gates, GATE_WINDOW_MINUTES).check()
    return {r.gate: (r.verdict, r.reason) for r in snapshot.results}


def test_should_pass_every_gate_on_a_healthy_cluster(worlds: Worlds) -> None:
    site = rollout_site(worlds.healthy.url)
    snapshot = PrometheusGates(worlds.healthy.url, site.rollout.gates, GATE_WINDOW_MINUTES).check()
    assert snapshot.passed
    values = {r.gate: r.value for r in snapshot.results}
    assert values["critical_alerts"] == 0
    assert values["gpu_utilization"] == 82.0
    assert values["train_queue_time"] is not None and 5 <= values["train_queue_time"] <= 15
    assert values["inference_error_rate"] is not None and abs(values["inference_error_rate"] - 0.1) < 0.05


def test_should_fail_when_a_critical_alert_is_firing(worlds: Worlds) -> None:
    verdict, reason = verdicts(worlds.unhealthy.url)["critical_alerts"]
    assert verdict == Verdict.FAIL
    assert "GpuRowRemapFailure" in reason


def test_should_hold_as_inconclusive_when_a_metric_has_no_data(worlds: Worlds) -> None:
    assert verdicts(worlds.unhealthy.url)["gpu_utilization"] == (Verdict.INCONCLUSIVE, "no data")


def test_should_fail_a_slow_training_queue_and_a_high_inference_error_rate(worlds: Worlds) -> None:
    result = verdicts(worlds.unhealthy.url)
    assert result["train_queue_time"][0] == Verdict.FAIL
    assert result["inference_error_rate"][0] == Verdict.FAIL
    assert "must be at most 1%" in result["inference_error_rate"][1]


def test_should_never_pass_when_prometheus_is_unreachable() -> None:
    result = verdicts("http://127.0.0.1:9")
    assert {verdict for verdict, _ in result.values()} == {Verdict.INCONCLUSIVE}
    assert "did not answer" in result["critical_alerts"][1]
