"""Inference demand read from Prometheus's HTTP API (`/api/v1/query`) for the lending decision.

Any failure (Prometheus unreachable, an error answer, no series, a value that is no number) leaves that signal None,
and the decision holds on it: the controller never lends or reclaims on missing data.
"""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection

from components.inference.demand import LATENCY_QUERY, demand_queries
from components.scheduling.lending_decision import Signals

QUERY_TIMEOUT_S = 5.0
"""s one query may take; a slower Prometheus is missing data for this decision."""


class PrometheusDemand:
    def __init__(self, url: str, latency: bool = False, clock: Callable[[], float] = time.time,
                 models: Collection[str] | None = None) -> None:
        """latency: read the p95 time to first token too (the spec sets lending.ttft_objective_s); models: the served
        models whose queues and pending engines count (lending_decision.lent_models), every model when None."""
        self.url = url.rstrip("/")
        self.queries = {**demand_queries(models), **({"ttft_p95_s": LATENCY_QUERY} if latency else {})}
        self.clock = clock
        self.errors: list[str] = []
        """Why each signal of the last read is missing."""

    def read(self) -> Signals:
        at = self.clock()
        self.errors = []
        values = {name: self._scalar(name, query) for name, query in self.queries.items()}
        return Signals(at=at, **values)

    def _scalar(self, name: str, query: str) -> float | None:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as response:
                body = json.load(response)
            if body.get("status") != "success":
                raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
            result = body["data"]["result"]
            if not result:
                self.errors.append(f"{name}: no series")
                return None
            return float(result[0]["value"][1])
        except (urllib.error.URLError, TimeoutError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
            self.errors.append(f"{name}: Prometheus at {self.url}: {error}")
            return None
