"""The campaign's rules at a time scale of 0.0002 (a 250 s hold is 0.05 s, the 1 h soak 0.72 s): real commands inject
and undo each fault (a marker file stands for the fault in place), the drills' probes read that file, Alertmanager is
a list the test fills, the inference load is the real RateLoad against a gateway double. Each drill fails when its
expected reaction is taken away; an alert with no SOP fails the campaign; a run killed mid-drill leaves a fault that
the next run reverts and logs. The verdict judges what was measured: each mutation (no load, every request failing or
taking 30 s, a critical alert firing throughout, a soak cut short, a resume after the window) fails its own
criterion."""

import json
import os
import re
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.scheduling.lending_decision import Owner
from components.site.acceptance import Acceptance, DrillKind
from runbooks.acceptance.alerts import AlertmanagerError, FiringAlert, sop_missing
from runbooks.acceptance.campaign import (
    CampaignRefusedError,
    CampaignRunner,
    Load,
    Reaction,
    Target,
    terminated_as_exit,
)
from runbooks.acceptance.faults import Fault, Switches
from runbooks.acceptance.lending import ControllerSampler, UnreadableError
from runbooks.acceptance.load import JobRecord, RateLoad
from runbooks.acceptance.report import write_report
from runbooks.acceptance.store import FAILED, PASSED, CampaignStore
from runbooks.acceptance.verdict import LOADS, loaded_s
from runbooks.flex.metrics import Metrics
from runbooks.rollout.machine import REQUIRED_CRITERIA
from runbooks.stack.audit import ACCEPTANCE_RECORD, AuditLog
from runbooks.stack.lock import StackLock
from tests.harness.switches import disarmed

REPO = Path(__file__).resolve().parents[3]
KEY = b"k" * 32
DRILL = {"hold_s": 250, "detect_within_s": 200, "recover_within_s": 200, "revert_after_s": 20000}
# A run killed mid-drill loses what it ran of that drill: 4 s of interruption (scaled) absorb it on a loaded machine.
SPEC = Acceptance(time_scale=0.0002, soak_h=1, shock_minutes=30, max_interruption_s=20000, peak_source="declared",
                  drills=[
    {"kind": "network_partition", "sop": "network-partition", **DRILL},
    {"kind": "node_failure", "sop": "node-power-loss", **DRILL},
    {"kind": "storage_jitter", "sop": "storage-jitter", "delay_ms": 100, **DRILL},
    {"kind": "model_hot_swap", "sop": "model-hot-swap", **DRILL}])


class Killed(BaseException):
    """The campaign's process dies here (BaseException: nothing in the runner catches it)."""


@dataclass
class MarkerProbe:
    """Detects the fault by its marker file; its reactions are what the test says happened."""

    marker: Path
    reacted: bool = True
    detects: bool = True
    die_on_detection: bool = False
    interrupt: Callable[[], None] | None = None
    """Called when the fault shows: what interrupts the campaign mid-drill (Ctrl-C, SIGTERM, a bug)."""
    calls: list[str] = field(default_factory=list)

    def detected(self) -> bool:
        present = self.marker.exists()
        if present and self.die_on_detection:
            raise Killed
        if present and self.interrupt is not None:
            self.interrupt()
        return present and self.detects

    def recovered(self) -> bool:
        return not self.marker.exists()

    def reactions(self) -> list[Reaction]:
        return [Reaction("training requeued, none lost", self.reacted, "as the test says")]


@dataclass
class Gateway:
    """A path a load takes (the gateway, the hot tier) as the load sees it: every answer fails when `fails`, and takes
    `seconds` on the clock the load reads latency on (`clock`, monotonic plus the time the answers took: the test does
    not wait 30 s)."""

    fails: bool = False
    seconds: float = 0.0
    took: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clock(self) -> float:
        with self.lock:
            return time.monotonic() + self.took

    def request(self, number: int) -> tuple[bool, dict[str, float]]:
        with self.lock:
            self.took += self.seconds
        return not self.fails, {}

    def load(self, name: str = "inference") -> RateLoad:
        return RateLoad(name, 100 if name == "inference" else 20, 1000, self.request, timer=self.clock)


