"""The two calls of Prometheus' HTTP API the report makes (docs: prometheus.io/docs/prometheus/latest/querying/api)."""

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

QUERY_TIMEOUT_S = 60.0
"""seconds one query may take: a week of per-host utilization at 5 min steps is a few thousand points per host."""


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
        try:
            with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            # A bad query is a 400 whose JSON body says why.
            try:
                body = json.load(error)
            except (json.JSONDecodeError, OSError):
                raise PrometheusError(f"Prometheus at {self.url} answered HTTP {error.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as error:
            raise PrometheusError(f"Prometheus at {self.url} did not answer: {error}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url} refused {params['query']!r}: "
                                  f"{body.get('errorType')}: {body.get('error')}")
        if body["data"]["resultType"] not in ("vector", "matrix"):
            raise PrometheusError(f"Prometheus at {self.url} answered a {body['data']['resultType']} to "
                                  f"{params['query']!r}")
        return body["data"]["result"]
