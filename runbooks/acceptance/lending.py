"""The lending controller as the campaign sees it: its /metrics (runbooks/flex/metrics.py, served on the Slurm
controller at lending.metrics_address:metrics_port) read at every look while the loads run, so the verdict judges
from what the running controller said whether it decided through the shock, on what, and whether training yielded a
node to inference when it lent (runbooks.acceptance.verdict `lending controller`).

Samples, each (time.time(), value) per look: `lending_unreadable` (1: the look got no answer), and from an answer
`lending_decision_age_s` (now less its last decision's timestamp), `lending_paused`, `lending_nodes_lent`, and the
controller's counters as they stand: `lending_lends`, `lending_reclaims` (moves started), `lending_lends_done` (lends
that reached inference) and `lending_decisions:<action>/<reason>` (every decision).
"""

import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from components.monitoring.lending_metrics import DECISIONS, LAST_DECISION, LEND_SECONDS, MOVES, NODES, PAUSED
from components.scheduling.lending_decision import Action, Owner

READ_TIMEOUT_S = 5.0
"""s one look may take: a controller slower to answer counts as unreadable for that look."""
MAX_BYTES = 1 << 20
"""Bytes of /metrics read at most: the controller's are a few KiB, whatever answers at the address cannot flood us."""
DECISION_SERIES = "lending_decisions:"
"""Prefix of the per-decision counters' series: `lending_decisions:<action>/<reason>`."""
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class UnreadableError(Exception):
    """The controller's /metrics gave no answer, or not the controller's."""


def http_text(url: str) -> Callable[[], str]:
    """What a look reads: GET url, at most MAX_BYTES, within READ_TIMEOUT_S."""

    def read() -> str:
        try:
            with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as response:
                return bytes(response.read(MAX_BYTES)).decode("utf-8", errors="replace")
        except OSError as error:
            raise UnreadableError(f"{url}: {error}") from None

    return read


def parse(text: str) -> dict[str, float]:
    """The samples the campaign keeps, by series name, from the text format 0.0.4; UnreadableError when the text
    lacks the last decision's timestamp (not the lending controller's metrics)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, labels, raw = match.group(1), dict(_LABEL.findall(match.group(2) or "")), match.group(3)
        try:
            value = float(raw)
        except ValueError:
            continue
        if name == LAST_DECISION:
            found["last_decision"] = value
        elif name == PAUSED:
            found["lending_paused"] = value
        elif name == NODES and labels.get("owner") == Owner.LENT.value:
            found["lending_nodes_lent"] = value
        elif name == MOVES and labels.get("action") == Action.LEND.value:
            found["lending_lends"] = value
        elif name == MOVES and labels.get("action") == Action.RECLAIM.value:
            found["lending_reclaims"] = value
        elif name == f"{LEND_SECONDS}_count":
            found["lending_lends_done"] = value
        elif name == DECISIONS and "action" in labels and "reason" in labels:
            found[f"{DECISION_SERIES}{labels['action']}/{labels['reason']}"] = value
    if "last_decision" not in found:
        raise UnreadableError(f"no {LAST_DECISION} in the answer: not the lending controller's /metrics")
    return found


@dataclass
class ControllerSampler:
    """Not a load: reads the lending controller's /metrics every `every_s` while the loads run (the campaign's
    Load protocol), recording what each look saw."""

    where: str
    """The /metrics URL, for the verdict's source and the failure's message."""
    stale_s: float
    """s after its last decision the controller counts as down (LendingControllerDown's threshold)."""
    read: Callable[[], str]
    pool: tuple[str, ...] = ()
    """The flex nodes it lends from (runbooks.flex.lending.flex_nodes): where a lend's requeue of training lands, which
    the verdict's `training yields to inference` looks for in sacct."""
    every_s: float = 1.0
    clock: Callable[[], float] = time.time
    name: str = "lending"
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, factor: float, until: float, stop: threading.Event) -> None:
        while not stop.is_set() and self.clock() < until:
            self.look()
            stop.wait(self.every_s)

    def look(self) -> None:
        try:
            found = parse(self.read())
        except UnreadableError:
            with self._lock:
                self.samples.setdefault("lending_unreadable", []).append((self.clock(), 1.0))
            return
        now = self.clock()
        found["lending_decision_age_s"] = now - found.pop("last_decision")
        with self._lock:
            for series, value in found.items():
                self.samples.setdefault(series, []).append((now, value))

    def drain(self) -> dict[str, list[tuple[float, float]]]:
        with self._lock:
            taken, self.samples = self.samples, {}
        return taken


def rises(samples: dict[str, list[tuple[float, float]]], series: str) -> list[float]:
    """When (time.time() of the look) a counter of the controller's rose, as the looks that got an answer saw it: 0
    where the renderer did not show it yet (nothing counted since the controller started), and a drop is a restarted
    controller counting from 0 again (a rise when it counted anything since)."""
    counted = dict(samples.get(series, []))
    points = [(at, counted.get(at, 0.0)) for at in sorted(at for at, _ in samples.get("lending_decision_age_s", []))]
    return [at for (_, before), (at, value) in zip(points, points[1:], strict=False) if value > 0 and value != before]