@dataclass
class Slurm:
    """The training path as the load and the verdict see it: sbatch accepts every job (numbered as submitted), each
    asking 8 GPUs for the 10 s it runs; sacct says each completed on them, except the ones in `ended` (an empty state:
    sacct has no record of it), those in `no_gpu`, run without a GPU allocated, those in `short`, which ran 1 s, and
    those in `requeued`, whose first run ended in that state as soon as it was submitted (on node-01), and those a lend
    stopped (`yielded`: the job running when the lend came, requeued then on the flex node lent)."""

    ended: dict[str, str] = field(default_factory=dict)
    no_gpu: set[str] = field(default_factory=set)
    short: set[str] = field(default_factory=set)
    requeued: dict[str, str] = field(default_factory=dict)
    submitted: dict[str, float] = field(default_factory=dict)
    yielded: dict[str, tuple[float, str]] = field(default_factory=dict)
    on_flex: bool = True

    def lent(self, at: float, node: str) -> None:
        """A lend took `node` at `at`: the last job submitted was running there (unless none runs `on_flex`), and is
        requeued."""
        if self.submitted and self.on_flex:
            self.yielded[max(self.submitted, key=self.submitted.__getitem__)] = (at, node)

    def sbatch(self, number: int) -> tuple[bool, dict[str, float]]:
        self.submitted[str(number)] = time.time()
        return True, {"job": float(number), "job_s": 10.0}

    def sacct(self, jobs: Sequence[str]) -> dict[str, JobRecord]:
        return {job: JobRecord(state, 0 if job in self.no_gpu else 8 * (1.0 if job in self.short else 10.0), 8,
                               (((self.submitted[job], self.requeued[job], "node-01"),) if job in self.requeued else ())
                               + (((self.yielded[job][0], "REQUEUED", self.yielded[job][1]),)
                                  if job in self.yielded else ()))
                for job in jobs if (state := self.ended.get(job, "COMPLETED"))}

    def load(self) -> RateLoad:
        return RateLoad("training", 20, 1000, self.sbatch)


FLEX_NODE = "flex-01"
PEAK_FACTOR = 1.5
"""Inference asked this many times its peak or more is the fake controller's peak: the shock's, never the soak's."""


@dataclass
class LendingController:
    """The lending controller as its /metrics show it (the real renderer, runbooks/flex/metrics.py): a decision at each
    read, on the demand `asked` gives (the rate the inference load was last asked, over its peak): at PEAK_FACTOR or
    more it lends FLEX_NODE (telling `lent` when), under it it takes the node back; unless `down` (no answer), hung (its
    last decision an hour old and staying there), `paused` (it decides and moves nothing) or `blind` (its demand never
    peaks)."""

    metrics: Metrics = field(default_factory=Metrics)
    down: bool = False
    hung: bool = False
    paused: bool = False
    blind: bool = False
    asked: Callable[[], float] = lambda: 1.0
    lent: Callable[[float, str], None] = lambda at, node: None
    lending: bool = False

    def read(self) -> str:
        if self.down:
            raise UnreadableError("http://127.0.0.1:1/metrics: connection refused")
        if not self.hung:
            peak = not self.blind and self.asked() >= PEAK_FACTOR
            move = peak != self.lending and not self.paused
            self.metrics.decisions[("lend" if peak else "hold", "peak" if peak else "steady")] += 1
            if move:
                self.lending = peak
                self.metrics.moves["lend" if peak else "reclaim"] += 1
                self.metrics.nodes[Owner.LENT] = int(peak)
                if peak:
                    self.metrics.observe_lend(0.01)
                    self.lent(time.time(), FLEX_NODE)
            self.metrics.paused = self.paused
            self.metrics.last_decision = time.time()
        return self.metrics.render()

    def hang(self) -> None:
        self.hung, self.metrics.last_decision = True, time.time() - 3600

    def sampler(self) -> ControllerSampler:
        return ControllerSampler("the test's controller", 0.5, self.read, (FLEX_NODE,), every_s=0.01)


