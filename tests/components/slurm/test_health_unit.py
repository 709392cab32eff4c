"""The health controller ships in the lending controller's release, with a unit of its own that the same command
installs, enables and starts; what the unit runs works from the installed release."""

import json
import os
import subprocess
import sys
from pathlib import Path

from components.slurm.health_unit import HEALTH_UNIT
from components.slurm.install import installed_files
from components.slurm.release import release, release_command
from runbooks.health.controller import AUDIT
from tests.builders import parse, prod_values
from tests.components.slurm.test_release import controller_site, deploy


def test_should_start_gpuctl_health_control_from_the_current_release_on_the_specs_port() -> None:
    files, then = installed_files(release_command(parse(prod_values()), "prod", "0123456789abcdef"))
    unit = files[f"/etc/systemd/system/{HEALTH_UNIT}"].splitlines()
    assert ("ExecStart=/opt/gpu-cluster/current/.venv/bin/gpuctl health --project-dir /opt/gpu-cluster/current "
            "--stack prod control --port 9343") in unit
    assert "Environment=KUBECONFIG=/etc/gpucluster/health-controller.kubeconfig" in unit
    assert f"systemctl enable gpucluster-flex-controller.service {HEALTH_UNIT}" in then


def test_should_run_the_health_units_gpuctl_from_the_installed_release(tmp_path: Path) -> None:
    done = deploy(tmp_path, controller_site(tmp_path / "opt"))
    assert done.returncode == 0, done.stderr
    current = tmp_path / "opt" / "current"
    assert current.resolve().name == release("prod").digest
    unit = (tmp_path / "units" / HEALTH_UNIT).read_text()
    gpuctl, *args = next(line for line in unit.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1].split()
    assert Path(gpuctl).parent.parent.parent == current and args[:5] == [
        "health", "--project-dir", str(current), "--stack", "prod"]
    state = tmp_path / "state"
    state.mkdir()
    (state / AUDIT).write_text(json.dumps({"at": "2026-12-03T12:00:00+00:00", "mode": "live", "detail": "0 of 1 "
                                           "drainable nodes held", "nodes": []}) + "\n")
    shown = subprocess.run([gpuctl, *args[:5], "status", "--state-dir", str(state)], capture_output=True, text=True,
                           timeout=60, check=False, cwd="/", env={**os.environ, "TEST_PYTHON": sys.executable})
    assert shown.returncode == 0, shown.stderr
    assert "last step at 2026-12-03T12:00:00+00:00 (live): 0 of 1 drainable nodes held" in shown.stdout
