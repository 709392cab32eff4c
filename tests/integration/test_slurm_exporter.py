"""The Slurm exporter: parsing, counting each job start once, the exposition format (promtool), and real Slurm."""

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from components.monitoring.prometheus import slurm_scrape_config
from components.site.site import Site
from hosts import SLURM_EXPORTER
from hosts.slurm_exporter import METRICS, Exporter, job_accounts, job_starts, node_states
from runbooks.rollout.gates import GateResult, PrometheusGates, Verdict
from tests.builders import parse, with_changes
from tests.harness.daemons import PROMETHEUS, PrometheusServer, free_ports, stop_all, wait_for
from tests.harness.slurm_cluster import Cluster, slurm_marks

EXPORTER = SLURM_EXPORTER
T0 = datetime(2026, 11, 29, 9, 0, 0)


def test_should_count_each_node_once_by_its_base_state() -> None:
    sinfo = ("gpu-a800-01 allocated\ngpu-a800-09 drained*\ngpu-a800-09 drained*\ngpu-a800-10 draining\n"
             "gpu-a800-02 idle~\ngpu-a800-03 down*\ngpu-a800-04 mixed\ngpu-a800-05 future\n")
    assert node_states(sinfo) == {"alloc": 1, "comp": 0, "down": 1, "drain": 2, "fail": 0, "idle": 1, "maint": 0,
                                  "mix": 1, "resv": 0, "other": 1}


def test_should_read_only_jobs_that_started() -> None:
    sacct = ("12|2026-11-29T09:00:00|2026-11-29T09:05:00|a800-train|train_normal\n"
             "13|2026-11-29T09:01:00|Unknown|a800-train|train_normal\n"
             "14|2026-11-29T09:01:00|None|a800-flex|train_high\n")
    assert job_starts(sacct) == [("12", "a800-train", "train_normal", T0, T0 + timedelta(minutes=5))]


def test_should_read_the_account_of_each_running_job() -> None:
    assert job_accounts("4242|vision\n4243|speech\n\n4244|\n") == {"4242": "vision", "4243": "speech"}


class FakeSlurm:
    def __init__(self) -> None:
        self.now = T0
        self.sacct = ""
        self.squeue = ""
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        return {"sinfo": "gpu-a800-01 idle\n", "squeue": self.squeue}.get(args[0], self.sacct)


def line(job: str, submit: datetime, start: datetime, partition: str = "a800-train", qos: str = "train_normal") -> str:
    return f"{job}|{submit:%Y-%m-%dT%H:%M:%S}|{start:%Y-%m-%dT%H:%M:%S}|{partition}|{qos}\n"


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in:\n{text}"
    return float(found.group(1))


def test_should_count_each_job_start_once_across_polls() -> None:
    slurm = FakeSlurm()
    exporter = Exporter(slurm, lambda: slurm.now)
    # Started before the exporter: not a start it saw.
    slurm.sacct = line("10", T0 - timedelta(hours=2), T0 - timedelta(hours=1))
    slurm.now = T0 + timedelta(minutes=1)
    exporter.poll()
    slurm.sacct += line("11", T0, T0 + timedelta(seconds=30)) + line("12", T0, T0 + timedelta(minutes=50))
    slurm.now = T0 + timedelta(minutes=55)
    exporter.poll()
    exporter.poll()  # the same window again
    # Requeued: job 11 starts a second time, after waiting 20 minutes more.
    slurm.sacct += line("11", T0, T0 + timedelta(minutes=70))
    slurm.now = T0 + timedelta(minutes=75)
    exporter.poll()
    out = exporter.render()
    labels = 'partition="a800-train",qos="train_normal"'
    assert sample(out, f"slurm_job_queue_wait_seconds_count{{{labels}}}") == 3
    assert sample(out, f"slurm_job_queue_wait_seconds_sum{{{labels}}}") == 30 + 50 * 60 + 70 * 60
    assert sample(out, f'slurm_job_queue_wait_seconds_bucket{{{labels},le="60"}}') == 1
    assert sample(out, f'slurm_job_queue_wait_seconds_bucket{{{labels},le="3600"}}') == 2
    assert sample(out, f'slurm_job_queue_wait_seconds_bucket{{{labels},le="+Inf"}}') == 3
    # Each poll re-reads at most an hour, never everything since the exporter started.
    assert slurm.calls[-1][5] == "--starttime=2026-11-29T09:15:00"


def test_should_not_count_a_start_in_the_second_the_exporter_started_in() -> None:
    # sacct's whole seconds cannot tell a start before the exporter from one after it within that second; CI once
    # counted the job a previous test had started 0.7 s before the exporter.
    slurm = FakeSlurm()
    slurm.now = T0 + timedelta(milliseconds=500)
    exporter = Exporter(slurm, lambda: slurm.now)
    slurm.sacct = line("24", T0 - timedelta(seconds=1), T0) + line("25", T0, T0 + timedelta(seconds=1))
    slurm.now = T0 + timedelta(seconds=5)
    exporter.poll()
    labels = 'partition="a800-train",qos="train_normal"'
    assert sample(exporter.render(), f"slurm_job_queue_wait_seconds_count{{{labels}}}") == 1


