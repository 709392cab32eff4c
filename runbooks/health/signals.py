"""The DCGM findings of each GPU node, read from Prometheus's HTTP API for the health decision.

Any failure (Prometheus unreachable, an error answer, a value that is no number) fails the whole read: the decision
then pauses, as Prometheus down is not "all healthy". A node whose newest DCGM sample is older than
health.stale_after_s (or that has none) gets no findings at all (None), not an empty list.
Label values are written by the exporters: only a GPU index of digits is shown as is, anything else by repr.
"""

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

from components.monitoring.health_metrics import FRESHNESS, GPU_COUNT, finding_queries
from components.site.site import Site
from components.site.xid import XID_CATALOGUE

QUERY_TIMEOUT_S = 5.0
"""s one query may take; a slower Prometheus is no data for this decision."""
MAX_ANSWER_BYTES = 16 << 20
"""An answer past 16 MiB is not Prometheus's answer about this site's few hundred GPUs."""
_GPU = re.compile(r"[0-9]{1,3}")


class PrometheusUnreadableError(Exception):
    """A query failed: the message names it and why."""


def instant_vector(url: str, query: str) -> tuple[float, list[tuple[dict[str, str], float]]]:
    """(evaluation time, [(labels, value)]) of an instant query."""
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(address, timeout=QUERY_TIMEOUT_S) as response:
            body = json.loads(response.read(MAX_ANSWER_BYTES + 1)[:MAX_ANSWER_BYTES])
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')}")
        series = []
        at = math.nan
        for item in body["data"]["result"]:
            at, value = float(item["value"][0]), float(item["value"][1])
            labels = {str(k): str(v) for k, v in dict(item["metric"]).items()}
            series.append((labels, value))
        return at, series
    except (urllib.error.URLError, TimeoutError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise PrometheusUnreadableError(f"{query[:80]}: Prometheus at {url}: {error}") from None


def _gpu(labels: dict[str, str]) -> str:
    gpu = labels.get("gpu", "")
    return f"GPU {gpu}" if _GPU.fullmatch(gpu) else f"GPU {gpu[:20]!r}"


def _describe(signal: str, value: float, site: Site) -> str | None:
    health = site.health
    if signal == "xid":
        xid = int(value) if math.isfinite(value) and value.is_integer() else -1
        if xid not in health.drain_xids:
            return None  # the application's XID, or one the site does not drain for
        return f"XID {xid} ({XID_CATALOGUE[xid]})"
    words = {
        "ecc_dbe": f"{value:g} double-bit ECC errors in {health.window_s} s",
        "row_remap_failure": "row remap failure (DCGM_FI_DEV_ROW_REMAP_FAILURE)",
        "row_remap_pending": "row remap pending a GPU reset (DCGM_FI_DEV_ROW_REMAP_PENDING)",
        "nvlink_errors": f"{value:g} NVLink errors in {health.window_s} s (over {health.nvlink_errors_max})",
        "thermal": f"thermally throttled {value:.0f} % of {health.window_s} s "
                   f"(over {health.thermal_violation_pct:g} %)",
    }
    return words[signal]


def read_findings(site: Site, url: str, now: float | None = None) -> dict[str, tuple[str, ...] | None]:
    """Each GPU node of the site -> its findings, None when its DCGM samples are stale; raises
    PrometheusUnreadableError. now: s since the epoch freshness is judged at; default Prometheus's evaluation time."""
    at, newest = instant_vector(url, FRESHNESS)
    now = at if now is None else now
    fresh = {labels.get("Hostname", ""): now - value <= site.health.stale_after_s for labels, value in newest}
    _, counted = instant_vector(url, GPU_COUNT)
    gpus = {labels.get("Hostname", ""): value for labels, value in counted}
    found: dict[str, list[str]] = defaultdict(list)
    for signal, query in finding_queries(site.health).items():
        for labels, value in instant_vector(url, query)[1]:
            said = _describe(signal, value, site)
            if said is not None:
                found[labels.get("Hostname", "")].append(f"{_gpu(labels)}: {said}")
    result: dict[str, tuple[str, ...] | None] = {}
    for group in site.node_groups:
        for node in group.nodes:
            if not fresh.get(node.name, False):
                result[node.name] = None
                continue
            seen = int(gpus.get(node.name, 0))
            missing = [f"{seen} of {group.gpus_per_node} GPUs reported"] if seen < group.gpus_per_node else []
            result[node.name] = tuple(missing + sorted(found.get(node.name, [])))
    return result