@dataclass
class World:
    tmp: Path
    alerts: list[FiringAlert] = field(default_factory=list)
    probes: dict[DrillKind, MarkerProbe] = field(default_factory=dict)
    gateway: Gateway = field(default_factory=Gateway)
    hot_tier: Gateway = field(default_factory=Gateway)
    slurm: Slurm = field(default_factory=Slurm)
    lending: LendingController = field(default_factory=LendingController)

    def __post_init__(self) -> None:
        for kind in DrillKind:
            self.probes[kind] = MarkerProbe(self.tmp / f"{kind.value}.fault")

    def runner(self, sop_dir: Path = REPO / "docs" / "sop", firing: Callable[[], list[FiringAlert]] | None = None,
                spec: Acceptance = SPEC, loads: list[Load] | None = None) -> tuple[CampaignRunner, CampaignStore]:
        store = CampaignStore(self.tmp / "state" / "acceptance.sqlite")
        targets = {kind: Target(Fault(kind.value, f"marker {probe.marker.name}", (("touch", str(probe.marker)),),
                                      (("rm", "-f", str(probe.marker)),)), probe)
                   for kind, probe in self.probes.items()}
        loads = [self.gateway.load(), self.hot_tier.load("storage"), self.slurm.load(),
                 self.lending.sampler()] if loads is None else loads
        inference = next((load for load in loads if isinstance(load, RateLoad) and load.name == "inference"), None)
        # The controller's demand: the rate the inference load was last asked, over its peak (the shock's 3x).
        self.lending.asked = lambda: max(inference.recent("asked_per_s", 0), default=0) / inference.peak_per_s \
            if inference is not None else 0.0
        self.lending.lent = self.slurm.lent
        runner = CampaignRunner(spec, store, AuditLog(self.tmp / "state" / "failures.jsonl", KEY),
                          AuditLog(self.tmp / "rollout" / "audit.jsonl", KEY), Switches(self.tmp / "state" / "sw"),
                          sop_dir, firing or (lambda: list(self.alerts)), targets, loads,
                          StackLock(self.tmp / "state" / "lock", "gpuctl acceptance"), self.slurm.sacct, poll_s=0.02)
        return runner, store

    def rollout_records(self) -> list[dict[str, Any]]:
        path = self.tmp / "rollout" / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield World(tmp_path)
    disarmed(tmp_path / "state" / "sw", timeout_s=0)  # a switch a failed test left must not fire after it


def failing(store: CampaignStore, campaign_id: str) -> list[str]:
    """The criteria the verdict found not met, as "<phase> <name>"."""
    criteria = store.steps(campaign_id)["verdict"][2]["criteria"]
    return [f"{c['phase']} {c['name']}" for c in criteria if not c["passed"]]


def test_should_pass_when_every_drill_reacts_and_record_it_for_the_rollout(world: World) -> None:
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    assert [f.mode for f in store.failures(campaign.id)] == [d.kind for d in SPEC.drills]
    assert not any(p.marker.exists() for p in world.probes.values()), "a fault is still in place"
    assert [(r["what"], r["decision"], r["plan_digest"]) for r in world.rollout_records()] == [
        (ACCEPTANCE_RECORD, PASSED, "sha256:deployed")]
    assert runner.log.verify().records >= 2 + 2 * len(DrillKind)


def test_should_fail_each_drill_whose_fault_is_never_detected(world: World) -> None:
    # One campaign for the four: each drill detects on its own, so each must fail on its own criterion.
    for probe in world.probes.values():
        probe.detects = False
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and failing(store, campaign.id) == [f"soak drill:{d.kind}"
                                                                          for d in SPEC.drills]
    assert all(store.steps(campaign.id)[f"drill:{kind.value}"][2]["detection_s"] is None for kind in DrillKind)
    assert "not detected" in (campaign.reason or "") and world.rollout_records() == []


def test_should_fail_each_drill_whose_expected_reaction_is_missing(world: World) -> None:
    for probe in world.probes.values():
        probe.reacted = False  # e.g. the node's training was not requeued
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and failing(store, campaign.id) == [f"soak drill:{d.kind}"
                                                                          for d in SPEC.drills]
    assert all(store.steps(campaign.id)[f"drill:{kind.value}"][2]["reactions"][0]["ok"] is False
               for kind in DrillKind)


