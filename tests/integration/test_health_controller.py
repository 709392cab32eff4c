"""The node health controller against the real Slurm test cluster and a real Prometheus scraping DCGM series.

Slurm is real (tests/harness/slurm_cluster.py), reached with SLURM_CONF as the controller's unit reaches it; kubectl
is faked at its command line (tests/harness/health_world.py FakeKube) as the lending tests do; the DCGM series come
from an exporter double the Debian Prometheus scrapes every second, read with the controller's own queries; the
diagnosis is a recorded `dcgmi diag -r 3 -j` (tests/hosts/records) printed by the command the diagnoser runs. The
spec's durations are scaled to seconds (production: 600 s window, 180 s staleness, 60 s interval).
"""

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.monitoring.health_metrics import FRESHNESS
from components.scheduling.health_decision import HANDED_REASON, SUSPECT_REASON, Action, Decision, Reason
from components.site.health import Health
from components.site.site import Site
from components.site.wellknown import HEALTH_ANNOTATION
from runbooks.flex.lending import run_command
from runbooks.health.controller import AUDIT, MEMORY, Controller, Store
from runbooks.health.diagnose import Diagnoser
from runbooks.health.nodes import Nodes
from runbooks.health.signals import instant_vector, read_findings
from tests.harness.daemons import PROMETHEUS, PrometheusServer, free_ports, wait_for
from tests.harness.figures import FIGURES
from tests.harness.health_world import DcgmDouble, FakeKube
from tests.harness.slurm_cluster import Cluster, slurm_marks

pytestmark = [*slurm_marks(), *([pytest.mark.skip(reason="needs prometheus: apt-get install prometheus")]
                                if PROMETHEUS is None else [])]

RECORDS = Path(__file__).parents[1] / "hosts" / "records"
WATCHED = ("gpu-a800-01", "gpu-a800-02")
"""The nodes the exporter double serves; every other node has no DCGM samples (stale: left alone)."""
# An XID is news while changes() over window_s sees it: 5 s keeps it in view for several 1 s scrapes when a loaded
# machine stretches a controller step past its interval (a 2 s window lost it in a 4-worker run: 30 steps "healthy").
SCALED = {"window_s": 5, "stale_after_s": 3, "interval_s": 1, "max_drained_pct": 20, "failures_before_handoff": 2}


@dataclass
class World:
    dcgm: DcgmDouble
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    dcgm = DcgmDouble(WATCHED)
    prometheus = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [
        {"job_name": "dcgm", "static_configs": [{"targets": [dcgm.target]}]}])
    try:
        prometheus.wait_ready()
        # Prometheus's first scrape can come seconds after it is ready on a loaded machine: the tests start after it.
        wait_for("the first scrape of the DCGM double", lambda: bool(instant_vector(prometheus.url, FRESHNESS)[1]),
                 timeout_s=60, interval_s=0.5)
        yield World(dcgm, prometheus)
    finally:
        prometheus.stop()
        dcgm.stop()


def scaled(cluster: Cluster, **changes: object) -> Site:
    """The cluster's site with SCALED (and `changes`) over its own health section, validated as the spec would be."""
    health = Health.model_validate({**cluster.site.health.model_dump(), **SCALED, **changes})
    return cluster.site.model_copy(update={"health": health})


def recorded_diag(tmp_path: Path, name: str, code: int) -> list[str]:
    """The command a diagnosis runs: dcgmi's recorded document (its header cut) and exit status, after a moment."""
    body = tmp_path / f"{name}.out"
    body.write_text((RECORDS / name).read_text().split("# ---\n", 1)[1])
    return ["sh", "-c", f"sleep 0.5; cat {body}; exit {code}"]


def controller(site: Site, world: World, kube: FakeKube, state: Path, diag: list[str]) -> Controller:
    nodes = Nodes(site, run_command, kube, lambda line: None)
    return Controller(site, nodes, lambda: read_findings(site, world.prometheus.url),
                      Diagnoser(site, state, lambda node: diag), Store(state), say=lambda line: None,
                      moves_lock=state / "moves.lock")


