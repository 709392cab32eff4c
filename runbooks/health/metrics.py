"""The health controller's own metrics, served at /metrics (Prometheus text format 0.0.4) on the Slurm controller,
where the stack's Prometheus scrapes it (components/monitoring/prometheus.py) and the alerts of
components/monitoring/alerts.py read it. The HTTP side is the lending controller's
(runbooks.flex.metrics.serve): the Slurm exporter's bounded listener."""

import threading
from collections import Counter

from components.monitoring.health_metrics import ACTIONS, BUDGET_WAITING, ERRORS, LAST_DECISION, NODE_PHASE, PAUSED


class Metrics:
    def __init__(self) -> None:
        self.phases: dict[str, str] = {}
        """node -> phase, for the nodes the controller holds (node names are the spec's: DNS labels)."""
        self.actions: Counter[str] = Counter()
        self.paused = False
        self.last_decision = 0.0
        self.budget_waiting = 0
        self.errors = 0
        self.lock = threading.Lock()

    def render(self) -> str:
        with self.lock:
            lines = [f"# HELP {NODE_PHASE} 1 for each node the health controller holds, by phase.",
                     f"# TYPE {NODE_PHASE} gauge",
                     *(f'{NODE_PHASE}{{node="{node}",phase="{phase}"}} 1' for node, phase in sorted(
                         self.phases.items())),
                     f"# HELP {ACTIONS} Moves carried out, by action.", f"# TYPE {ACTIONS} counter",
                     *(f'{ACTIONS}{{action="{a}"}} {n}' for a, n in sorted(self.actions.items())),
                     f"# HELP {PAUSED} 1 while the last step paused on missing or stale inputs.",
                     f"# TYPE {PAUSED} gauge", f"{PAUSED} {int(self.paused)}",
                     f"# HELP {LAST_DECISION} When the controller last decided on fresh inputs.",
                     f"# TYPE {LAST_DECISION} gauge", f"{LAST_DECISION} {self.last_decision:.3f}",
                     f"# HELP {BUDGET_WAITING} Suspect nodes left in service because the drain budget is spent.",
                     f"# TYPE {BUDGET_WAITING} gauge", f"{BUDGET_WAITING} {self.budget_waiting}",
                     f"# HELP {ERRORS} Steps whose reads or moves failed (Prometheus, Slurm, kubectl, ssh).",
                     f"# TYPE {ERRORS} counter", f"{ERRORS} {self.errors}"]
            return "\n".join(lines) + "\n"