def test_should_fail_the_campaign_when_an_alert_fires_with_no_sop(world: World) -> None:
    world.alerts.append(FiringAlert("NothingDocumentsThis", "f1", "2026-12-01T10:00:00Z", {"severity": "warning"}))
    world.alerts.append(FiringAlert("SlurmNodesUnavailable", "f2", "2026-12-01T10:00:00Z", {"severity": "warning"}))
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED
    assert failing(store, campaign.id) == ["campaign failures with an SOP"]
    assert "fired with no SOP (or one without its sections): NothingDocumentsThis" in (campaign.reason or "")
    fired = {f.mode: f.sop for f in store.failures(campaign.id) if f.source == "fired"}
    assert fired == {"NothingDocumentsThis": None, "SlurmNodesUnavailable": "slurm-nodes-unavailable"}


def test_should_refuse_to_plan_a_drill_whose_sop_is_missing_or_lacks_its_sections(world: World, tmp_path: Path
                                                                                 ) -> None:
    sops = tmp_path / "sop"
    sops.mkdir()
    (sops / "network-partition.md").write_text("")  # an empty SOP is no SOP
    sections = (REPO / "docs" / "sop" / "storage-jitter.md").read_text()
    (sops / "storage-jitter.md").write_text(sections)
    (sops / "model-hot-swap.md").write_text(sections.replace("## Recovery", "## Notes"))
    runner, _ = world.runner(sop_dir=sops)
    with pytest.raises(CampaignRefusedError) as refused:
        runner.run("sha256:deployed", "canary")
    assert str(refused.value) == (
        "drills[0].sop: docs/sop/network-partition.md lacks the sections Detection, Impact, Immediate action, "
        "Recovery, Escalation; drills[1].sop: docs/sop/node-power-loss.md does not exist; "
        "drills[3].sop: docs/sop/model-hot-swap.md lacks the sections Recovery")


def test_should_find_every_section_in_every_sop() -> None:
    assert {path.stem: sop_missing(path.stem, path.parent) for path in (REPO / "docs" / "sop").glob("*.md")} == {
        path.stem: None for path in (REPO / "docs" / "sop").glob("*.md")}


def test_should_revert_and_log_the_fault_a_run_killed_mid_drill_left(world: World) -> None:
    partition = world.probes[DrillKind.NETWORK_PARTITION]
    partition.die_on_detection = True
    runner, store = world.runner()
    with pytest.raises(Killed):
        runner.run("sha256:deployed", "canary")
    assert partition.marker.exists(), "the kill leaves the partition in place"
    store.close()

    partition.die_on_detection = False
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    left = [f for f in store.failures(campaign.id) if f.detail.get("left_by")]
    assert [(f.mode, f.sop) for f in left] == [("network_partition", "network-partition")]
    reverted = [f for f in store.faults(campaign.id) if f.drill == "network_partition"]
    assert [f.reverted_by for f in reverted] == ["resume", "drill"]
    assert not partition.marker.exists()
    # The killed run's switch was disarmed by the resume, every drill's by its revert: no watcher outlives the test.
    switches = world.tmp / "state" / "sw"
    assert not list(switches.glob("*.json")), "a switch is still armed"
    assert disarmed(switches, timeout_s=3) == [], "a switch's watcher outlived its drill"


def test_should_fail_a_campaign_that_could_not_read_alertmanager(world: World) -> None:
    def unreadable() -> list[FiringAlert]:
        raise AlertmanagerError("cannot read http://127.0.0.1:9/api/v2/alerts: connection refused")

    runner, store = world.runner(firing=unreadable)
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and failing(store, campaign.id) == ["campaign alertmanager read"]


def test_should_end_a_campaign_the_deployment_changed_under_leaving_no_fault(world: World) -> None:
    partition = world.probes[DrillKind.NETWORK_PARTITION]
    partition.die_on_detection = True
    runner, store = world.runner()
    with pytest.raises(Killed):
        runner.run("sha256:old", "canary")
    store.close()
    partition.die_on_detection = False
    runner, store = world.runner()
    campaign = runner.run("sha256:new", "canary")
    old = next(c for c in store.campaigns() if c.deployment == "sha256:old")
    assert (old.verdict, old.reason) == (FAILED, "superseded: the deployment is now sha256:new")
    assert all(f.reverted_at is not None for f in store.faults(old.id)) and not partition.marker.exists()
    assert campaign.verdict == PASSED


# --- the verdict from measurements: each mutation fails its own criterion --------------------------------------------

INFERENCE = ["inference p95 latency", "inference errors"]


