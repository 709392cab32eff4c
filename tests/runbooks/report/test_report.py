"""`gpuctl report` end to end: the real Slurm accounting of the loopback cluster after a known job mix, and a real
Prometheus holding known backfilled series; every figure is checked against what went in."""

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.report.accounting import sacct_jobs
from runbooks.report.measure import WEEK_S
from runbooks.report.render import FIGURES as FIGURES_JSON
from runbooks.report.render import PLOTS, SUMMARY
from runbooks.report.window import Window
from tests.builders import REPO
from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import Cluster, slurm_marks
from tests.runbooks.report.world import A800, RTX4090, Gpus, Period, Traffic, start_prometheus

pytestmark = slurm_marks()

RUN_S = 2
"""Each job sleeps this long."""
SECOND_USER = "nobody"
AS_SECOND_USER = (f"--uid={SECOND_USER}", "--chdir=/tmp", "--output=/dev/null")
"""A job of another user (root may submit as anyone, and the job then runs as them, so it writes nothing of
ours)."""
PINNED = "gpu-a800-08"
"""The node of the job still running at the window's end, and of the one waiting behind it."""
SCHEDULING_S = 4.0
"""Tolerance of a wait beyond the known time a job was held: sacct keeps whole seconds (Submit and Start each
truncated, < 1 s apiece) and the controller starts a released job at its next scheduling pass (measured here:
0 to 3 s after the release)."""
STAMP_MARGIN_S = 2.0
"""s into its period before a period's first job is submitted: slurmctld stamped a job sent just after a whole second
with the second before it (measured here: Submit 1 s before the test's clock at submission, in 3 of 5 runs, which put
a baseline job before the baseline; with a 1 s margin the stamp fell on the period's first second), so one second
more."""
RUN_TOLERANCE_S = 2.0
"""Tolerance of a job's time on its GPUs beyond RUN_S: whole seconds again, plus launching the batch step and
reaping it (measured here: 0-1 s)."""


@dataclass
class Submitted:
    job_id: str
    account: str
    gpus: int
    submitted: float
    released: float | None = None

    @property
    def wait_s(self) -> float:
        assert self.released is not None
        return self.released - self.submitted


def _submit(slurm: Cluster, account: str, gpus: int, *args: str, run_s: int = RUN_S) -> Submitted:
    submitted = time.time()
    job = slurm.sbatch("--hold", "-A", account, "--qos=train_normal", "-p", "a800-train", f"--gres=gpu:a800:{gpus}",
                       *args, f"--wrap=sleep {run_s}")
    return Submitted(job, account, gpus, submitted)


def _release(slurm: Cluster, job: Submitted) -> None:
    job.released = time.time()
    slurm.run("scontrol", "release", job.job_id)


def _run_mix(slurm: Cluster, mix: list[tuple[str, int, float, tuple[str, ...]]]) -> list[Submitted]:
    """Submit every (account, GPUs, release after s, sbatch arguments) job held, release each at its time, wait
    until all ended."""
    jobs = [(_submit(slurm, account, gpus, *args), after) for account, gpus, after, args in mix]
    began = time.time()
    for job, after in sorted(jobs, key=lambda j: j[1]):
        time.sleep(max(0.0, began + after - time.time()))
        _release(slurm, job)
    ids = ",".join(j.job_id for j, _ in jobs)
    slurm.wait(f"jobs {ids} to end", lambda: not slurm.run("squeue", "--noheader", f"--jobs={ids}", "--format=%i",
                                                           check=False).stdout.strip(), timeout_s=30)
    return [j for j, _ in jobs]


def _whole_second_after(t: float) -> datetime:
    return datetime.fromtimestamp(math.floor(t) + 1, UTC)



@pytest.fixture
def second_user(slurm: Cluster) -> Iterator[str]:
    """SECOND_USER may submit to speech for this test only: the session cluster's associations stay as they were."""
    slurm.run("sacctmgr", "--immediate", "add", "user", SECOND_USER, "account=speech")
    yield SECOND_USER
    slurm.run("sacctmgr", "--immediate", "delete", "user", f"name={SECOND_USER}", "account=speech")


