"""The lending controller's loop without Slurm: what it audits, remembers, counts and serves; pause and dry-run move
nothing; a restart keeps the hysteresis; one instance holds the lease. The flex pool is a double with the Flex
methods the controller calls; the real one runs in tests/integration/test_flex_controller.py."""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.monitoring.lending_metrics import METRICS as LENDING_METRICS
from components.scheduling.lending_decision import FlexNode, Owner, Signals
from runbooks.cli import app
from runbooks.flex.controller import AUDIT, LAST, Controller, Store
from runbooks.flex.lease import Lease
from runbooks.flex.lending import CommandError, NodeOutcome
from runbooks.flex.metrics import Metrics, serve
from runbooks.flex.signals import PrometheusDemand
from tests.builders import copy_project, parse, prod_values, with_changes
from tests.harness.daemons import free_ports

SITE = parse(with_changes(prod_values(), lending__peak_s=60, lending__trough_s=120, lending__cooldown_s=100,
                          lending__interval_s=10, lending__training_floor_nodes=1))
T0 = 1_700_000_000.0
PEAK = {"waiting": 100.0, "replicas": 2.0, "pending_pods": 0.0}
TROUGH = {"waiting": 0.0, "replicas": 2.0, "pending_pods": 0.0}


@dataclass
class PoolDouble:
    """The flex pool: nodes move as lend and reclaim say; `broken` makes Slurm unreachable."""

    owners: dict[str, Owner] = field(default_factory=lambda: {"gpu-a800-09": Owner.SLURM, "gpu-a800-10": Owner.SLURM})
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    requeue_checks: list[tuple[str, ...]] = field(default_factory=list)
    broken: bool = False
    requeue_broken: bool = False
    floors: list[tuple[str, int]] = field(default_factory=list)
    floor_broken: bool = False

    def pool(self) -> tuple[FlexNode, ...]:
        if self.broken:
            raise CommandError("scontrol --oneliner show node gpu-a800-09 did not answer within 30 s")
        return tuple(FlexNode(name, owner, gpu_model="A800-SXM4-80GB") for name, owner in self.owners.items())

    def lend(self, nodes: tuple[str, ...], wait_s: float, poll_s: float = 2.0) -> list[NodeOutcome]:
        self.calls.append(("lend", tuple(nodes)))
        for node in nodes:
            self.owners[node] = Owner.LENT
        return [NodeOutcome(node, True, "lent") for node in nodes]

    def requeue_stopped(self, nodes: list[str]) -> list[tuple[str, str]]:
        self.requeue_checks.append(tuple(nodes))
        if self.requeue_broken:
            raise CommandError("squeue --noheader --nodelist=gpu-a800-09 exited 1: Unable to contact slurm controller")
        return []

    def set_replica_floor(self, model: str, replicas: int) -> None:
        if self.floor_broken:
            raise CommandError("kubectl patch scaledobject vllm-qwen2-5-72b-scaledobject exited 1: Unauthorized")
        self.floors.append((model, replicas))

    def reclaim(self, nodes: tuple[str, ...], wait_s: float) -> list[NodeOutcome]:
        self.calls.append(("reclaim", tuple(nodes)))
        for node in nodes:
            self.owners[node] = Owner.SLURM
        return [NodeOutcome(node, True, "back in Slurm") for node in nodes]


@dataclass
class Curve:
    """Demand at a clock the test moves."""

    at: float = T0
    demand: dict[str, float | None] = field(default_factory=lambda: dict(TROUGH))

    def __call__(self) -> Signals:
        return Signals(at=self.at, **self.demand)


def controller(tmp_path: Path, pool: PoolDouble, curve: Curve, **options: Any) -> Controller:
    return Controller(SITE, pool, curve, Store(tmp_path), say=lambda line: None, **options)  # type: ignore[arg-type]


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / AUDIT).read_text().splitlines()]


def run_peak(c: Controller, curve: Curve, seconds: float, start: float = T0) -> None:
    curve.demand = dict(PEAK)
    for at in range(int(start), int(start + seconds) + 1, 10):
        curve.at = float(at)
        c.step()