def test_should_count_a_failed_poll_and_keep_the_last_snapshot() -> None:
    def broken(args: list[str]) -> str:
        raise RuntimeError("sinfo exited 1: Unable to contact slurm controller")

    exporter = Exporter(broken, lambda: T0)
    exporter.poll()
    out = exporter.render()
    assert sample(out, "slurm_exporter_errors_total") == 1
    assert sample(out, "slurm_exporter_last_success_timestamp_seconds") == 0


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool: apt-get install prometheus")
def test_should_expose_metrics_promtool_accepts() -> None:
    slurm = FakeSlurm()
    exporter = Exporter(slurm, lambda: slurm.now)
    slurm.sacct = line("11", T0, T0 + timedelta(seconds=30)) + line("12", T0, T0 + timedelta(hours=3), "a800-flex")
    slurm.squeue = '12|vision\n13|a"b\n'
    slurm.now = T0 + timedelta(hours=3)
    exporter.poll()
    assert sample(exporter.render(), 'slurm_job_account{slurmjobid="13",account="a\\"b"}') == 1
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=exporter.render(), capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def exporter_site(slurm: Cluster, port: int) -> Site:
    """The session cluster's stack with its exporter on `port`, polled and scraped every second."""
    return parse(with_changes(slurm.values, slurm__exporter_port=port, slurm__exporter_interval_s=1))