def test_should_pass_on_measurements_and_print_each_criterion_with_its_value_objective_and_source(
        world: World) -> None:
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    criteria = {f"{c['phase']} {c['name']}": c for c in store.steps(campaign.id)["verdict"][2]["criteria"]}
    assert campaign.verdict == PASSED, campaign.reason
    assert {f"{phase} {name}" for phase in ("soak", "shock", "campaign") for name in INFERENCE} <= criteria.keys()
    assert {"soak soak duration", "shock shock duration", "campaign continuity", "campaign critical alerts"} \
        <= criteria.keys()
    errors = criteria["shock inference errors"]
    assert errors["measured"].startswith("0.00 % of ") and errors["objective"] == "<= 1 % failed " \
        "(inference_error_pct)" and errors["source"].startswith("the inference load's own timings")
    # Every criterion the rollout's gate requires is one this verdict judges.
    assert {*REQUIRED_CRITERIA, *(f"soak drill:{d.kind}" for d in SPEC.drills)} <= criteria.keys()
    record = world.rollout_records()[0]["detail"]
    assert record["measured"]["soak_s"] >= SPEC.scaled(SPEC.soak_h * 3600)
    assert all(c["passed"] for c in record["criteria"]) and len(record["criteria"]) == len(criteria)


def test_should_fail_inference_when_the_load_generator_does_nothing(world: World) -> None:
    runner, store = world.runner(loads=[])
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == [
        *(f"soak {name}" for name in INFERENCE), *(f"soak {load} load" for load in LOADS),
        *(f"shock {name}" for name in INFERENCE), *(f"shock {load} load" for load in LOADS),
        "shock storage p99 latency", "shock lending controller", "shock training yields to inference",
        *(f"campaign {name}" for name in INFERENCE),
        "campaign training jobs refused", "campaign training jobs lost", "campaign training GPU-seconds"]
    assert "no request measured" in (campaign.reason or "") and "no job submitted" in (campaign.reason or "")
    assert "shock storage load: never ran (no load)" in (campaign.reason or "")
    assert world.rollout_records() == []


@pytest.mark.parametrize(("load", "failed", "why"), [
    # The hot tier's load capped at 30 chunks/s (max_storage_write_mib_s): the shock asks 3 x 20.
    pytest.param(lambda w: RateLoad("storage", 20, 30, w.hot_tier.request, timer=w.hot_tier.clock),
                 ["shock storage load"], "of 60 asked", id="should fail the shock when storage is bounded below it"),
    # max_training_jobs reached on the first job: every later tick is skipped, in the drills and the shock.
    pytest.param(lambda w: RateLoad("training", 20, 1000, w.slurm.sbatch, limit=1),
                 ["soak training load", "shock training load"], "ticks skipped)",
                 id="should fail the phases when training is past its job limit"),
])
def test_should_fail_a_phase_whose_load_did_not_offer_what_it_asked(
        world: World, load: Callable[[World], RateLoad], failed: list[str], why: str) -> None:
    broken = load(world)
    others = [world.gateway.load(), world.hot_tier.load("storage"), world.slurm.load()]
    runner, store = world.runner(loads=[*(broken if o.name == broken.name else o for o in others),
                                          world.lending.sampler()])
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == failed, campaign.reason
    assert why in (campaign.reason or "") and world.rollout_records() == []


def test_should_show_each_loads_offered_against_asked_rate_per_phase(world: World) -> None:
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    criteria = {f"{c['phase']} {c['name']}": c for c in store.steps(campaign.id)["verdict"][2]["criteria"]}
    assert campaign.verdict == PASSED, campaign.reason
    # The shock asks shock_factor x the peak of all three at once: 300 requests/s, 60 MiB/s, 216,000 jobs/h.
    assert [criteria[f"shock {load} load"]["measured"].split(" asked")[0].split(" offered of ")[1] for load in LOADS
            ] == ["300", "60", "216,000"]
    assert criteria["shock training load"]["measured"].split(" ")[1] == "jobs/h"
    assert criteria["soak storage load"]["measured"].split(" asked")[0].endswith(" MiB/s offered of 20")
    # The report's table: a row per phase and load, the same figures.
    table = write_report(store, campaign, world.tmp / "report").read_text().split("## Loads per phase\n\n")[1]
    rows = [row.split(" | ") for row in table.split("\n\n")[0].splitlines()[2:]]
    assert [(phase, load, verdict) for phase, load, _, verdict in rows] == [
        (f"| {phase}", load, "PASS |") for phase in ("soak", "shock") for load in LOADS]
    assert rows[4][2] == criteria["shock storage load"]["measured"]


