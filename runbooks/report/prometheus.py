"""The two calls of Prometheus' HTTP API the report makes (docs: prometheus.io/docs/prometheus/latest/querying/api).

An answer is read as untrusted (a proxy, or anyone who can point --prometheus-url somewhere, writes it): at most
MAX_ANSWER_BYTES and MAX_POINTS, and every series checked for the shape the report reads (labels of text, points of
a finite time and a number as text) before the report computes anything; one that breaks a rule is a PrometheusError
naming the query, the place in the answer and the rule.
"""

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

QUERY_TIMEOUT_S = 60.0
"""seconds one query may take: a week of per-host utilization at 5 min steps is a few thousand points per host."""


MAX_ANSWER_BYTES = 64 * 2**20
"""bytes of one answer at most: a week of per-host utilization at 5 min steps on 16 hosts is about 1 MB."""
MAX_POINTS = 2_000_000
"""points (samples) of one answer at most, about 300 MB once parsed; the report's largest query holds a few tens of
thousands."""


class PrometheusError(Exception):
    """Prometheus did not answer, or refused the query; the message names the URL."""


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def instant(self, query: str, at: datetime) -> list[dict[str, Any]]:
        """Each series of an instant vector: {"metric": labels, "value": [t, "v"]}."""
        result: list[dict[str, Any]] = self._get("/api/v1/query", {"query": query, "time": f"{at.timestamp():.3f}"})
        return result

    def range(self, query: str, start: datetime, end: datetime, step_s: int) -> list[dict[str, Any]]:
        """Each series of a range query: {"metric": labels, "values": [[t, "v"], ...]}."""
        result: list[dict[str, Any]] = self._get("/api/v1/query_range", {
            "query": query, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}", "step": str(step_s)})
        return result

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        query = params["query"]
        try:
            with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as response:
                raw = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            # A bad query is a 400 whose JSON body says why.
            raw = error.read(MAX_ANSWER_BYTES + 1)
            if not isinstance(_json(raw), dict):
                raise PrometheusError(f"Prometheus at {self.url} answered HTTP {error.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise PrometheusError(f"Prometheus at {self.url} did not answer: {error}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise PrometheusError(f"Prometheus at {self.url} answered {query!r} with over {MAX_ANSWER_BYTES:,} bytes, "
                                  "the limit of one answer: ask for a coarser --resolution or a shorter window")
        body = _json(raw)
        if body is None:
            raise PrometheusError(f"Prometheus at {self.url} answered {query!r} with no JSON")
        return _checked(body, f"Prometheus at {self.url} answered {query!r}")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a number of 10,000 digits, nesting past the stack
        return None


def _checked(body: Any, said: str) -> list[dict[str, Any]]:
    """The answer's result, each series checked for what the report reads; PrometheusError `said` the place and the
    rule where one is broken."""
    if not isinstance(body, dict):
        raise PrometheusError(f"{said} with a JSON {type(body).__name__}, not an object")
    if body.get("status") != "success":
        raise PrometheusError(f"{said.replace('answered', 'refused')}: {str(body.get('errorType'))[:100]}: "
                              f"{str(body.get('error'))[:500]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix"):
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise PrometheusError(f"{said} with a {str(kind)[:40]}, not a vector or a matrix")
    kind, result = data["resultType"], data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(f"{said} with data.result not a list")
    points = 0
    for i, series in enumerate(result):
        where = f"data.result[{i}]"
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise PrometheusError(f"{said} with {where}.metric not labels of text")
        samples = [series.get("value")] if kind == "vector" else series.get("values")
        if not isinstance(samples, list):
            raise PrometheusError(f"{said} with {where}.{'value' if kind == 'vector' else 'values'} not a list")
        points += len(samples)
        if points > MAX_POINTS:
            raise PrometheusError(f"{said} with over {MAX_POINTS:,} points, the limit of one answer: ask for a "
                                  "coarser --resolution or a shorter window")
        for j, sample in enumerate(samples):
            at = f"{where}.value" if kind == "vector" else f"{where}.values[{j}]"
            _sample(sample, f"{said} with {at}")
    return result


def _sample(sample: Any, said: str) -> None:
    """[time, "value"]: a finite number of seconds and a number as text (Prometheus writes NaN and +Inf so)."""
    if not isinstance(sample, list) or len(sample) != 2:
        raise PrometheusError(f"{said} not a [time, value] pair")
    at, value = sample
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise PrometheusError(f"{said}[0] {str(at)[:40]!r} not a finite time in seconds")
    try:
        float(value if isinstance(value, str) else "x")
    except ValueError:
        raise PrometheusError(f"{said}[1] {str(value)[:40]!r} is not a number as text") from None