def test_should_lend_after_the_peak_and_audit_every_decision_with_its_reason(tmp_path: Path) -> None:
    pool, curve = PoolDouble(), Curve()
    c = controller(tmp_path, pool, curve)
    run_peak(c, curve, 60)
    assert pool.calls == [("lend", ("gpu-a800-09",))]
    lines = audit(tmp_path)
    assert [(line["action"], line["reason"]) for line in lines] == [("hold", "peak-too-short")] * 6 + [("lend", "peak")]
    assert lines[-1]["detail"] == ("100 waiting over 2 replicas (50.0 each), 0 inference pods pending: peak for 60 s "
                                   "(lend at >= 10 each, a pod pending or the latency objective missed)")
    assert lines[-1]["outcomes"] == [{"node": "gpu-a800-09", "done": True, "detail": "lent"}]
    assert lines[-1]["mode"] == "live" and lines[-1]["at"] == "2023-11-14T22:14:20+00:00"
    rendered = c.metrics.render()
    assert 'gpucluster_flex_moves_total{action="lend"} 1' in rendered
    assert 'gpucluster_flex_decisions_total{action="hold",reason="peak-too-short"} 6' in rendered
    assert 'gpucluster_flex_nodes{owner="lent"} 1' in rendered
    assert "gpucluster_flex_lend_seconds_count 1" in rendered


def test_should_fill_a_lent_node_with_replicas_and_lift_the_floor_at_a_trough(tmp_path: Path) -> None:
    # prod's qwen2-5-72b: replicas.max 4, 4 GPUs a replica, lent_replicas 2; a lent flex node has 8 GPUs.
    pool, curve = PoolDouble(), Curve()
    c = controller(tmp_path, pool, curve)
    run_peak(c, curve, 60)
    assert pool.floors == []  # nothing lent: the chart's replicas.min stands
    curve.at += 10
    c.step()  # the lend seen done: the node carries the 2 replicas it fits, not the 1 the queue asked
    assert pool.floors == [("qwen2-5-72b", 6)]
    # A restart keeps what it set: a floor left raised is lowered at the trough.
    c = controller(tmp_path, pool, curve)
    curve.demand, curve.at = dict(TROUGH), curve.at + 10
    c.step()  # a trough: the floor goes, so do the replicas past the pool, and the node can be reclaimed empty
    c.step()
    assert pool.floors == [("qwen2-5-72b", 6), ("qwen2-5-72b", 1)]


def test_should_set_a_floor_it_failed_to_set_at_the_next_step_and_none_while_paused(tmp_path: Path) -> None:
    pool = PoolDouble(owners={"gpu-a800-09": Owner.LENT, "gpu-a800-10": Owner.SLURM}, floor_broken=True)
    curve = Curve(demand=dict(PEAK))
    said: list[str] = []
    c = Controller(SITE, pool, curve, Store(tmp_path), say=said.append)  # type: ignore[arg-type]
    c.step()
    assert said[0] == ("replica floor of qwen2-5-72b not set: kubectl patch scaledobject "
                       "vllm-qwen2-5-72b-scaledobject exited 1: Unauthorized")
    assert "gpucluster_flex_errors_total 1" in c.metrics.render()
    pool.floor_broken = False
    c.store.pause("alice", "drill in progress")
    curve.at += 10
    c.step()
    assert pool.floors == []
    c.store.resume()
    curve.at += 10
    c.step()
    assert pool.floors == [("qwen2-5-72b", 6)]


def test_should_keep_the_peak_clock_and_cooldown_across_a_restart(tmp_path: Path) -> None:
    pool, curve = PoolDouble(), Curve()
    run_peak(controller(tmp_path, pool, curve), curve, 30)
    # A restart 30 s into the peak: 30 s more make the 60 s a lend needs.
    run_peak(controller(tmp_path, pool, curve), curve, 30, start=T0 + 40)
    assert pool.calls == [("lend", ("gpu-a800-09",))]
    curve.demand, curve.at = dict(TROUGH), T0 + 200
    again = controller(tmp_path, pool, curve)
    assert again.memory.last_move_at == T0 + 60


