"""The peak from Prometheus's history: the highest hourly rate over the window, the declared figure where there is no
history, and None when nothing at all was measured."""

import urllib.parse

from components.site.acceptance import Peak
from runbooks.acceptance.peak import measured_peak
from tests.harness.http_double import JsonHandler, Served

DECLARED = Peak(training_jobs_per_h=120, inference_rps=50, storage_write_mib_s=2000)


class FakePrometheus(Served):
    """Answers /api/v1/query with `results[query]` (an empty vector for any other query) and keeps what it was asked."""

    def __init__(self, results: dict[str, float]) -> None:
        self.asked: list[str] = []
        prometheus = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
                prometheus.asked.append(query)
                value = results.get(query)
                vector = [{"metric": {}, "value": [0, str(value)]}] if value is not None else []
                self.answer(200, {"status": "success", "data": {"resultType": "vector", "result": vector}})

        super().__init__(Handler)


INFERENCE = "max_over_time((sum(rate(litellm_proxy_total_requests_metric_total[1h])))[14d:1h])"
TRAINING = "max_over_time((sum(increase(slurm_job_queue_wait_seconds_count[1h])))[14d:1h])"


def test_should_take_the_highest_hourly_rate_and_keep_declared_figures_without_history() -> None:
    prometheus = FakePrometheus({INFERENCE: 37.5})
    try:
        peak = measured_peak(prometheus.url, 14, DECLARED)
    finally:
        prometheus.stop()
    assert prometheus.asked == [INFERENCE, TRAINING]
    assert peak == Peak(inference_rps=37.5, training_jobs_per_h=120, storage_write_mib_s=2000)


def test_should_say_nothing_was_measured_without_any_history() -> None:
    prometheus = FakePrometheus({})
    try:
        assert measured_peak(prometheus.url, 14, DECLARED) is None
    finally:
        prometheus.stop()