def test_should_fail_storage_when_each_checkpoint_write_takes_longer_than_the_rate_allows(world: World) -> None:
    world.hot_tier.seconds = 1.0  # 8 chunks in flight at the shock's 3 x 20/s allow 0.133 s each
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["shock storage p99 latency"]
    assert "objective p99 <= 0.133 s (8 chunks in flight at 60/s" in (campaign.reason or "")


def test_should_fail_training_when_a_job_of_the_load_is_lost(world: World) -> None:
    world.slurm.ended = {"3": "NODE_FAIL", "5": "REQUEUED", "7": ""}  # requeued is not lost; "" no record in sacct
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["campaign training jobs lost"]
    assert "1 of " in (campaign.reason or "") and "lost (3 NODE_FAIL)" in (campaign.reason or "")
    assert "; 1 with no record in sacct (7)" in (campaign.reason or "")


def test_should_fail_gpu_seconds_when_a_completed_job_had_no_gpu_allocated(world: World) -> None:
    world.slurm.no_gpu = {"4"}  # sacct: COMPLETED, AllocTRES without gres/gpu, whatever it asked
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["campaign training GPU-seconds"]
    assert "; 1 completed with no GPU allocated (4)" in (campaign.reason or "")


def test_should_fail_gpu_seconds_when_a_completed_job_ran_short_of_its_request(world: World) -> None:
    world.slurm.short = {"2"}  # COMPLETED after 1 s of the 10 s it runs: it trained a tenth of what it asked
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["campaign training GPU-seconds"]
    assert "; 1 completed short of their request (2 8 of 80)" in (campaign.reason or "")
    assert "objective every completed job delivered the GPUs it asked x its 10 s" in (campaign.reason or "")


def test_should_count_requeues_from_sacct_and_put_them_on_the_timeline(world: World, tmp_path: Path) -> None:
    world.slurm.requeued = {"1": "PREEMPTED", "3": "NODE_FAIL"}  # each ran again and completed: none lost
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    lost = next(c for c in store.steps(campaign.id)["verdict"][2]["criteria"] if c["name"] == "training jobs lost")
    # And the job the shock's lend requeued on the flex node.
    (lent,) = world.slurm.yielded
    assert lost["measured"].endswith(f"; 3 requeues (1 PREEMPTED, 3 NODE_FAIL, {lent} REQUEUED)")
    timeline = write_report(store, campaign, tmp_path / "report").read_text().split(
        "## Training requeues (sacct)\n\n")[1].split("\n\n")[0].splitlines()
    # Job 1 was the first the first drill's load submitted; job 3 followed within the same step.
    assert [line.split(" requeued at ")[0] for line in timeline] == ["- job 1", "- job 3", f"- job {lent}"]
    assert timeline[0].endswith(" s (drill:network_partition)")


def test_should_fail_the_error_budget_when_every_inference_request_fails(world: World) -> None:
    world.gateway.fails = True
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    # The lend came, training yielded, but inference was not served: inference did not win the peak.
    assert failing(store, campaign.id) == ["soak inference errors", "shock inference errors",
                                           "shock training yields to inference", "campaign inference errors"]
    assert "100.00 % of" in (campaign.reason or "") and world.rollout_records() == []
    assert "shock training yields to inference: inference not served (inference errors 100.00 % of " \
        in (campaign.reason or "")


def test_should_fail_the_p95_when_every_inference_request_takes_30_s(world: World) -> None:
    world.gateway.seconds = 30.0
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["soak inference p95 latency", "shock inference p95 latency",
                                           "shock training yields to inference", "campaign inference p95 latency"]
    assert "objective p95 <= 2000 ms (inference_p95_ms)" in (campaign.reason or "")


