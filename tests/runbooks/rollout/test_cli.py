"""`gpuctl rollout` through Typer: request, status while approvals come in, break-glass rollback without Slack."""

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runbooks.rollout.cli import app
from runbooks.stack import audit
from tests.runbooks.rollout.conftest import APPROVERS, Harness, run


def test_should_request_a_stage_and_show_it_awaiting_approvals(gpuctl: Harness) -> None:
    code, text = run(gpuctl, "request", "half")
    assert code == 0, text
    assert "half-1: awaiting approval" in text
    gpuctl.build()
    gpuctl.click(APPROVERS[0])
    code, text = run(gpuctl, "status")
    assert code == 0, text
    assert "stage canary deployed, live since 2026-03-02 09:00 UTC (15.0 of 14 soak days)" in text
    assert "next stage: half (onboards vision, multimodal, rl, code-llm; 6 of 12 teams)" in text
    assert "rollout half-1 canary -> half: awaiting_approval" in text
    assert f"approvals 1 of 2: {APPROVERS[0]}" in text
    assert "acceptance: campaign campaign-at-1 passed for the deployed stack sha256:" in text
    # The passed campaign, the request started, posted, and one approval.
    assert "audit: 4 records, keyed chain intact; matches the head kept in the rollout state and the " \
           "Slack thread of half-1" in text


def test_should_refuse_a_stage_out_of_order_with_exit_2(gpuctl: Harness) -> None:
    code, text = run(gpuctl, "request", "full")
    assert code == 2
    assert "the next stage is half, not full" in text


def test_should_hold_a_request_before_the_soak_is_over_with_exit_3(gpuctl: Harness) -> None:
    gpuctl.clock.now = gpuctl.clock.now.replace(day=10)
    code, text = run(gpuctl, "request", "half")
    assert code == 3
    assert "canary has soaked 8.0 of 14 days" in text


def test_should_break_glass_without_slack(gpuctl: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    code, text = run(gpuctl, "rollback", "--to", "canary", "--operator", "alice", "--reason", "drill")
    assert code == 0, text
    assert "rollback-1: rolled_back to canary" in text
    assert Path(gpuctl.state_dir / "audit.jsonl").exists()


def test_should_refuse_clearly_without_the_pulumi_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `pulumi` anywhere
    result = CliRunner().invoke(app, ["--project-dir", str(Path(__file__).resolve().parents[3]),
                                      "--state-dir", str(tmp_path / "state"), "status"])
    assert result.exit_code == 2
    assert "the Pulumi CLI (`pulumi`) is not on PATH" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["rollback", "--to", "canary", "--operator", "", "--reason", "drill"],
                 "must be one non-empty line", id="an empty operator"),
    pytest.param(["rollback", "--to", "canary", "--operator", "alice", "--reason", "  "],
                 "must be one non-empty line", id="a blank reason"),
    pytest.param(["rollback", "--to", "canary", "--operator", "alice\nbob", "--reason", "drill"],
                 "must be one non-empty line", id="an operator over two lines"),
    pytest.param(["wait", "--listen", "garbage"], "'garbage' is not host:port", id="a listen address with no port"),
    pytest.param(["wait", "--listen", "127.0.0.1:99999"], "is not host:port with a port from 1 to 65535",
                 id="a port out of range"),
])
def test_should_refuse_bad_arguments_with_exit_2_and_no_traceback(gpuctl: Harness, args: list[str],
                                                                   message: str) -> None:
    code, text = run(gpuctl, *args)
    assert code == 2, text
    assert message in re.sub(r"[│\s]+", " ", text) and "Traceback" not in text  # Rich wraps it in a box
    assert not (gpuctl.state_dir / "audit.jsonl").exists() or "rollback" not in (
        gpuctl.state_dir / "audit.jsonl").read_text()


def test_should_keep_the_audit_key_apart_from_the_state_it_protects(gpuctl: Harness, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 41: by default the key was made in <state-dir>/audit.key, beside the log it protects.
    # The key the harness's acceptance campaign was audited with, where the operator keeps it now.
    default = tmp_path / "etc" / "gpucluster" / "audit.key"  # stands for /etc/gpucluster/audit.key
    default.parent.mkdir(mode=0o700, parents=True)
    default.write_text(os.environ["GPUCTL_AUDIT_KEY"] + "\n")
    default.chmod(0o600)
    monkeypatch.delenv("GPUCTL_AUDIT_KEY")
    monkeypatch.delenv(audit.KEY_FILE_ENV)  # the suite's own key file (tests/conftest.py): the default is tested
    monkeypatch.setattr(audit, "DEFAULT_KEY_FILE", default, raising=False)
    state = tmp_path / "state"
    code, text = run(gpuctl, "status", state_dir=state)
    assert code == 0, text  # the campaign's records verified: the key came from the default file
    assert not (state / "audit.key").exists()

    (state / "audit.key").write_text(default.read_text())  # as an earlier version left it
    code, text = run(gpuctl, "status", state_dir=state)
    assert code == 2 and "the audit key sits beside the state it protects" in text, text
    (state / "audit.key").rename(tmp_path / "key")
    default.unlink()
    default.symlink_to(tmp_path / "key")  # a link to a key file of the right mode
    code, text = run(gpuctl, "status", state_dir=state)
    assert code == 2 and f"{default} is a symlink" in text, text
