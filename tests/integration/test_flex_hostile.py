"""`gpuctl flex lend` against what any Slurm user can submit, on the real Slurm test cluster (issue 41): a job name
that is not UTF-8 and a job array element. Slurm is reached as an operator's shell reaches it (SLURM_CONF); kubectl
is a stand-in on PATH that logs its arguments."""

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from components.site.wellknown import FLEX_LENT_LABEL as LENT_LABEL
from runbooks.cli import app
from tests.builders import copy_project
from tests.harness.slurm_cluster import Cluster, slurm_marks
from tests.integration.test_flex import FLEX, GPU8

pytestmark = slurm_marks()

HOSTILE_NAME = "\udcff\udcfe\x1b[2J\x07" + "\udcc3" * 200
"""A job name of bytes that are no UTF-8 (0xff, 0xfe, a lone lead byte 0xc3 repeated), a terminal escape and a bell:
the surrogates are how Python passes raw bytes in a command line (os.fsencode)."""


def lend(flex_slurm: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str) -> tuple[Result, str]:
    """`gpuctl flex lend --node <node>` as an operator runs it; its result and what kubectl was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "kubectl.log"
    (bin_dir / "kubectl").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    (bin_dir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    project = copy_project(tmp_path)
    result = CliRunner().invoke(app, ["flex", "--project-dir", str(project), "lend", "--node", node,
                                      "--wait-minutes", "0.25", "--state-dir", str(tmp_path / "state")])
    return result, log.read_text() if log.exists() else ""


def test_should_lend_past_a_pending_job_whose_name_is_not_utf8(
        flex_slurm: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preemptible = flex_slurm.sbatch("-A", "speech", "--qos=train_preemptible", "-w", FLEX[0], *GPU8)
    flex_slurm.wait_state(preemptible, "RUNNING")
    # Held, so it stays pending: any user's job is in `squeue --json`, which the lend reads.
    hostile = flex_slurm.sbatch("-A", "speech", "--hold", "-J", HOSTILE_NAME, "--wrap=true")
    raw = subprocess.run(["squeue", "--json"], env=flex_slurm.env, capture_output=True, timeout=15, check=True).stdout
    assert b"\xff\xfe" in raw  # as the job's owner wrote it
    result, kubectl = lend(flex_slurm, tmp_path, monkeypatch, FLEX[0])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    assert f"{FLEX[0]}: lent" in result.output
    assert int(flex_slurm.wait_state(preemptible, "PENDING")["Restarts"]) == 1
    assert f"label node {FLEX[0]} {LENT_LABEL}=true --overwrite" in kubectl
    assert flex_slurm.job(hostile)["JobState"] == "PENDING"


def test_should_requeue_a_job_array_element_and_lend_its_node(
        flex_slurm: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    array = flex_slurm.sbatch("-A", "speech", "--qos=train_preemptible", "--array=0", "-w", FLEX[0], *GPU8)
    element = f"{array}_0"
    flex_slurm.wait_state(element, "RUNNING")
    result, kubectl = lend(flex_slurm, tmp_path, monkeypatch, FLEX[0])
    assert result.exit_code == 0, result.output
    assert f"{FLEX[0]}: lent" in result.output
    assert int(flex_slurm.wait_state(element, "PENDING")["Restarts"]) == 1
    assert f"label node {FLEX[0]} {LENT_LABEL}=true --overwrite" in kubectl