@pytest.fixture
def exporter_url(slurm: Cluster) -> Iterator[str]:
    """The exporter as its service runs it, on 127.0.0.1, polling the session cluster every second."""
    (port,) = free_ports(1)
    site = exporter_site(slurm, port)
    env = {**os.environ, "SLURM_CONF": str(slurm.conf_dir / "slurm.conf")}
    log = (slurm.stack.log_dir / "slurm-exporter.log").open("a")
    process = subprocess.Popen([sys.executable, str(EXPORTER), "--listen", "127.0.0.1", "--port",
                                str(site.slurm.exporter_port), "--interval", str(site.slurm.exporter_interval_s)],
                               env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("the exporter's first poll", lambda: _polled_at(url) > 0, timeout_s=10)
        # It counts starts from the first whole second after it started: a test's jobs start after that.
        time.sleep(max(0.0, math.floor(_polled_at(url)) + 1 - time.time()))
        yield url
    finally:
        stop_all([process])


def _polled_at(url: str) -> float:
    """When the exporter last heard from Slurm (0: not yet, or not serving yet)."""
    try:
        return sample(scrape(url), "slurm_exporter_last_success_timestamp_seconds")
    except OSError:
        return 0.0


def make_a_job_wait(slurm: Cluster, node: str, qos: str, seconds: float,
                    first_seen: Callable[[], bool] | None = None) -> None:
    """Two whole-node jobs on one node: the first starts at once, the second waits `seconds` for it to go (and, if
    given, until `first_seen` says the first start is where the test looks for it)."""
    gpus = ("-A", "speech", f"--qos={qos}", "-w", node, "-p", "a800-train", "--gres=gpu:a800:8", "--wrap=sleep 300")
    blocker = slurm.sbatch(*gpus)
    slurm.wait_state(blocker, "RUNNING")
    waiter = slurm.sbatch(*gpus)
    time.sleep(seconds)
    if first_seen is not None:
        wait_for("the first start to be seen", first_seen, timeout_s=30, interval_s=0.5)
    # The premise of every figure a caller checks: the node stayed taken, and the waiter waited, all along.
    held, waiting = slurm.job(blocker), slurm.job(waiter)
    assert held["JobState"] == "RUNNING" and held["Restarts"] == "0", f"the blocker let go of {node} early: {held}"
    assert waiting["JobState"] == "PENDING", f"the waiter did not wait for {node}: {waiting}"
    slurm.run("scancel", blocker)
    slurm.wait_state(waiter, "RUNNING")


def starts_in_slurm(slurm: Cluster) -> str:
    """Every start of every job, requeued ones included, as slurmdbd recorded them: what a failing count is read
    against."""
    return slurm.run("sacct", "--duplicates", "--allusers", "--allocations", "--noheader", "--parsable2",
                     "--starttime=now-1hour", "--endtime=now",
                     "--format=JobIDRaw,Submit,Start,End,State,Partition,QOS,NodeList", check=False).stdout


class TestOnRealSlurm:
    pytestmark = slurm_marks()

    def test_should_measure_how_long_a_job_waited_for_its_node(self, slurm: Cluster, exporter_url: str) -> None:
        make_a_job_wait(slurm, "gpu-a800-03", "train_normal", 4)
        labels = 'partition="a800-train",qos="train_normal"'

        counted = f"slurm_job_queue_wait_seconds_count{{{labels}}} "

        def waiter_counted() -> bool:
            # The blocker's start may reach the histogram a poll before the waiter's: the waiter's 4 s is in the sum
            # once it has been counted too.
            out = scrape(exporter_url)
            return counted in out and sample(out, f"slurm_job_queue_wait_seconds_sum{{{labels}}}") >= 4

        with contextlib.suppress(TimeoutError):  # the assertions below say what was counted
            wait_for("the waiter's start in the histogram", waiter_counted, timeout_s=15)
        out = scrape(exporter_url)
        record = f"the exporter's histogram:\n{out}\nSlurm's record of every start:\n{starts_in_slurm(slurm)}"
        # Two starts, each counted once: the blocker's, seconds after its submission, and the waiter's, after the 4 s
        # its node was taken.
        assert sample(out, f"slurm_job_queue_wait_seconds_count{{{labels}}}") == 2, record
        assert 4 <= sample(out, f"slurm_job_queue_wait_seconds_sum{{{labels}}}") <= 30, record
        assert sample(out, f'slurm_job_queue_wait_seconds_bucket{{{labels},le="60"}}') == 2, record

    @pytest.mark.skipif(PROMETHEUS is None, reason="needs prometheus: apt-get install prometheus")
    def test_should_feed_the_rollouts_queue_gate_through_prometheus(self, slurm: Cluster, exporter_url: str,
                                                                    tmp_path: Path) -> None:
        # Prometheus scrapes the exporter with the scrape config the stack renders for it (at controller_host, here
        # localhost, and the exporter's port; every second).
        site = exporter_site(slurm, int(urllib.parse.urlsplit(exporter_url).port or 0))
        prometheus = PrometheusServer(tmp_path, [slurm_scrape_config(site)])
        try:
            prometheus.wait_ready()
            # rate() sees an increase only between two scrapes of one series: the second start must come after
            # Prometheus has scraped the first (under load sacct can report both starts in one poll otherwise).
            first = 'slurm_job_queue_wait_seconds_count{partition="a800-train",qos="train_high"} 1'

            def first_scraped() -> bool:
                query = urllib.parse.urlencode({"query": first.replace(" 1", " == 1")})
                with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as response:
                    return bool(json.load(response)["data"]["result"])

            make_a_job_wait(slurm, "gpu-a800-05", "train_high", 3, first_seen=first_scraped)
            gates = PrometheusGates(prometheus.url, site.rollout.gates, window_minutes=0.5)
            queue: list[GateResult] = []

            def measured() -> bool:
                queue[:] = [r for r in gates.check().results if r.gate == "train_queue_time"]
                return queue[0].value is not None

            wait_for("the queue gate to have data", measured, timeout_s=20, interval_s=1)
            # Both waits sit in the first bucket (<= 60 s): the gate reads at most a minute, and passes.
            assert queue[0].verdict == Verdict.PASS and 0 < queue[0].value <= 1, queue[0]
        finally:
            prometheus.stop()

    def test_should_serve_its_declared_metrics_and_the_account_of_each_running_job(
            self, slurm: Cluster, exporter_url: str) -> None:
        make_a_job_wait(slurm, "gpu-a800-06", "train_normal", 1)
        running = slurm.run("squeue", "--noheader", "--states=RUNNING", "-w", "gpu-a800-06",
                            "--format=%A").stdout.split()
        assert len(running) == 1
        account = f'slurm_job_account{{slurmjobid="{running[0]}",account="speech"}}'

        def both_seen() -> bool:
            # The starts reach the histogram once sacct has them, a poll or two after squeue shows the job.
            text = scrape(exporter_url)
            return account in text and "slurm_job_queue_wait_seconds_count{" in text

        wait_for("the running job's account and the starts' waits", both_seen, timeout_s=20)
        # What gpuctl plan takes for the exporter's metrics is exactly what it serves.
        served = {m.split("{")[0].split()[0] for m in scrape(exporter_url).splitlines() if not m.startswith("#")}
        assert served == set(METRICS)
        slurm.run("scancel", running[0])

    def test_should_count_a_drained_node(self, slurm: Cluster, exporter_url: str) -> None:
        slurm.run("scontrol", "update", "NodeName=gpu-a800-04", "State=DRAIN", "Reason=exporter test")
        try:
            wait_for("the drain in the metrics", lambda: sample(scrape(exporter_url), "slurm_nodes_drain") == 1,
                     timeout_s=10)
            out = scrape(exporter_url)
            assert sample(out, "slurm_nodes_idle") + sample(out, "slurm_nodes_drain") == 10
            assert sample(out, "slurm_exporter_errors_total") == 0
        finally:
            slurm.run("scontrol", "update", "NodeName=gpu-a800-04", "State=RESUME")