def drive(c: Controller, until: Callable[[list[Decision]], bool], timeout_s: float) -> list[Decision]:
    """Steps every interval_s until `until` holds on the decisions so far; fails naming them past the timeout."""
    decisions: list[Decision] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        started = time.monotonic()
        decisions.append(c.step())
        if until(decisions):
            return decisions
        time.sleep(max(0.0, c.site.health.interval_s - (time.monotonic() - started)))
    raise AssertionError(f"not within {timeout_s} s: {[acts(d) for d in decisions]}")


def acts(decision: Decision, node: str = WATCHED[0]) -> tuple[str, str]:
    made = next((d for d in decision.nodes if d.node == node), None)
    return (made.action.value, made.reason.value) if made else ("paused", decision.detail)


def reason(cluster: Cluster, node: str) -> str:
    out = cluster.run("scontrol", "--oneliner", "show", "node", node).stdout
    return out.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in out else ""


@pytest.fixture
def health_slurm(flex_slurm: Cluster, world: World) -> Iterator[Cluster]:
    """The watched nodes healthy before the test, resumed in Slurm after it whatever it left."""
    for node in WATCHED:
        for gpu in range(8):
            for metric in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
                world.dcgm.set(node, gpu, metric, 0.0)
    world.dcgm.serving = True
    yield flex_slurm
    for node in WATCHED:
        flex_slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def test_should_drain_a_node_with_an_xid_let_its_job_finish_diagnose_it_and_return_it(
        health_slurm: Cluster, world: World, tmp_path: Path) -> None:
    node = WATCHED[0]
    kube = FakeKube([n.name for g in health_slurm.site.node_groups for n in g.nodes])
    c = controller(scaled(health_slurm), world, kube, tmp_path, recorded_diag(tmp_path, "dcgmi-diag-r3-pass-dcgm4.json",
                                                                               0))
    # The job outlasts the XID's scrape and the drain.
    job = health_slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-train", "-w", node,
                              "--gres=gpu:a800:1", "--wrap=sleep 5")
    health_slurm.wait_state(job, "RUNNING")
    started = time.monotonic()
    world.dcgm.set(node, 3, "DCGM_FI_DEV_XID_ERRORS", 79.0)
    decisions = drive(c, lambda ds: acts(ds[-1])[0] == "return", timeout_s=30)
    seen = [acts(d) for d in decisions]
    steps = [step for i, step in enumerate(seen) if i == 0 or step != seen[i - 1]]
    assert ("drain", "suspect") in steps and ("wait", "draining") in steps and ("diagnose", "idle") in steps
    assert steps[-1] == ("return", "diag-passed")
    # Whether a step sees the 0.5 s diagnosis still running depends on the machine's load: the order is what counts.
    assert steps.index(("drain", "suspect")) < steps.index(("wait", "draining")) < steps.index(("diagnose", "idle"))
    # The job finished on its own (never requeued); the node is back in both schedulers with no mark left.
    assert health_slurm.job(job)["JobState"] == "COMPLETED" and health_slurm.job(job)["Restarts"] == "0"
    assert reason(health_slurm, node) == "" and node not in kube.cordoned and HEALTH_ANNOTATION not in \
        kube.annotations.get(node, {})
    assert ["kubectl", "cordon", node] in kube.calls and ["kubectl", "uncordon", node] in kube.calls
    audit = [json.loads(line) for line in (tmp_path / AUDIT).read_text().splitlines()]
    assert any(n["node"] == node and n["action"] == "drain" and "XID 79 (GPU has fallen off the bus)" in n["detail"]
               and n["outcome"] == "done" for line in audit for n in line["nodes"])
    FIGURES.append(f"health controller, XID 79 on a node running a 5 s job: drained, drained empty, diagnosed "
                   f"(recorded dcgmi -r 3, 0.5 s) and returned in {time.monotonic() - started:.1f} s "
                   f"({len(decisions)} steps of 1 s)")


