"""The plan's configuration checks: each consumer accepts the prod files and rejects a broken one."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runbooks.cli import app
from runbooks.plan.consumers import CHECKS, Check, run_checks
from tests.builders import REPO

BROKEN = {
    "prometheus/rules.yaml": "groups:\n- name: x\n  rules:\n  - alert: A\n    expr: 'sum(('\n",
    "alertmanager/alertmanager.yml": "route:\n  receiver: nowhere\nreceivers: []\n",
    "slurm/slurm.conf": "ClusterName=x\nNoSuchKey=1\n",
}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan")
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(REPO), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Generated configuration, judged by its consumers" in result.output
    return out


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.consumer} accepts {c.artifact}")
def test_should_pass_the_prod_files(planned: Path, check: Check) -> None:
    outcome = next(o for o in run_checks(planned) if o.check == check)
    assert outcome.status == ("skipped" if shutil.which(check.argv[0]) is None else "passed"), outcome


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.consumer} rejects a broken {c.artifact}")
def test_should_fail_a_broken_file(tmp_path: Path, check: Check) -> None:
    if shutil.which(check.argv[0]) is None:
        pytest.skip(f"{check.consumer} is not installed (make test installs it)")
    for artifact, text in BROKEN.items():
        (tmp_path / artifact).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / artifact).write_text(text)
    outcome = next(o for o in run_checks(tmp_path) if o.check == check)
    assert outcome.status == "failed" and outcome.detail


def test_should_skip_rather_than_pass_without_the_consumer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert {o.status for o in run_checks(tmp_path)} == {"skipped"}