def test_should_fail_health_when_a_critical_alert_fires_throughout(world: World) -> None:
    world.alerts.append(FiringAlert("GpuTemperatureHigh", "f9", "2026-12-01T10:00:00Z",
                                    {"severity": "critical", "Hostname": "gpu-a800-01"}))
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["campaign critical alert GpuTemperatureHigh on gpu-a800-01"]
    assert f"(objective <= {SPEC.scaled(SPEC.critical_alert_max_s):.1f} s (critical_alert_max_s: no drill raised " \
           "it))" in (campaign.reason or "")


def test_should_fail_the_soak_duration_when_the_soak_is_cut_short(world: World, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.setattr(CampaignRunner, "_soak", lambda self, campaign: {"seconds": 0})
    # A day (17.28 s scaled), far more than the drills and the shock take on any machine: only the soak can fill it.
    runner, store = world.runner(spec=SPEC.model_copy(update={"soak_h": 24}))
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["soak soak duration"], campaign.reason
    assert "objective >= 17.28 s (soak_h 24 x time_scale 0.0002)" in (campaign.reason or "")


def test_should_fail_continuity_when_a_campaign_is_resumed_after_its_window(world: World) -> None:
    world.probes[DrillKind.NETWORK_PARTITION].die_on_detection = True
    runner, store = world.runner()
    with pytest.raises(Killed):
        runner.run("sha256:deployed", "canary")
    store.close()
    # The run died an hour and more ago (scaled): as if its campaign had started that long before.
    late = SPEC.scaled(SPEC.max_interruption_s) + SPEC.scaled(SPEC.soak_h * 3600)
    with sqlite3.connect(world.tmp / "state" / "acceptance.sqlite") as db:
        db.execute("UPDATE campaigns SET started_at = started_at - ?", (late,))
    world.probes[DrillKind.NETWORK_PARTITION].die_on_detection = False
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["campaign continuity"], campaign.reason
    # The soak was not skipped: the resumed run loaded the cluster for all of soak_h (scaled), by its own clock.
    assert loaded_s(store.steps(campaign.id)) >= SPEC.scaled(SPEC.soak_h * 3600) and world.rollout_records() == []


@pytest.mark.parametrize(("break_it", "why"), [
    pytest.param(lambda c: setattr(c, "down", True), "no answer at any look", id="should fail when it is not running"),
    pytest.param(LendingController.hang, "s old", id="should fail when its last decision is stale"),
])
def test_should_fail_the_lending_controller_when_it_does_not_decide_through_the_shock(
        world: World, break_it: Callable[[LendingController], None], why: str) -> None:
    break_it(world.lending)
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    # Not deciding, it lends nothing: inference does not win the peak either.
    assert failing(store, campaign.id) == ["shock lending controller", "shock training yields to inference"], \
        campaign.reason
    assert why in (campaign.reason or "") and "LendingControllerDown's threshold" in (campaign.reason or "")
    assert world.rollout_records() == []


@pytest.mark.parametrize(("break_it", "failed"), [
    pytest.param(lambda w: setattr(w.lending, "blind", True), ["shock training yields to inference"],
                 id="should fail when the demand never peaks"),
    pytest.param(lambda w: setattr(w.lending, "paused", True),
                 ["shock lending controller", "shock training yields to inference"],
                 id="should fail when the controller is paused"),
])
def test_should_fail_training_yields_when_no_lend_takes_a_flex_node_in_the_shock(
        world: World, break_it: Callable[[World], None], failed: list[str]) -> None:
    break_it(world)
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == failed, campaign.reason
    assert "shock training yields to inference: no lend during the shock; no training job of the load requeued on a " \
           "flex node (flex-01) during the shock - no lend; the shock's inference: inference p95 latency " \
        in (campaign.reason or "")
    assert world.rollout_records() == []


def test_should_fail_training_yields_when_the_lend_requeues_no_training(world: World) -> None:
    world.slurm.on_flex = False  # nothing of the load ran on the node lent
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id) == ["shock training yields to inference"], campaign.reason
    assert "no training job of the load requeued on a flex node (flex-01) during the shock - lent at " \
        in (campaign.reason or "")


