"""`gpuctl health status`: the controller's last step, read from its audit log as the unit's gpuctl would."""

import json
from pathlib import Path

from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.exit_codes import ExitCode
from runbooks.health.controller import AUDIT
from tests.builders import copy_project


def test_should_show_the_last_step_and_each_node_it_acted_on(tmp_path: Path) -> None:
    project, state = copy_project(tmp_path), tmp_path / "state"
    state.mkdir()
    old = {"at": "2026-12-03T12:00:00+00:00", "mode": "live", "detail": "0 of 1 drainable nodes held", "nodes": []}
    last = {"at": "2026-12-03T12:01:00+00:00", "mode": "live", "detail": "1 of 1 drainable nodes held", "nodes": [
        {"node": "gpu-a800-01", "action": "drain", "reason": "suspect", "detail": "GPU 3: XID 79 [red]x[/]"}]}
    (state / AUDIT).write_text(json.dumps(old) + "\n" + json.dumps(last) + "\n")
    result = CliRunner().invoke(app, ["health", "--project-dir", str(project), "status", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "controller: last step at 2026-12-03T12:01:00+00:00 (live): 1 of 1 drainable nodes held",
        "gpu-a800-01: drain (suspect): GPU 3: XID 79 [red]x[/]"]


def test_should_fail_naming_an_audit_log_that_does_not_read(tmp_path: Path) -> None:
    project, state = copy_project(tmp_path), tmp_path / "state"
    state.mkdir()
    (state / AUDIT).write_text("{not json\n")
    result = CliRunner().invoke(app, ["health", "--project-dir", str(project), "status", "--state-dir", str(state)])
    assert result.exit_code == ExitCode.FAILED and str(state / AUDIT) in " ".join(result.output.split())
