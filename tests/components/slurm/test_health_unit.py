"""The health controller ships in the lending controller's release, with a unit of its own that the same command
installs, enables and starts (tests/components/slurm/test_release.py runs that command and reads which units it
enabled and started)."""

from components.slurm.health_unit import HEALTH_UNIT
from components.slurm.install import installed_files
from components.slurm.release import release_command
from tests.builders import parse, prod_values


def test_should_start_gpuctl_health_control_from_the_current_release_on_the_specs_port() -> None:
    files, then = installed_files(release_command(parse(prod_values()), "prod", "0123456789abcdef"))
    unit = files[f"/etc/systemd/system/{HEALTH_UNIT}"].splitlines()
    assert ("ExecStart=/opt/gpu-cluster/current/.venv/bin/gpuctl health --project-dir /opt/gpu-cluster/current "
            "--stack prod control --port 9343") in unit
    assert "Environment=KUBECONFIG=/etc/gpucluster/health-controller.kubeconfig" in unit
    assert f"systemctl enable gpucluster-flex-controller.service {HEALTH_UNIT}" in then