def test_should_show_the_lend_and_the_yield_in_the_verdict_and_on_the_timeline(world: World, tmp_path: Path) -> None:
    runner, store = world.runner()
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    criterion = next(c for c in store.steps(campaign.id)["verdict"][2]["criteria"]
                     if c["name"] == "training yields to inference")
    (job,) = world.slurm.yielded  # the one lend, at the shock
    assert re.fullmatch(rf"lent at [\d.]+ s into the shock, job {job} requeued on flex-01 at [\d.]+ s \(REQUEUED\); "
                        r"the shock's inference: inference p95 latency .*; inference errors 0\.00 % .*",
                        criterion["measured"])
    report = write_report(store, campaign, tmp_path / "report").read_text()
    assert re.search(r"- lend at [\d.]+ s \(shock\)", report) and re.search(
        rf"- job {job} requeued at [\d.]+ s \(shock\)", report), report


# --- a drill reverts on interrupt, before the command exits ---------------------------------------------------------


def _raise(error: BaseException) -> Callable[[], None]:
    def interrupt() -> None:
        raise error
    return interrupt


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)  # the handler raises in the main thread before this ends


@pytest.mark.parametrize(("interrupt", "raised"), [
    pytest.param(_raise(KeyboardInterrupt()), KeyboardInterrupt, id="should revert on Ctrl-C"),
    pytest.param(_sigterm, SystemExit, id="should revert on SIGTERM"),
    pytest.param(_raise(RuntimeError("a bug in a probe")), RuntimeError, id="should revert on an exception"),
])
def test_should_revert_the_fault_before_the_command_exits(world: World, interrupt: Callable[[], None],
                                                          raised: type[BaseException]) -> None:
    partition = world.probes[DrillKind.NETWORK_PARTITION]
    partition.interrupt = interrupt
    runner, store = world.runner()
    with pytest.raises(raised), terminated_as_exit():
        runner.run("sha256:deployed", "canary")
    assert not partition.marker.exists(), "the fault outlived the command"
    (campaign,) = store.campaigns()
    assert [(f.drill, f.reverted_by) for f in store.faults(campaign.id)] == [("network_partition", "interrupted")]
    assert not list((world.tmp / "state" / "sw").glob("*.json")), "the switch is still armed"


def test_should_fail_a_drill_whose_undo_does_not_revert(world: World) -> None:
    runner, store = world.runner()
    partition = runner.targets[DrillKind.NETWORK_PARTITION]
    runner.targets[DrillKind.NETWORK_PARTITION] = Target(
        Fault("network_partition", partition.fault.where, partition.fault.inject, (("true",),)), partition.probe)
    campaign = runner.run("sha256:deployed", "canary")
    assert failing(store, campaign.id)[0] == "soak drill:network_partition"
    assert "soak drill:network_partition: failed: not recovered" in (campaign.reason or "")
    world.probes[DrillKind.NETWORK_PARTITION].marker.unlink()


def test_should_run_and_judge_two_drills_of_one_kind_each_under_its_own_name(world: World) -> None:
    again = {"kind": "node_failure", "sop": "node-power-loss", **DRILL, "detect_within_s": 150}
    twice = Acceptance.model_validate({**SPEC.model_dump(), "drills": [*SPEC.model_dump()["drills"], again]})
    names = ["network_partition", "node_failure#1", "storage_jitter", "model_hot_swap", "node_failure#2"]
    assert [name for name, _ in twice.named_drills()] == names
    runner, store = world.runner(spec=twice)
    assert [step for step, _, _ in runner.plan()] == [f"drill:{n}" for n in names] + ["shock", "soak"]
    campaign = runner.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    steps = store.steps(campaign.id)
    # Each ran, with its own deadlines, its fault recorded and reverted under its name, and judged on its own.
    assert [n for n in steps if n.startswith("drill:")] == [f"drill:{n}" for n in names]
    assert (steps["drill:node_failure#1"][2]["detect_within_s"], steps["drill:node_failure#2"][2]["detect_within_s"]
            ) == (SPEC.scaled(200), SPEC.scaled(150))
    assert [(f.drill, f.reverted_by) for f in store.faults(campaign.id) if f.drill.startswith("node_failure")] == [
        ("node_failure#1", "drill"), ("node_failure#2", "drill")]
    judged = {c["name"] for c in steps["verdict"][2]["criteria"] if c["phase"] == "soak"}
    assert {f"drill:{n}" for n in names} <= judged
    # The rollout gate holds each by its name (runbooks.rollout.machine.RolloutMachine.acceptance).
    (record,) = world.rollout_records()
    assert set(record["detail"]["measured"]["drill_hold_s"]) == set(names)