def test_should_requeue_a_suspect_nodes_batch_job_past_requeue_after_s_and_diagnose_the_emptied_node(
        health_slurm: Cluster, world: World, tmp_path: Path) -> None:
    node = WATCHED[0]
    kube = FakeKube([n.name for g in health_slurm.site.node_groups for n in g.nodes])
    site = scaled(health_slurm, requeue_after_s=1)
    c = controller(site, world, kube, tmp_path, recorded_diag(tmp_path, "dcgmi-diag-r3-pass-dcgm4.json", 0))
    job = health_slurm.sbatch("-A", "speech", "--qos=train_normal", "-p", "a800-train", "-w", node,
                              "--gres=gpu:a800:1", "--wrap=sleep 300")
    health_slurm.wait_state(job, "RUNNING")
    world.dcgm.set(node, 2, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0)
    decisions = drive(c, lambda ds: acts(ds[-1])[0] == "diagnose", timeout_s=20)
    made = [acts(d) for d in decisions]
    assert made.index(("drain", "suspect")) < made.index(("requeue", "draining")) < len(made) - 1
    assert made[-1] == ("diagnose", "idle")
    after = health_slurm.job(job)
    assert int(after["Restarts"]) >= 1 and after["JobState"] == "PENDING"


def test_should_hand_a_node_to_a_human_after_its_diagnosis_fails_twice(
        health_slurm: Cluster, world: World, tmp_path: Path) -> None:
    node = WATCHED[1]
    kube = FakeKube([n.name for g in health_slurm.site.node_groups for n in g.nodes])
    c = controller(scaled(health_slurm), world, kube, tmp_path, recorded_diag(tmp_path, "dcgmi-diag-r3-fail-dcgm4.json",
                                                                               226))
    world.dcgm.set(node, 5, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2.0)
    decisions = drive(c, lambda ds: acts(ds[-1], node)[0] == "hand-off", timeout_s=30)
    made = [acts(d, node) for d in decisions]
    assert ("drain", "suspect") in made and made.count(("diagnose", "diag-failed")) == 1
    assert made[-1] == ("hand-off", "diag-failed")
    assert reason(health_slurm, node).startswith(HANDED_REASON) and "DRAIN" in health_slurm.run(
        "scontrol", "show", "node", node).stdout
    assert kube.annotations[node][HEALTH_ANNOTATION] == "handed" and node in kube.cordoned
    memory = json.loads((tmp_path / MEMORY).read_text())
    assert len(memory[node]["failures"]) == 2
    # Handed off, it stays so: more steps change nothing.
    assert acts(c.step(), node) == ("wait", "handed")
    assert reason(health_slurm, node).startswith(HANDED_REASON)


def test_should_pause_when_the_dcgm_samples_go_stale_or_prometheus_is_unreachable(
        health_slurm: Cluster, world: World, tmp_path: Path) -> None:
    node = WATCHED[0]
    kube = FakeKube([n.name for g in health_slurm.site.node_groups for n in g.nodes])
    site = scaled(health_slurm)
    c = controller(site, world, kube, tmp_path, ["false"])
    drive(c, lambda ds: acts(ds[-1]) == ("wait", "healthy"), timeout_s=10)
    world.dcgm.serving = False  # the exporter answers with nothing: no GPU is "healthy" for it
    world.dcgm.set(node, 0, "DCGM_FI_DEV_XID_ERRORS", 79.0)
    paused = drive(c, lambda ds: ds[-1].paused, timeout_s=site.health.stale_after_s + 5)
    more = drive(c, lambda ds: len(ds) >= 2, timeout_s=5)
    assert all(d.paused and d.nodes == () for d in more) and "no node has a fresh DCGM sample" in paused[-1].detail
    (closed,) = free_ports(1)
    down = Controller(site, Nodes(site, run_command, kube, lambda line: None),
                      lambda: read_findings(site, f"http://127.0.0.1:{closed}"),
                      Diagnoser(site, tmp_path, lambda n: ["false"]), Store(tmp_path / "down"), say=lambda line: None)
    decision = down.step()
    assert decision.paused and f"127.0.0.1:{closed}" in decision.detail
    assert reason(health_slurm, node) == "" and kube.cordoned == set() and not any(
        call[1] in ("cordon", "annotate") for call in kube.calls)
    lines = [json.loads(line) for line in (tmp_path / AUDIT).read_text().splitlines()]
    assert lines[-1]["paused"] is True
    assert all(Action.DRAIN not in {n.action for n in d.nodes} and Reason.SUSPECT not in {n.reason for n in d.nodes}
               for d in paused)
    assert SUSPECT_REASON not in health_slurm.run("sinfo", "-R").stdout
