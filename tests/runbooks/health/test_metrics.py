"""The health controller's /metrics: valid exposition, every name components/monitoring/health_metrics.py lists (the
alerts and gpuctl plan's producer check read that list), and the phase of each node it holds."""

from prometheus_client.parser import text_string_to_metric_families

from components.monitoring.health_metrics import METRICS, NODE_PHASE
from runbooks.health.metrics import Metrics


def test_should_serve_every_listed_metric_and_each_held_nodes_phase() -> None:
    metrics = Metrics()
    metrics.phases = {"gpu-a800-02": "handed", "gpu-a800-01": "suspect"}
    metrics.actions["drain"] += 2
    samples = [s for family in text_string_to_metric_families(metrics.render()) for s in family.samples]
    assert {s.name.removesuffix("_total") for s in samples} >= {m.removesuffix("_total") for m in METRICS}
    assert {(s.labels["node"], s.labels["phase"]) for s in samples if s.name == NODE_PHASE} == {
        ("gpu-a800-01", "suspect"), ("gpu-a800-02", "handed")}
    assert any(s.name == "gpucluster_health_actions_total" and s.labels == {"action": "drain"} and s.value == 2
               for s in samples)
