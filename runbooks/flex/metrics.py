"""The lending controller's own metrics, served at /metrics (Prometheus text format 0.0.4) on the Slurm controller,
where the stack's Prometheus scrapes it (components/monitoring/prometheus.py) and the alerts of
components/monitoring/alerts.py read it. The HTTP side is the Slurm exporter's (hosts/slurm_exporter.py): it binds
the spec's lending.metrics_address, holds at most METRICS_MAX_CONNECTIONS connections and closes one silent for
LISTENER_TIMEOUT_S, so idle connections cannot take the controller's descriptors (issue 41)."""

import threading
from collections import Counter
from collections.abc import Callable

from components.monitoring.lending_metrics import DECISIONS, ERRORS, LAST_DECISION, LEND_SECONDS, MOVES, NODES, PAUSED
from components.scheduling.lending_decision import Owner
from hosts.slurm_exporter import BoundedHTTPServer, metrics_server

LEND_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""s from a lend decision to the node lent: an idle node within seconds; a drain waits for jobs up to lend_wait_s."""
class Metrics:
    def __init__(self) -> None:
        self.nodes: dict[Owner, int] = dict.fromkeys(Owner, 0)
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.moves: Counter[str] = Counter()
        self.lend_counts = [0] * (len(LEND_BUCKETS) + 1)
        self.lend_sum = 0.0
        self.paused = False
        self.last_decision = 0.0
        self.errors = 0
        self.lock = threading.Lock()

    def observe_lend(self, seconds: float) -> None:
        for i, edge in enumerate(LEND_BUCKETS):
            if seconds <= edge:
                self.lend_counts[i] += 1
        self.lend_counts[-1] += 1  # +Inf
        self.lend_sum += seconds

    def render(self) -> str:
        with self.lock:
            lines = [f"# HELP {NODES} Flex nodes by who has them.", f"# TYPE {NODES} gauge",
                     *(f'{NODES}{{owner="{owner}"}} {count}' for owner, count in self.nodes.items()),
                     f"# HELP {DECISIONS} Decisions by action and reason.", f"# TYPE {DECISIONS} counter",
                     *(f'{DECISIONS}{{action="{a}",reason="{r}"}} {n}' for (a, r), n in sorted(self.decisions.items())),
                     f"# HELP {MOVES} Lends and reclaims started (not counting a lend finishing).",
                     f"# TYPE {MOVES} counter",
                     *(f'{MOVES}{{action="{a}"}} {n}' for a, n in sorted(self.moves.items())),
                     f"# HELP {LEND_SECONDS} Seconds from a lend decision to the node lent to inference.",
                     f"# TYPE {LEND_SECONDS} histogram",
                     *(f'{LEND_SECONDS}_bucket{{le="{edge}"}} {count}'
                       for edge, count in zip([*map(str, LEND_BUCKETS), "+Inf"], self.lend_counts, strict=True)),
                     f"{LEND_SECONDS}_sum {self.lend_sum:g}", f"{LEND_SECONDS}_count {self.lend_counts[-1]}",
                     f"# HELP {PAUSED} 1 while an operator has paused the controller.", f"# TYPE {PAUSED} gauge",
                     f"{PAUSED} {int(self.paused)}",
                     f"# HELP {LAST_DECISION} When the controller last decided.", f"# TYPE {LAST_DECISION} gauge",
                     f"{LAST_DECISION} {self.last_decision:.3f}",
                     f"# HELP {ERRORS} Steps whose reads or moves failed (Slurm or kubectl).",
                     f"# TYPE {ERRORS} counter", f"{ERRORS} {self.errors}"]
            return "\n".join(lines) + "\n"


def serve(render: Callable[[], str], listen: str, port: int) -> BoundedHTTPServer:
    """Serves /metrics (what render returns) from a daemon thread; returns the server (its shutdown stops it). The
    health controller serves its metrics with it too."""
    server = metrics_server(render, listen, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