@pytest.mark.usefixtures("second_user")
def test_should_report_what_the_cluster_did_against_the_known_input(slurm: Cluster, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf_dir / "slurm.conf"))
    began = time.monotonic()
    baseline_start = _whole_second_after(time.time())
    time.sleep(max(0.0, baseline_start.timestamp() + STAMP_MARGIN_S - time.time()))
    # Baseline: speech waits 0 and 5 s, nlp-foundation 0 s.
    before = _run_mix(slurm, [("speech", 1, 0, ()), ("speech", 2, 5, ()), ("nlp-foundation", 8, 0, ())])
    window_start = _whole_second_after(time.time())
    time.sleep(max(0.0, window_start.timestamp() + STAMP_MARGIN_S - time.time()))
    # Window: nlp-foundation's long job takes one node's 8 GPUs and still runs at the window's end, where its next
    # job on that node still waits; speech waits 0, 5 and 10 s (a second user's job among them), nlp-foundation's
    # 4-GPU job 1 s.
    running = _submit(slurm, "nlp-foundation", 8, "-w", PINNED, run_s=120)
    _release(slurm, running)
    slurm.wait_state(running.job_id, "RUNNING")
    after = _run_mix(slurm, [("speech", 1, 0, ()), ("speech", 1, 5, AS_SECOND_USER), ("speech", 1, 10, ()),
                             ("nlp-foundation", 4, 1, ())])
    # Submitted last: a job pending for resources holds back lower-priority ones until the backfill pass.
    waiting = _submit(slurm, "nlp-foundation", 8, "-w", PINNED)
    _release(slurm, waiting)
    assert slurm.job(waiting.job_id)["JobState"] == "PENDING"
    # The controller sends a pending job's record to slurmdbd a moment later; the window closes once it is there.
    slurm.wait(f"slurmdbd to record pending job {waiting.job_id}", lambda: bool(slurm.run(
        "sacct", "--noheader", "--allocations", f"--jobs={waiting.job_id}", "--format=JobIDRaw").stdout.strip()),
               timeout_s=15)
    window_end = _whole_second_after(time.time())
    time.sleep(max(0.0, window_end.timestamp() - time.time()))
    slurm_s = time.monotonic() - began
    baseline, window = Window(baseline_start, window_start), Window(window_start, window_end)
    # The report reads the window's jobs from accounting by time, once slurmdbd has placed every submitted one there:
    # under load the last job's record reached it after the window closed (its id missing from the report's jobs).
    submitted = {j.job_id for j in [*before, *after, running, waiting]}
    slurm.wait("accounting to place every submitted job in the window", lambda: submitted <= {
        j.job_id for j in sacct_jobs(baseline.start, window.end)}, timeout_s=15)

    # Known history: the window runs busier GPUs, one host's exporter down half the time, a Running inference pod
    # (a Pending one requests GPUs it does not hold), slower and more failing gateway traffic.
    half = window.seconds // 2
    periods = [
        Period(baseline, (Gpus("gpu-a800-01", A800, 8, 50.0), Gpus("gpu-4090-01", RTX4090, 4, 20.0)),
               (("speech", "infer-0", 2, "Running"), ("speech", "infer-1", 8, "Pending")),
               Traffic(requests=100, server_errors=1, client_errors=3, latency_bucket="1.0")),
        Period(window, (*(Gpus(f"gpu-a800-0{i}", A800, 8, 80.0) for i in range(1, 5)),
                        Gpus("gpu-4090-01", RTX4090, 8, 60.0),
                        Gpus("gpu-4090-02", RTX4090, 8, 100.0, present=lambda f: f < half / window.seconds)),
               (("speech", "infer-0", 4, "Running"), ("speech", "infer-1", 8, "Pending")),
               Traffic(requests=20, server_errors=1, client_errors=2, latency_bucket="1.5")),
    ]
    started = time.monotonic()
    prometheus = start_prometheus(tmp_path / "prometheus", periods)
    try:
        prometheus_s = time.monotonic() - started
        out = tmp_path / "report"
        result = CliRunner().invoke(app, [
            "report", "--project-dir", str(REPO), "--window", str(window), "--baseline", str(baseline),
            "--out", str(out), "--prometheus-url", prometheus.url, "--resolution", "1s"])
        assert result.exit_code == 0, result.output
    finally:
        prometheus.stop()
    FIGURES.append(f"gpuctl report test world: Slurm job mix {slurm_s:.1f} s, Prometheus backfilled and ready "
                   f"{prometheus_s:.1f} s, report {time.monotonic() - started - prometheus_s:.1f} s")

    # What the report reads back from accounting is what was submitted.
    jobs = {j.job_id: j for j in sacct_jobs(baseline.start, window.end)}
    assert {j.job_id for j in [*before, *after, running, waiting]} <= set(jobs)
    for job in [*before, *after, running]:
        recorded = jobs[job.job_id]
        assert recorded.start is not None
        assert abs(recorded.start - recorded.submit - job.wait_s) <= SCHEDULING_S, (job, recorded)
        assert recorded.partition == "a800-train"
    assert jobs[running.job_id].end is None and jobs[waiting.job_id].start is None

    def held_s(job: Submitted, period: Window) -> tuple[float, float]:
        """The known seconds a job held its GPUs in the period, low and high."""
        if job is running:
            return (period.end.timestamp() - job.released - SCHEDULING_S,  # type: ignore[operator]
                    period.end.timestamp() - job.released)  # type: ignore[operator]
        return RUN_S - 1, RUN_S + RUN_TOLERANCE_S

    def gpu_hours(mix: list[Submitted], period: Window) -> tuple[float, float]:
        low, high = zip(*(held_s(j, period) for j in mix), strict=True)
        return (sum(j.gpus * s for j, s in zip(mix, low, strict=True)) / 3600,
                sum(j.gpus * s for j, s in zip(mix, high, strict=True)) / 3600)

    report = json.loads((out / FIGURES_JSON).read_text())
    assert report["capacity"] == {"slurm": 64, "flex": 16, "kubernetes": 48}
    b, w = report["baseline"], report["window"]
    assert (b["window"], w["window"]) == (str(baseline), str(window))

    # Allocation: Slurm GPU-seconds within the run tolerance (the running job's clipped at the window's end), all in
    # the slurm pool's partition; the Running pod's requests on a kubernetes node, exactly (never the Pending one's).
    submitted_w = [*after, running, waiting]
    for got, mix, period in ((b, before, baseline), (w, [*after, running], window)):
        low, high = gpu_hours(mix, period)
        assert low <= got["slurm_gpu_hours"] <= high, (period, got["slurm_gpu_hours"])
        pod_gpus = 2 if got is b else 4
        assert got["kubernetes_gpu_hours"] == pytest.approx(pod_gpus * period.seconds / 3600)
        slurm_pct = 100 * got["slurm_gpu_hours"] * 3600 / (64 * period.seconds)
        assert got["pool_utilization_pct"] == pytest.approx({"slurm": slurm_pct, "flex": 0.0,
                                                             "kubernetes": 100 * pod_gpus / 48})
        assert got["utilization_pct"] == pytest.approx(
            100 * (got["slurm_gpu_hours"] * 3600 + pod_gpus * period.seconds) / (128 * period.seconds))

    # DCGM, capacity-weighted over the 128 GPUs; the doubled pod-labelled GPU counted once; the host whose exporter
    # was down half the window counts as idle then. Exact but for float sums.
    assert (b["dcgm_utilization_pct"], w["dcgm_utilization_pct"]) == pytest.approx(
        ((8 * 50 + 4 * 20) / 128, (32 * 80 + 8 * 60 + 8 * 100 * half / window.seconds) / 128))
    assert b["dcgm_pool_utilization_pct"] == pytest.approx({"slurm": 8 * 50 / 64, "flex": 0, "kubernetes": 4 * 20 / 48})
    assert w["dcgm_pool_utilization_pct"] == pytest.approx(
        {"slurm": 32 * 80 / 64, "flex": 0, "kubernetes": (8 * 60 + 8 * 100 * half / window.seconds) / 48})

    # Queue wait from accounting, over the jobs submitted in each period, per team and all, within the scheduling
    # tolerance; the job still waiting at the window's end counts up to the end and as never started.
    def known_waits_h(mix: list[Submitted]) -> list[float]:
        return [(window.end.timestamp() - j.submitted if j is waiting else j.wait_s) / 3600 for j in mix]

    for team in ("speech", "nlp-foundation", "all"):
        for got, mix in ((b, before), (w, submitted_w)):
            mine = [j for j in mix if team in (j.account, "all")]
            waits = got["waits"][team]
            assert (waits["jobs"], waits["never_started"]) == (len(mine), int(waiting in mine))
            for q in (50, 95):
                # Nearest rank (numpy's inverted_cdf), as gpuctl simulate states it, from the known waits.
                expected = float(np.percentile(known_waits_h(mine), q, method="inverted_cdf"))
                assert waits[f"p{q}_h"] == pytest.approx(expected, abs=SCHEDULING_S / 3600), (team, q)

    # The gateway: the one latency bucket's interpolated p95, and server-side failures of the teams' requests only.
    assert (b["inference_latency_p95_s"], w["inference_latency_p95_s"]) == pytest.approx(
        (0.5 + 0.5 * 0.95, 1.0 + 0.5 * 0.95))
    assert (b["inference_error_pct"], w["inference_error_pct"]) == pytest.approx((1.0, 5.0))
    for got, latency_s, error_pct, period in ((b, 0.975, 1.0, baseline), (w, 1.475, 5.0, window)):
        assert [t for t, _, _ in got["inference_series"]] == list(range(1, period.seconds + 1))
        assert [p95 for _, p95, _ in got["inference_series"]] == pytest.approx([latency_s] * period.seconds)
        assert [errors for _, _, errors in got["inference_series"]] == pytest.approx([error_pct] * period.seconds)
    # The DCGM series per step: the window's second half without the host whose exporter was down.
    assert [v for _, v in w["dcgm_series"]] == pytest.approx(
        [(32 * 80 + 8 * 60 + 8 * 100 * (t <= half)) / 128 for t in range(1, window.seconds + 1)])

    # Adoption per team: weekly jobs, GPU-hours and active users.
    assert set(b["adoption"]) == set(w["adoption"]) == {"speech", "nlp-foundation"}
    for team in ("speech", "nlp-foundation"):
        for got, mix, period in ((b, before, baseline), (w, submitted_w, window)):
            mine = [j for j in mix if j.account == team]
            adoption = got["adoption"][team]
            assert adoption["weekly_jobs"] == pytest.approx(len(mine) * WEEK_S / period.seconds)
            low, high = gpu_hours([j for j in mine if j is not waiting], period)
            assert low <= adoption["gpu_hours"] <= high, (team, period, adoption)
            assert adoption["active_users"] == (2 if (team, got) == ("speech", w) else 1)

    # The markdown and the printed table show the same figures.
    summary = (out / SUMMARY).read_text()
    assert (f"| GPU busy (DCGM, capacity-weighted) [%] | {b['dcgm_utilization_pct']:.2f} | "
            f"{w['dcgm_utilization_pct']:.2f} | {w['dcgm_utilization_pct'] - b['dcgm_utilization_pct']:+.1f} pts |"
            ) in summary
    assert "| training jobs submitted | 3 | 6 | +100 % |" in summary
    assert "| nlp-foundation | 1 -> 3 |" in summary
    assert "│ GPU busy (DCGM, capacity-weighted) [%] " in result.output

    # The plots are PNGs matplotlib reads back, and the summary links each one.
    for name in PLOTS:
        image = matplotlib.image.imread(out / name)
        assert image.shape[0] > 100 and image.shape[1] > 100, name
        assert f"]({name})" in summary
