"""The report's bookkeeping, at Prometheus' client boundary: teams beyond the spec, hosts and partitions beyond the
site. (The real Prometheus and Slurm accounting: test_report.py.)"""

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from components.monitoring.report_queries import gpu_util_by_host
from runbooks.report.accounting import Job
from runbooks.report.measure import ALL, OTHER, measure, teams
from runbooks.report.prometheus import Prometheus
from runbooks.report.window import Window
from tests.builders import parse, prod_values

SITE = parse(prod_values())
BASELINE = Window(datetime.fromtimestamp(0, UTC), datetime.fromtimestamp(3600, UTC))
WINDOW = Window(datetime.fromtimestamp(3600, UTC), datetime.fromtimestamp(7200, UTC))
STEP_S = 600


class Answers(Prometheus):
    """A Prometheus that answers the DCGM query with a known host series and everything else with no data."""

    def __init__(self, hosts: dict[str, float]) -> None:
        super().__init__("http://127.0.0.1:9")  # never asked: both calls are answered here
        self.hosts = hosts

    def range(self, query: str, start: datetime, end: datetime, step_s: int) -> list[dict[str, Any]]:
        if query != gpu_util_by_host(step_s):
            return []
        points = range(int(start.timestamp()), int(end.timestamp()) + 1, step_s)
        return [{"metric": {"Hostname": host}, "values": [[t, str(busy)] for t in points]}
                for host, busy in self.hosts.items()]

    def instant(self, query: str, at: datetime) -> list[dict[str, Any]]:
        return []


JOBS = [
    # root's own account, only in the baseline; a partition the site does not define.
    Job("1", "root", "root", "debug", 0.0, 0.0, 1800.0, 8),
    Job("2", "speech", "alice", "a800-train", 3600.0, 4200.0, 7200.0, 16),
]


def test_should_list_the_same_teams_in_both_periods_with_accounts_beyond_the_spec() -> None:
    assert teams(SITE, JOBS) == [t.name for t in SITE.teams] + ["root"]
    baseline = measure(Answers({}), SITE, JOBS, BASELINE, STEP_S, now=10_000)
    window = measure(Answers({}), SITE, JOBS, WINDOW, STEP_S, now=10_000)
    assert set(baseline.waits) == set(window.waits) == {*teams(SITE, JOBS), ALL}
    assert (baseline.waits["root"].jobs, window.waits["root"].jobs) == (1, 0)
    assert math.isnan(window.waits["root"].p95_h)
    assert baseline.adoption["root"].gpu_hours == 8 * 0.5


def test_should_count_what_lies_outside_the_site_in_the_total_and_as_other() -> None:
    baseline = measure(Answers({"gpu-a800-01": 800.0, "login-01": 400.0}), SITE, JOBS, BASELINE, STEP_S, now=10_000)
    # 8 GPUs x 30 min of the 'debug' partition: no pool of the site, still allocated.
    assert baseline.utilization_pct == pytest.approx(100 * 8 * 1800 / (128 * 3600))
    assert math.isnan(baseline.pool_utilization_pct[OTHER])
    assert baseline.pool_utilization_pct["slurm"] == 0
    # DCGM: a host of the site at 8 x 100 %, one outside it at 400 % in all, both in the total.
    assert baseline.dcgm_utilization_pct == pytest.approx((800 + 400) / 128)
    assert baseline.dcgm_pool_utilization_pct["slurm"] == pytest.approx(800 / 64)
    assert math.isnan(baseline.dcgm_pool_utilization_pct[OTHER])
    window = measure(Answers({}), SITE, JOBS, WINDOW, STEP_S, now=10_000)
    assert window.pool_utilization_pct["slurm"] == pytest.approx(100 * 16 * 3000 / (64 * 3600))
    assert window.dcgm_utilization_pct == 0
