"""The lending controller against the real Slurm test cluster and a real Prometheus scraping recorded demand.

Slurm is real (tests/harness/slurm_cluster.py), reached with SLURM_CONF as an operator's shell does; kubectl is
faked at its command line as in tests/integration/test_flex.py; Prometheus is the Debian binary scraping a
playback of a recorded curve every second (tests/harness/demand.py). Durations are the spec's, scaled down to
seconds: a recorded hour plays in SHOCK_STEP_S.
"""

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.scheduling.lending_decision import Action, Decision, Reason
from components.site.lending import Lending
from components.site.site import Site
from runbooks.flex.controller import AUDIT, Controller, Store
from runbooks.flex.lending import Flex, run_command
from runbooks.flex.signals import PrometheusDemand
from tests.builders import copy_project
from tests.harness.daemons import PROMETHEUS, PrometheusServer, free_ports, stop_all, wait_for
from tests.harness.demand import REPLICAS, Playback, serve_demand, shock_curve
from tests.harness.figures import FIGURES
from tests.harness.kubectl import FakeKubectl
from tests.harness.slurm_cluster import Cluster, slurm_marks
from tests.integration.test_flex import FLEX, GPU8

pytestmark = [*slurm_marks(), *([pytest.mark.skip(reason="needs prometheus: apt-get install prometheus")]
                                if PROMETHEUS is None else [])]

SHOCK_STEP_S = 2.0
"""s one recorded hour plays for."""
SCALED = {"lend_waiting_per_replica": 10, "reclaim_waiting_per_replica": 1, "interval_s": 1, "peak_s": 3,
          "trough_s": 4, "cooldown_s": 3, "max_step_nodes": 1, "training_floor_nodes": 1, "lend_wait_s": 10}
"""The spec's lending settings in seconds instead of minutes (production: 300 s peak, 1800 s trough, 600 s cooldown)."""


@dataclass
class World:
    playback: Playback
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    playback = Playback()
    port = serve_demand(playback)
    prometheus = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [
        {"job_name": "demand", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}])
    try:
        prometheus.wait_ready()
        demand = PrometheusDemand(prometheus.url)
        wait_for("the first scrape of demand", lambda: demand.read().replicas == REPLICAS, timeout_s=20, interval_s=0.2)
        yield World(playback, prometheus)
    finally:
        prometheus.stop()


@dataclass
class TimedKubectl(FakeKubectl):
    """Also records when each node was labelled lent (time.monotonic())."""

    lent_at: dict[str, float] = field(default_factory=dict)
    most_lent: int = 0

    def __call__(self, args: Any, timeout_s: float = 30) -> str:
        said = super().__call__(args, timeout_s)
        if list(args[1:3]) == ["label", "node"] and args[4].endswith("=true"):
            self.lent_at[args[3]] = time.monotonic()
        self.most_lent = max(self.most_lent, len(self.labelled))
        return said


def scaled(cluster: Cluster, **changes: Any) -> Site:
    return cluster.site.model_copy(update={"lending": Lending.model_validate({**SCALED, **changes})})


def controller(site: Site, world: World, kubectl: FakeKubectl, state: Path) -> Controller:
    flex = Flex(site, run_command, kubectl, lambda line: None)
    return Controller(site, flex, PrometheusDemand(world.prometheus.url).read, Store(state), say=lambda line: None)


def drive(c: Controller, seconds: float) -> list[tuple[float, Decision]]:
    """Steps every interval_s for `seconds`; (when each step started, its decision)."""
    decisions, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        decisions.append((started, c.step()))
        time.sleep(max(0.0, c.site.lending.interval_s - (time.monotonic() - started)))
    return decisions


def moves(decisions: list[tuple[float, Decision]]) -> list[tuple[Action, tuple[str, ...]]]:
    return [(d.action, d.nodes) for _, d in decisions if d.action != Action.HOLD and d.reason != Reason.FINISH_LEND]


