"""Health gates, read from Prometheus's HTTP API, thresholds from the spec (`rollout.gates`).

A gate passes only on data: an empty result, NaN (a ratio or quantile over no traffic), an unreachable
Prometheus or alerting rules that are not being evaluated make it inconclusive, which holds the rollout
exactly like a failure does. The queries, and where their series come from: components/monitoring/gate_queries.py.
An empty ALERTS means "none firing" only while rule groups are being evaluated, so /api/v1/rules must show an
evaluation in the last RULES_FRESH_S seconds.
"""

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from components.monitoring.gate_queries import gate_queries
from components.site.site import Gates

RULES_FRESH_S = 300.0
"""seconds; alerting rules whose last evaluation is older than this cannot vouch for 'no alert firing'."""

QUERY_TIMEOUT_S = 10.0
"""seconds one Prometheus request may take before the gate is inconclusive."""


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class GateResult:
    gate: str
    verdict: Verdict
    value: float | None
    threshold: float
    query: str
    reason: str


@dataclass(frozen=True)
class GateSnapshot:
    at: datetime
    results: tuple[GateResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.verdict == Verdict.PASS for r in self.results)

    def holding(self) -> list[GateResult]:
        return [r for r in self.results if r.verdict != Verdict.PASS]

    def as_record(self) -> dict[str, Any]:
        """Plain data for the state store, the audit log and the Slack message."""
        return {"at": self.at.isoformat(), "passed": self.passed, "results": [asdict(r) for r in self.results]}


class PrometheusUnavailableError(Exception):
    pass


class PrometheusGates:
    def __init__(self, url: str, thresholds: Gates, window_minutes: float,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.url = url.rstrip("/")
        self.thresholds = thresholds
        self.queries = gate_queries(window_minutes)
        self.clock = clock

    def check(self) -> GateSnapshot:
        t = self.thresholds
        results = (
            self._critical_alerts(t.max_firing_critical),
            self._scalar("gpu_utilization", t.min_gpu_util_pct, lambda v: v >= t.min_gpu_util_pct, "%", "at least"),
            self._scalar("train_queue_time", t.max_train_queue_minutes, lambda v: v <= t.max_train_queue_minutes,
                         " min", "at most"),
            self._scalar("inference_error_rate", t.max_inference_error_pct, lambda v: v <= t.max_inference_error_pct,
                         "%", "at most"),
        )
        return GateSnapshot(self.clock(), results)

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as response:
                body = json.load(response)
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as error:
            raise PrometheusUnavailableError(f"Prometheus at {self.url} did not answer: {error}") from None
        if body.get("status") != "success":
            raise PrometheusUnavailableError(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def _critical_alerts(self, allowed: int) -> GateResult:
        query = self.queries["critical_alerts"]

        def result(verdict: Verdict, value: float | None, reason: str) -> GateResult:
            return GateResult("critical_alerts", verdict, value, allowed, query, reason)

        try:
            firing = self._get("/api/v1/query", {"query": query})["result"]
            groups = self._get("/api/v1/rules", {"type": "alert"})["groups"]
        except PrometheusUnavailableError as error:
            return result(Verdict.INCONCLUSIVE, None, str(error))
        evaluated = [_parse_time(g["lastEvaluation"]) for g in groups if g.get("lastEvaluation")]
        fresh = [t for t in evaluated if (self.clock() - t).total_seconds() <= RULES_FRESH_S]
        if not fresh:
            return result(Verdict.INCONCLUSIVE, None,
                          f"no alerting rule group evaluated in the last {RULES_FRESH_S:g} s: "
                          "an empty ALERTS cannot be told from a stopped rule engine")
        names = sorted({s["metric"].get("alertname", "?") for s in firing})
        if len(firing) > allowed:
            return result(Verdict.FAIL, len(firing), f"{len(firing)} critical alert(s) firing: {', '.join(names)}"
                                                     f" (at most {allowed} allowed)")
        return result(Verdict.PASS, len(firing), f"{len(firing)} critical alert(s) firing (at most {allowed})")

    def _scalar(self, gate: str, threshold: float, ok: Callable[[float], bool], unit: str,
                relation: str) -> GateResult:
        query = self.queries[gate]
        try:
            series = self._get("/api/v1/query", {"query": query})["result"]
        except PrometheusUnavailableError as error:
            return GateResult(gate, Verdict.INCONCLUSIVE, None, threshold, query, str(error))
        if not series:
            return GateResult(gate, Verdict.INCONCLUSIVE, None, threshold, query, "no data")
        value = float(series[0]["value"][1])
        if not math.isfinite(value):
            return GateResult(gate, Verdict.INCONCLUSIVE, None, threshold, query,
                              f"{value} (no traffic in the window)")
        verdict = Verdict.PASS if ok(value) else Verdict.FAIL
        return GateResult(gate, verdict, value, threshold, query,
                          f"{value:.2f}{unit}, must be {relation} {threshold:g}{unit}")


def _parse_time(text: str) -> datetime:
    # Prometheus writes RFC 3339 with up to nanoseconds; Python keeps microseconds.
    head, dot, rest = text.partition(".")
    if not dot:
        return datetime.fromisoformat(text)
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    return datetime.fromisoformat(f"{head}.{digits[:6]}{rest[len(digits):]}")
