"""The node health controller's metrics (runbooks/health/metrics.py serves them; the alerts of
components/monitoring/alerts.py read them) and the PromQL it reads the DCGM series with (runbooks/health/signals.py).

Every DCGM query is per GPU (`Hostname`, `gpu`, as dcgm-exporter labels them; components/monitoring/alerts.py) and
keeps only what breaks a threshold of the spec's `health` section, so an empty answer means no finding; whether a
node's exporter is alive at all is the FRESHNESS query's business. A GPU without one of the four NVLink counters
(a board with no NVLink) has no NVLink finding.
"""

from components.site.health import Health

NODE_PHASE = "gpucluster_health_node_phase"
"""1 for each node the controller holds, labelled node and phase (suspect, handed)."""
ACTIONS = "gpucluster_health_actions_total"
PAUSED = "gpucluster_health_paused"
LAST_DECISION = "gpucluster_health_last_decision_timestamp_seconds"
"""When the controller last decided on fresh inputs (a paused step does not move it)."""
BUDGET_WAITING = "gpucluster_health_budget_waiting_nodes"
ERRORS = "gpucluster_health_errors_total"
METRICS = (NODE_PHASE, ACTIONS, PAUSED, LAST_DECISION, BUDGET_WAITING, ERRORS)
"""Every sample name /metrics serves."""

PER_GPU = "Hostname, gpu"
NVLINK_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
FRESHNESS = "max by (Hostname) (timestamp(DCGM_FI_DEV_GPU_TEMP))"
"""The newest GPU temperature sample of each node (s since the epoch): dcgm-exporter serves it for every GPU."""
GPU_COUNT = "count by (Hostname) (max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP))"
"""GPUs each node reports; fewer than its group has is a GPU missing (off the bus, or lost to the driver)."""


def finding_queries(settings: Health) -> dict[str, str]:
    """signal -> PromQL whose every series is one GPU past the threshold, its value the evidence."""
    window = f"{settings.window_s}s"
    return {
        # The gauge keeps the last XID; only one logged within the window is news (the alerts' reading too).
        "xid": f"max by ({PER_GPU}) (DCGM_FI_DEV_XID_ERRORS) and on ({PER_GPU}) "
               f"(max by ({PER_GPU}) (changes(DCGM_FI_DEV_XID_ERRORS[{window}])) > 0)",
        "ecc_dbe": f"max by ({PER_GPU}) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{window}])) > {settings.ecc_dbe_max}",
        "row_remap_failure": f"max by ({PER_GPU}) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
        "row_remap_pending": f"max by ({PER_GPU}) (DCGM_FI_DEV_ROW_REMAP_PENDING) > 0",
        # One increase() per counter: over one regex selector increase() drops the names and the four series of a
        # GPU collide ("vector cannot contain metrics with the same labelset", Prometheus 2.42 answers 422).
        "nvlink_errors": "(" + " + ".join(
            f"sum by ({PER_GPU}) (increase(DCGM_FI_DEV_NVLINK_{counter}_ERROR_COUNT_TOTAL[{window}]))"
            for counter in NVLINK_COUNTERS) + f") > {settings.nvlink_errors_max}",
        # DCGM counts throttled microseconds: us per second / 1e4 = % of the time.
        "thermal": f"max by ({PER_GPU}) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[{window}])) / 1e4 "
                   f"> {settings.thermal_violation_pct:g}",
    }
