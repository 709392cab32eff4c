"""The names of the lending controller's metrics (runbooks/flex/metrics.py serves them): the alerts of
components/monitoring/alerts.py read them, and gpuctl plan counts them as the controller's when the stack runs and
scrapes it."""

NODES = "gpucluster_flex_nodes"
DECISIONS = "gpucluster_flex_decisions_total"
MOVES = "gpucluster_flex_moves_total"
LEND_SECONDS = "gpucluster_flex_lend_seconds"
PAUSED = "gpucluster_flex_paused"
LAST_DECISION = "gpucluster_flex_last_decision_timestamp_seconds"
ERRORS = "gpucluster_flex_errors_total"
METRICS = (NODES, DECISIONS, MOVES, *(f"{LEND_SECONDS}{s}" for s in ("_bucket", "_sum", "_count")), PAUSED,
           LAST_DECISION, ERRORS)
"""Every sample name /metrics serves (gpuctl plan checks that what the alerts read is among them)."""
