"""A manual lend or reclaim and the lending controller never move flex nodes at once, and both are audited
(issue 41: a manual `gpuctl flex reclaim` ran while the controller held its lock, and wrote no audit line)."""

import getpass
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.scheduling.lending_decision import Action
from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.flex.controller import AUDIT, MOVES_LOCK, Controller, Store
from runbooks.flex.lease import Lease, holder_line
from tests.builders import copy_project
from tests.runbooks.flex.test_controller import PEAK, SITE, T0, Curve, PoolDouble

NODE = "gpu-a800-09"


@pytest.fixture
def operator_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for kubectl (logs its arguments) and Slurm (an idle node no one drained) on PATH; the log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, answer in (("kubectl", ""), ("scontrol", f"echo 'NodeName={NODE} State=IDLE'"), ("squeue", "")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho \"{name} $*\" >> {log}\n{answer}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def test_should_refuse_a_manual_reclaim_while_the_controller_moves_and_audit_it_once_it_runs(
        tmp_path: Path, operator_path: Path) -> None:
    project, state = copy_project(tmp_path), tmp_path / "state"
    reclaim = ["flex", "--project-dir", str(project), "reclaim", "--node", NODE, "--wait-minutes", "0.1",
               "--state-dir", str(state)]
    controller = Lease(state / MOVES_LOCK)
    assert controller.try_acquire(holder_line("the lending controller")) is None
    refused = CliRunner().invoke(app, reclaim)
    assert refused.exit_code == ExitCode.HELD, refused.output
    assert f"refused: the lending controller (pid {os.getpid()}, since " in refused.output
    assert not operator_path.exists()  # neither kubectl nor Slurm was touched
    controller.release()
    ran = CliRunner().invoke(app, reclaim)
    assert ran.exit_code == 0, ran.output
    (line,) = (state / AUDIT).read_text().splitlines()
    audited = json.loads(line)
    assert {key: audited[key] for key in ("mode", "action", "nodes", "reason", "by")} == {
        "mode": "manual", "action": "reclaim", "nodes": [NODE], "reason": "operator", "by": getpass.getuser()}
    assert audited["outcomes"] == [{"node": NODE, "done": True, "detail": "back in Slurm (it was not lent)"}]
    assert Lease(state / MOVES_LOCK).try_acquire("the next") is None  # released


def test_should_move_nothing_while_a_manual_move_holds_the_lock_and_audit_why(tmp_path: Path) -> None:
    pool, curve = PoolDouble(), Curve(at=T0, demand=dict(PEAK))
    manual = Lease(tmp_path / MOVES_LOCK)
    assert manual.try_acquire(holder_line("gpuctl flex reclaim by alice")) is None
    c = Controller(SITE, pool, curve, Store(tmp_path), say=lambda line: None)  # type: ignore[arg-type]
    for _ in range(3):
        decision = c.step()
        curve.at += SITE.lending.peak_s
    assert decision.action == Action.LEND and pool.calls == [] and pool.requeue_checks == []
    last = json.loads((tmp_path / AUDIT).read_text().splitlines()[-1])
    assert last["mode"] == "held" and last["held_by"].startswith("gpuctl flex reclaim by alice (pid ")
    assert c.memory.last_move_at is None  # no move: the cooldown does not start
    manual.release()
    c.step()
    assert pool.calls == [("lend", decision.nodes)]