def test_should_lend_at_the_recorded_shock_and_reclaim_in_the_trough_never_touching_protected_work(
        flex_slurm: Cluster, world: World, tmp_path: Path) -> None:
    # The flex partition admits train_preemptible alone (slurm.flex_qos): protected work there is a job Slurm cannot
    # requeue. The floor keeps it in Slurm: the controller lends the other node, first by name and no later in its run.
    protected = flex_slurm.sbatch("-A", "speech", "--qos=train_preemptible", "--no-requeue", "-w", FLEX[1], *GPU8)
    preemptible = flex_slurm.sbatch("-A", "speech", "--qos=train_preemptible", "-w", FLEX[0], *GPU8)
    for job in (protected, preemptible):
        flex_slurm.wait_state(job, "RUNNING")
    kubectl = TimedKubectl()
    c = controller(scaled(flex_slurm), world, kubectl, tmp_path)
    curve = shock_curve()
    world.playback.play(curve, SHOCK_STEP_S)
    crossing = world.playback.started + SHOCK_STEP_S * next(
        i for i, w in enumerate(curve) if w / REPLICAS >= SCALED["lend_waiting_per_replica"])
    # The last (trough) hour holds after the curve: room for the reclaim on a loaded machine.
    decisions = drive(c, SHOCK_STEP_S * len(curve) + 4)
    assert moves(decisions) == [(Action.LEND, (FLEX[0],)), (Action.RECLAIM, (FLEX[0],))]
    # Protected work is never requeued; the training floor (one node) is never crossed.
    assert flex_slurm.job(protected)["JobState"] == "RUNNING" and flex_slurm.job(protected)["Restarts"] == "0"
    assert int(flex_slurm.job(preemptible)["Restarts"]) >= 1
    assert kubectl.most_lent == 1 and kubectl.labelled == set()
    # Back in Slurm after the peak: no longer drained, the node takes jobs again (the requeued one waits out the
    # BeginTime slurmctld gives a requeued job, so a new one shows it).
    node = dict(re.findall(r"(\w+)=(\S*)", flex_slurm.run("scontrol", "--oneliner", "show", "node", FLEX[0]).stdout))
    assert "DRAIN" not in node["State"], node["State"]
    after = flex_slurm.sbatch("-A", "speech", "--qos=train_preemptible", "-w", FLEX[0], *GPU8)
    assert flex_slurm.wait_state(after, "RUNNING")["NodeList"] == FLEX[0]
    lines = [json.loads(line) for line in (tmp_path / AUDIT).read_text().splitlines()]
    assert len(lines) == len(decisions) and all(line["reason"] and line["detail"] for line in lines)
    decided = next(at for at, d in decisions if d.action == Action.LEND and d.reason == Reason.PEAK)
    step = kubectl.lent_at[FLEX[0]] - decided
    FIGURES.append(f"lending controller, recorded 3x shock ({len(curve)} hours at {SHOCK_STEP_S:g} s each): "
                   f"{len(moves(decisions))} moves; preemptible node: demand crossing to lend decision "
                   f"{decided - crossing:.1f} s (peak_s {SCALED['peak_s']} s + scrape and decision intervals), "
                   f"lend step (requeue, drain, label) {step:.1f} s")
    assert step < 5


def test_should_move_no_more_than_the_hysteresis_allows_on_an_oscillating_curve(
        flex_slurm: Cluster, world: World, tmp_path: Path) -> None:
    # Peaks and troughs of 2 s each, shorter than the 5 s peak and 6 s trough a move needs (a missed scrape makes one
    # look a second longer).
    kubectl = FakeKubectl()
    c = controller(scaled(flex_slurm, peak_s=5, trough_s=6), world, kubectl, tmp_path)
    world.playback.play([110.0, 0.0] * 4, 2.0)
    decisions = drive(c, 16)
    peaks = sum(d.reason == Reason.PEAK_TOO_SHORT for _, d in decisions)
    FIGURES.append(f"lending controller, oscillating curve (2 s peaks and troughs for 16 s, peak_s 5, trough_s 6): "
                   f"{len(moves(decisions))} moves over {len(decisions)} decisions ({peaks} held as too-short peaks)")
    assert moves(decisions) == [] and peaks >= 4 and kubectl.calls == [call for call in kubectl.calls
                                                                       if call[1] == "get"]


