"""What the report writes: files replaced whole and never through a planted link, "no data" where there was none."""

import json
import math
from datetime import UTC, datetime
from pathlib import Path

from runbooks.report.measure import ALL, Adoption, Period
from runbooks.report.render import FIGURES, PLOTS, SUMMARY, write
from runbooks.report.window import Window
from runbooks.waits import Waits


def _period(start: int, jobs: int, latency_s: float) -> Period:
    window = Window(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(start + 3600, UTC))
    waits = Waits(0.5, 2.0, jobs, 0) if jobs else Waits(math.nan, math.nan, 0, 0)
    return Period(window=window, capacity={"slurm": 64, "flex": 16, "kubernetes": 48}, utilization_pct=50.0,
                  pool_utilization_pct={"slurm": 50.0}, dcgm_utilization_pct=40.0,
                  dcgm_pool_utilization_pct={"slurm": 40.0}, slurm_gpu_hours=64.0, kubernetes_gpu_hours=0.0,
                  inference_latency_p95_s=latency_s, inference_error_pct=math.nan,
                  waits={"speech": waits, ALL: waits},
                  adoption={"speech": Adoption(168.0 * jobs, 64.0, 1 if jobs else 0)},
                  dcgm_series=[(60.0 * k, 40.0) for k in range(1, 61)], waits_h={ALL: [0.5] * jobs, "speech": []})


def test_should_replace_a_planted_link_and_never_write_through_it(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:x:0:0\n")
    out = tmp_path / "report"
    out.mkdir()
    (out / SUMMARY).symlink_to(secret)
    (out / PLOTS[0]).symlink_to(secret)
    written = write(out, "prod", _period(0, 0, math.nan), _period(3600, 2, 1.5), 300)
    assert secret.read_text() == "root:x:0:0\n"
    assert sorted(p.name for p in written) == sorted([SUMMARY, FIGURES, *PLOTS])
    assert all(p.is_file() and not p.is_symlink() for p in written)
    assert sorted(p.name for p in out.iterdir()) == sorted([SUMMARY, FIGURES, *PLOTS])  # no temporary left


def test_should_say_no_data_where_a_period_had_none(tmp_path: Path) -> None:
    write(tmp_path, "prod", _period(0, 0, math.nan), _period(3600, 2, 1.5), 300)
    summary = (tmp_path / SUMMARY).read_text()
    assert "| inference latency p95 (gateway) [s] | no data | 1.50 | no data |" in summary
    assert "| queue wait p95, all teams [h] | no data | 2.00 | no data |" in summary
    assert "| speech | 0 -> 2 | no data -> 0.50 | no data -> 2.00 | 0 -> 0 | 0.0 -> 336.0 | 64.0 -> 64.0 | 0 -> 1 |" \
        in summary
    report = json.loads((tmp_path / FIGURES).read_text())
    assert report["baseline"]["inference_latency_p95_s"] is None
    assert report["window"]["waits"]["all"] == {"p50_h": 0.5, "p95_h": 2.0, "jobs": 2, "never_started": 0}