def test_should_move_nothing_while_paused_and_move_once_resumed(tmp_path: Path) -> None:
    pool, curve = PoolDouble(), Curve()
    c = controller(tmp_path, pool, curve)
    c.store.pause("alice", "drill in progress")
    run_peak(c, curve, 60)
    assert pool.calls == []
    last = json.loads((tmp_path / LAST).read_text())
    assert (last["mode"], last["action"], last["paused"]["by"]) == ("paused", "lend", "alice")
    assert last["memory"]["last_move_at"] is None and last["memory"]["moves"] == []
    assert "gpucluster_flex_paused 1" in c.metrics.render()
    assert c.store.resume()
    curve.at += 10
    c.step()
    assert pool.calls == [("lend", ("gpu-a800-09",))]


def test_should_decide_in_a_dry_run_but_move_nothing(tmp_path: Path) -> None:
    pool, curve = PoolDouble(), Curve()
    c = controller(tmp_path, pool, curve, dry_run=True)
    run_peak(c, curve, 60)
    assert pool.calls == [] and audit(tmp_path)[-1]["mode"] == "dry-run"
    assert "gpucluster_flex_moves_total{" not in c.metrics.render()


@pytest.mark.parametrize("mode", ["live", "paused", "dry-run"])
def test_should_requeue_what_a_lend_stopped_on_lent_nodes_only_when_live(tmp_path: Path, mode: str) -> None:
    # A lent node's lend is over: if Slurm refused a requeue then, only the controller's later steps retry it.
    pool, curve = PoolDouble(owners={"gpu-a800-09": Owner.LENT, "gpu-a800-10": Owner.SLURM}), Curve()
    c = controller(tmp_path, pool, curve, dry_run=mode == "dry-run")
    if mode == "paused":
        c.store.pause("alice", "drill in progress")
    c.step()
    assert pool.requeue_checks == ([("gpu-a800-09",)] if mode == "live" else [])


def test_should_count_a_failed_requeue_check_and_still_decide(tmp_path: Path) -> None:
    pool = PoolDouble(owners={"gpu-a800-09": Owner.LENT, "gpu-a800-10": Owner.SLURM}, requeue_broken=True)
    curve = Curve()
    said: list[str] = []
    c = Controller(SITE, pool, curve, Store(tmp_path), say=said.append)  # type: ignore[arg-type]
    c.step()
    assert said[0] == ("requeue of jobs stopped by a lend failed: squeue --noheader --nodelist=gpu-a800-09 exited 1: "
                       "Unable to contact slurm controller")
    assert "gpucluster_flex_errors_total 1" in c.metrics.render() and len(audit(tmp_path)) == 1


def test_should_hold_when_slurm_cannot_be_read(tmp_path: Path) -> None:
    pool, curve = PoolDouble(broken=True), Curve()
    c = controller(tmp_path, pool, curve)
    run_peak(c, curve, 200)
    assert pool.calls == []
    assert {line["detail"] for line in audit(tmp_path)} == {"no data for the flex pool: holding"}
    assert "gpucluster_flex_errors_total 21" in c.metrics.render()


@pytest.mark.parametrize("record", [{"memory": {"peak_since": 1, "surprise": 2}}, {"memory": []},
                                    {"memory": {}, "lend_started": {"gpu-a800-09": "soon"}}])
def test_should_start_afresh_from_a_last_decision_it_cannot_take(tmp_path: Path, record: dict[str, Any]) -> None:
    (tmp_path / LAST).write_text(json.dumps(record))
    said: list[str] = []
    c = Controller(SITE, PoolDouble(), Curve(), Store(tmp_path), say=said.append)  # type: ignore[arg-type]
    assert len(said) == 1 and said[0].startswith("starting afresh: ")
    assert (c.memory.peak_since, c.lend_started) == (None, {})


