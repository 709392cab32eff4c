"""The campaign's rules at a time scale of 0.0002 (a 500 s hold is 0.1 s): real commands inject and undo each fault
(a marker file stands for the fault in place), the drills' probes read that file, Alertmanager is a list the test
fills. Each drill fails when its expected reaction is taken away; an alert with no SOP fails the campaign; a run
killed mid-drill leaves a fault that the next run reverts and logs."""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.spec.acceptance import Acceptance, DrillKind
from runbooks.acceptance.alerts import AlertmanagerError, FiringAlert
from runbooks.acceptance.campaign import CampaignRefusedError, Reaction, Runbook, Target
from runbooks.acceptance.faults import Fault, Switches
from runbooks.acceptance.store import FAILED, PASSED, CampaignStore
from runbooks.rollout.audit import AuditLog
from runbooks.rollout.lock import StackLock
from runbooks.rollout.machine import ACCEPTANCE_RECORD

REPO = Path(__file__).resolve().parents[3]
KEY = b"k" * 32
DRILL = {"hold_s": 500, "detect_within_s": 400, "recover_within_s": 400, "revert_after_s": 20000}
SPEC = Acceptance(time_scale=0.0002, soak_h=1, shock_minutes=1, peak_source="declared", drills=[
    {"kind": "network_partition", "sop": "network-partition", **DRILL},
    {"kind": "node_failure", "sop": "node-power-loss", **DRILL},
    {"kind": "storage_jitter", "sop": "storage-jitter", "delay_ms": 100, **DRILL},
    {"kind": "model_hot_swap", "sop": "model-hot-swap", **DRILL}])


class Killed(BaseException):
    """The campaign's process dies here (BaseException: nothing in the runbook catches it)."""


@dataclass
class MarkerProbe:
    """Detects the fault by its marker file; its reactions are what the test says happened."""

    marker: Path
    reacted: bool = True
    detects: bool = True
    die_on_detection: bool = False
    calls: list[str] = field(default_factory=list)

    def detected(self) -> bool:
        present = self.marker.exists()
        if present and self.die_on_detection:
            raise Killed
        return present and self.detects

    def recovered(self) -> bool:
        return not self.marker.exists()

    def reactions(self) -> list[Reaction]:
        return [Reaction("training requeued, none lost", self.reacted, "as the test says")]


@dataclass
class World:
    tmp: Path
    alerts: list[FiringAlert] = field(default_factory=list)
    probes: dict[DrillKind, MarkerProbe] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind in DrillKind:
            self.probes[kind] = MarkerProbe(self.tmp / f"{kind.value}.fault")

    def runbook(self, sop_dir: Path = REPO / "docs" / "sop", firing: Callable[[], list[FiringAlert]] | None = None
                ) -> tuple[Runbook, CampaignStore]:
        store = CampaignStore(self.tmp / "state" / "acceptance.sqlite")
        targets = {kind: Target(Fault(kind.value, f"marker {probe.marker.name}", (("touch", str(probe.marker)),),
                                      (("rm", "-f", str(probe.marker)),)), probe)
                   for kind, probe in self.probes.items()}
        runbook = Runbook(SPEC, store, AuditLog(self.tmp / "state" / "failures.jsonl", KEY),
                          AuditLog(self.tmp / "rollout" / "audit.jsonl", KEY), Switches(self.tmp / "state" / "sw"),
                          sop_dir, firing or (lambda: list(self.alerts)), targets, [],
                          StackLock(self.tmp / "state" / "lock", "gpuctl acceptance"), poll_s=0.02)
        return runbook, store

    def rollout_records(self) -> list[dict[str, Any]]:
        path = self.tmp / "rollout" / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_should_pass_when_every_drill_reacts_and_record_it_for_the_rollout(world: World) -> None:
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    assert [f.mode for f in store.failures(campaign.id)] == [d.kind.value for d in SPEC.drills]
    assert not any(p.marker.exists() for p in world.probes.values()), "a fault is still in place"
    assert [(r["what"], r["decision"], r["plan_digest"]) for r in world.rollout_records()] == [
        (ACCEPTANCE_RECORD, PASSED, "sha256:deployed")]
    assert runbook.log.verify().records >= 2 + 2 * len(DrillKind)