def test_should_lend_an_idle_node_within_seconds_of_the_demand_crossing(
        flex_slurm: Cluster, world: World, tmp_path: Path) -> None:
    kubectl = TimedKubectl()
    c = controller(scaled(flex_slurm, peak_s=1), world, kubectl, tmp_path)
    world.playback.play([0.0, 110.0], 1.0)
    crossing = world.playback.started + 1.0
    decisions = drive(c, 6)
    decided = next(at for at, d in decisions if d.action == Action.LEND)
    assert moves(decisions) == [(Action.LEND, (FLEX[0],))]
    step = kubectl.lent_at[FLEX[0]] - decided
    FIGURES.append(f"lending controller, idle node: demand crossing to lend decision {decided - crossing:.1f} s "
                   f"(peak_s 1 s + scrape and decision intervals), lend step (drain, label) {step:.1f} s")
    assert step < 5


def test_should_let_one_of_two_controllers_act_while_the_other_waits(
        flex_slurm: Cluster, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    project = copy_project(tmp_path, lambda config: config["gpu-cluster:lending"].update(
        {**SCALED, "prometheus_url": world.prometheus.url}))
    state = tmp_path / "state"
    ports = free_ports(2)
    gpuctl = Path(sys.executable).parent / "gpuctl"
    world.playback.play([0.0], 1.0)
    both = [subprocess.Popen([str(gpuctl), "flex", "--project-dir", str(project), "control", "--dry-run",
                              "--listen", "127.0.0.1", "--port", str(port), "--state-dir", str(state)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for port in ports]
    try:
        wait_for("a decision", lambda: (state / AUDIT).exists() and (state / AUDIT).read_text().count("\n") >= 2,
                 timeout_s=20)
        holder = int((state / "controller.lock").read_text().split("pid ")[1].split(",")[0])
        acting = next(p for p in both if p.pid == holder)
        waiting = next(p for p in both if p.pid != holder)
        status = subprocess.run([str(gpuctl), "flex", "--project-dir", str(project), "status", "--state-dir",
                                 str(state)], capture_output=True, text=True, timeout=60)
        assert "controller: last decision at " in status.stdout and "(dry-run): hold" in status.stdout, status
        stop_all([acting])
        wait_for("the waiting controller to take over", lambda: f"pid {waiting.pid}," in
                 (state / "controller.lock").read_text(), timeout_s=10)
    finally:
        stop_all(both)
    assert f"waiting: the lending controller (pid {holder}, since" in waiting.stderr.read()  # type: ignore[union-attr]


def test_should_change_nothing_while_prometheus_is_down_mid_peak(
        flex_slurm: Cluster, world: World, tmp_path: Path) -> None:
    kubectl = FakeKubectl()
    c = controller(scaled(flex_slurm, peak_s=4), world, kubectl, tmp_path)
    world.playback.play([110.0], 1.0)
    demand = PrometheusDemand(world.prometheus.url)
    wait_for("Prometheus to see the peak", lambda: (demand.read().waiting or 0) > 0, timeout_s=10, interval_s=0.2)
    before = drive(c, 2)
    assert {d.reason for _, d in before} <= {Reason.PEAK_TOO_SHORT}
    world.prometheus.stop()  # the last test of the module: the fixture's stop is then a no-op
    during = drive(c, 6)
    assert {d.reason for _, d in during} == {Reason.NO_DATA} and kubectl.labelled == set()
    assert all("DRAIN" not in flex_slurm.run("scontrol", "show", "node", n).stdout for n in FLEX)