def test_should_start_afresh_from_an_unreadable_last_decision(tmp_path: Path) -> None:
    (tmp_path / LAST).write_text("{torn")
    said: list[str] = []
    c = Controller(SITE, PoolDouble(), Curve(), Store(tmp_path), say=said.append)  # type: ignore[arg-type]
    assert said == [f"starting afresh: {tmp_path / LAST}: unreadable (Expecting property name enclosed in double "
                    "quotes: line 1 column 2 (char 1))"]
    assert c.memory.peak_since is None


def test_should_let_one_instance_hold_the_lease_while_the_other_waits(tmp_path: Path) -> None:
    first, second = Lease(tmp_path / "controller.lock"), Lease(tmp_path / "controller.lock")
    first.acquire(waiting=lambda line: pytest.fail(line))
    told: list[str] = []

    def sleep(_: float) -> None:
        first.release()  # the first instance stops while the second waits

    second.acquire(waiting=told.append, sleep=sleep)
    assert len(told) == 1 and told[0].startswith("waiting: the lending controller (pid ")
    assert told[0].endswith(f"holds {tmp_path / 'controller.lock'}")
    assert "the lending controller" in (tmp_path / "controller.lock").read_text()
    second.release()


def test_should_serve_its_metrics_and_nothing_else(tmp_path: Path) -> None:
    metrics = Metrics()
    (port,) = free_ports(1)
    server = serve(metrics.render, "127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert 'gpucluster_flex_nodes{owner="slurm"} 0' in response.read().decode()
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("reason", ["", "   ", "two\nlines"])
def test_should_refuse_a_pause_without_a_one_line_reason(tmp_path: Path, reason: str) -> None:
    project = copy_project(tmp_path)
    result = CliRunner().invoke(app, ["flex", "--project-dir", str(project), "pause", "--reason", reason,
                                      "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 2 and "--reason must be one non-empty line" in result.output
    assert not (tmp_path / "state").exists()


def test_should_pause_and_resume_from_the_cli(tmp_path: Path) -> None:
    project, state = copy_project(tmp_path), tmp_path / "state"
    args = ["flex", "--project-dir", str(project)]
    paused = CliRunner().invoke(app, [*args, "pause", "--reason", "drill", "--state-dir", str(state)])
    assert paused.exit_code == 0, paused.output
    assert Store(state).paused() is not None and Store(state).paused()["reason"] == "drill"  # type: ignore[index]
    assert CliRunner().invoke(app, [*args, "resume", "--state-dir", str(state)]).output.strip() == "resumed"
    again = CliRunner().invoke(app, [*args, "resume", "--state-dir", str(state)])
    assert again.output.strip() == "the controller was not paused" and Store(state).paused() is None


def test_should_serve_exactly_the_metrics_gpuctl_plan_counts_on() -> None:
    metrics = Metrics()
    metrics.decisions[("hold", "steady")] += 1
    metrics.moves["lend"] += 1
    metrics.observe_lend(12.5)
    served = {line.split("{")[0].split()[0] for line in metrics.render().splitlines() if not line.startswith("#")}
    assert served == set(LENDING_METRICS)
    assert 'gpucluster_flex_lend_seconds_bucket{le="10"} 0' in metrics.render()
    assert 'gpucluster_flex_lend_seconds_bucket{le="30"} 1' in metrics.render()


@pytest.mark.parametrize("latency", [False, True])
def test_should_read_every_signal_as_missing_from_a_prometheus_that_does_not_answer(latency: bool) -> None:
    (port,) = free_ports(1)
    reader = PrometheusDemand(f"http://127.0.0.1:{port}", latency=latency)
    signals = reader.read()
    assert (signals.waiting, signals.replicas, signals.pending_pods, signals.ttft_p95_s) == (None, None, None, None)
    names = [error.split(":")[0] for error in reader.errors]
    assert names == ["waiting", "replicas", "pending_pods", *(["ttft_p95_s"] if latency else [])]
    assert all(f"Prometheus at http://127.0.0.1:{port}: " in error for error in reader.errors)