@pytest.mark.parametrize("kind", list(DrillKind), ids=lambda k: f"should fail {k.value} when its fault goes unseen")
def test_should_fail_a_drill_whose_fault_is_never_detected(world: World, kind: DrillKind) -> None:
    world.probes[kind].detects = False
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and campaign.reason == f"drill:{kind.value} failed"
    assert store.steps(campaign.id)[f"drill:{kind.value}"][2]["detection_s"] is None
    assert world.rollout_records() == []


@pytest.mark.parametrize("kind", list(DrillKind), ids=lambda k: f"should fail {k.value} when its reaction is missing")
def test_should_fail_a_drill_whose_expected_reaction_is_missing(world: World, kind: DrillKind) -> None:
    world.probes[kind].reacted = False  # e.g. the node's training was not requeued
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and campaign.reason == f"drill:{kind.value} failed"
    assert store.steps(campaign.id)[f"drill:{kind.value}"][2]["reactions"][0]["ok"] is False


def test_should_fail_the_campaign_when_an_alert_fires_with_no_sop(world: World) -> None:
    world.alerts.append(FiringAlert("NothingDocumentsThis", "f1", "2026-12-01T10:00:00Z", {"severity": "warning"}))
    world.alerts.append(FiringAlert("SlurmNodesUnavailable", "f2", "2026-12-01T10:00:00Z", {"severity": "warning"}))
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED
    assert campaign.reason == "NothingDocumentsThis fired with no SOP in docs/sop/"
    fired = {f.mode: f.sop for f in store.failures(campaign.id) if f.source == "fired"}
    assert fired == {"NothingDocumentsThis": None, "SlurmNodesUnavailable": "slurm-nodes-unavailable"}


def test_should_refuse_to_plan_a_drill_whose_sop_is_missing(world: World, tmp_path: Path) -> None:
    sops = tmp_path / "sop"
    sops.mkdir()
    (sops / "network-partition.md").write_text("# Network partition\n")
    runbook, _ = world.runbook(sop_dir=sops)
    with pytest.raises(CampaignRefusedError, match=r"drills\[1\].sop: docs/sop/node-power-loss.md does not exist"):
        runbook.run("sha256:deployed", "canary")


def test_should_revert_and_log_the_fault_a_run_killed_mid_drill_left(world: World) -> None:
    partition = world.probes[DrillKind.NETWORK_PARTITION]
    partition.die_on_detection = True
    runbook, store = world.runbook()
    with pytest.raises(Killed):
        runbook.run("sha256:deployed", "canary")
    assert partition.marker.exists(), "the kill leaves the partition in place"
    store.close()

    partition.die_on_detection = False
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == PASSED, campaign.reason
    left = [f for f in store.failures(campaign.id) if f.detail.get("left_by")]
    assert [(f.mode, f.sop) for f in left] == [("network_partition", "network-partition")]
    reverted = [f for f in store.faults(campaign.id) if f.drill == "network_partition"]
    assert [f.reverted_by for f in reverted] == ["resume", "drill"]
    assert not partition.marker.exists()


def test_should_fail_a_campaign_that_could_not_read_alertmanager(world: World) -> None:
    def unreadable() -> list[FiringAlert]:
        raise AlertmanagerError("cannot read http://127.0.0.1:9/api/v2/alerts: connection refused")

    runbook, _ = world.runbook(firing=unreadable)
    campaign = runbook.run("sha256:deployed", "canary")
    assert campaign.verdict == FAILED and "Alertmanager could not be read" in (campaign.reason or "")


def test_should_end_a_campaign_the_deployment_changed_under_leaving_no_fault(world: World) -> None:
    partition = world.probes[DrillKind.NETWORK_PARTITION]
    partition.die_on_detection = True
    runbook, store = world.runbook()
    with pytest.raises(Killed):
        runbook.run("sha256:old", "canary")
    store.close()
    partition.die_on_detection = False
    runbook, store = world.runbook()
    campaign = runbook.run("sha256:new", "canary")
    old = next(c for c in store.campaigns() if c.deployment == "sha256:old")
    assert (old.verdict, old.reason) == (FAILED, "superseded: the deployment is now sha256:new")
    assert all(f.reverted_at is not None for f in store.faults(old.id)) and not partition.marker.exists()
    assert campaign.verdict == PASSED
