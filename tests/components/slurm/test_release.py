"""The lending controller's release: the archive is the project as it is, the same tree gives the same digest, and the
command really installs it, switches `current` and starts the unit on it.

The command runs under bash with real base64, tar, ln and find. `python3 -m venv` and pip are replaced by a shim (no
index here to install the project's ~60 pinned dependencies from): its venv's gpuctl runs the unpacked release with
this venv's interpreter and refuses to run if Python found the package anywhere but in the release.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.site.site import Site
from components.slurm.health_unit import HEALTH_UNIT
from components.slurm.install import SYSTEMD_UNIT_DIR, installed_files
from components.slurm.release import INSTALLED_MARKER, PACKAGES, PROJECT_DIR, release, release_command
from components.slurm.scripts import LENDING_UNIT
from runbooks.flex.controller import PAUSED
from tests.builders import parse, problems, prod_values

SHIM_PYTHON3 = """#!/bin/bash
# python3 -m venv DIR: a venv whose pip records its arguments and whose gpuctl runs the release DIR/.. holds.
[ "$1 $2" = "-m venv" ] || exit 64
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "$@" >> %s/pip.log\\n' "$LOG_DIR" > "$3/bin/pip"
cat > "$3/bin/gpuctl" <<EOF
#!/bin/sh
release=\\$(cd "\\$(dirname "\\$0")/../.." && pwd -P)
PYTHONPATH="\\$release" exec $TEST_PYTHON -c 'import sys, runbooks
assert runbooks.__file__.startswith(sys.argv[1] + "/"), runbooks.__file__
from runbooks.gpuctl import main
sys.argv = ["gpuctl", *sys.argv[2:]]
main()' "\\$release" "\\$@"
EOF
chmod 755 "$3/bin/pip" "$3/bin/gpuctl"
"""


needs_mount_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(SYSTEMD_UNIT_DIR).is_dir(),
    reason=f"deploy() runs the command in a private mount namespace over {SYSTEMD_UNIT_DIR}: needs root and it")


def controller_site(project_dir: Path) -> Site:
    values = prod_values()
    values["lending"] = {**values.get("lending", {}), "project_dir": str(project_dir),
                         "package_index": "https://pypi.mirror.example/simple"}
    return parse(values)


def deploy(tmp_path: Path, site: Site, stack: str = "prod") -> subprocess.CompletedProcess[str]:
    """Runs the release command as the controller would, with the unit directory and systemctl redirected (the
    command's own bytes: the directory by a bind mount, systemctl by PATH)."""
    shipped = release(stack)
    bin_dir, log_dir, unit_dir = tmp_path / "bin", tmp_path / "log", tmp_path / "units"
    for directory in (bin_dir, log_dir, unit_dir):
        directory.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(SHIM_PYTHON3)
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {log_dir}/systemctl.log\n')
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG_DIR": str(log_dir),
           "TEST_PYTHON": sys.executable}
    # The command as shipped writes its units to SYSTEMD_UNIT_DIR: in a private mount namespace unit_dir is there.
    return subprocess.run(["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" "$1" && exec bash -c "$2"',
                           str(unit_dir), SYSTEMD_UNIT_DIR, release_command(site, stack, shipped.digest)],
                          input=shipped.archive, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_unit_starts_the_current_release_for_the_stack() -> None:
    files, _ = installed_files(release_command(parse(prod_values()), "prod", "0123456789abcdef"))
    assert ("ExecStart=/opt/gpu-cluster/current/.venv/bin/gpuctl flex --project-dir /opt/gpu-cluster/current "
            "--stack prod control --port 9342") in files[f"/etc/systemd/system/{LENDING_UNIT}"].splitlines()


@needs_mount_namespace
def test_the_archive_holds_every_module_of_the_packages_and_the_stack_file(tmp_path: Path) -> None:
    shipped = release("prod")
    site = controller_site(tmp_path / "opt")
    assert deploy(tmp_path, site).returncode == 0
    unpacked = tmp_path / "opt" / "releases" / shipped.digest
    expected = {str(p.relative_to(PROJECT_DIR)) for package in PACKAGES for p in (PROJECT_DIR / package).rglob("*.py")}
    assert {str(p.relative_to(unpacked)) for package in PACKAGES for p in (unpacked / package).rglob("*.py")} \
        == expected
    for name in ("pyproject.toml", "Pulumi.yaml", "Pulumi.prod.yaml"):
        assert (unpacked / name).read_bytes() == (PROJECT_DIR / name).read_bytes()


def test_the_same_tree_gives_the_same_digest_and_a_changed_file_another(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("pyproject.toml", "Pulumi.yaml", "Pulumi.prod.yaml"):
        shutil.copy(PROJECT_DIR / name, copy / name)
    for package in PACKAGES:
        shutil.copytree(PROJECT_DIR / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    first = release("prod", copy)
    assert release("prod", copy) == first
    assert first.digest == release("prod").digest
    (copy / "Pulumi.prod.yaml").write_text((copy / "Pulumi.prod.yaml").read_text() + "\n# a change\n")
    assert release("prod", copy).digest != first.digest


@needs_mount_namespace
def test_the_unit_runs_gpuctl_from_the_installed_release_reading_the_stack_there(tmp_path: Path) -> None:
    site = controller_site(tmp_path / "opt")
    done = deploy(tmp_path, site)
    assert done.returncode == 0, done.stderr
    shipped = release("prod")
    current = tmp_path / "opt" / "current"
    assert current.resolve() == (tmp_path / "opt" / "releases" / shipped.digest).resolve()
    assert (current / INSTALLED_MARKER).exists()
    pip = (tmp_path / "log" / "pip.log").read_text().split()
    assert pip[:4] == ["install", "--quiet", "--index-url", "https://pypi.mirror.example/simple"]
    assert Path(pip[4]).resolve() == current.resolve()
    assert (tmp_path / "log" / "systemctl.log").read_text().splitlines() == [
        "daemon-reload", f"enable {LENDING_UNIT} {HEALTH_UNIT}", f"restart {LENDING_UNIT} {HEALTH_UNIT}"]
    unit = (tmp_path / "units" / LENDING_UNIT).read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    gpuctl, *args = exec_start.removeprefix("ExecStart=").split()
    assert Path(gpuctl).parent.parent.parent == current
    assert args[:5] == ["flex", "--project-dir", str(current), "--stack", "prod"]
    # What the unit starts, run as an operator would on the controller: the site parsed from the shipped stack file.
    paused = subprocess.run([gpuctl, *args[:5], "pause", "--reason", "release test", "--state-dir",
                             str(tmp_path / "state")], capture_output=True, text=True, timeout=60, check=False,
                            cwd="/", env={**os.environ, "TEST_PYTHON": sys.executable})  # systemd's default
    assert paused.returncode == 0, paused.stderr
    assert "release test" in (tmp_path / "state" / PAUSED).read_text()


@needs_mount_namespace
def test_a_second_deploy_of_the_same_release_reinstalls_nothing_and_a_new_one_removes_the_old(tmp_path: Path) -> None:
    site = controller_site(tmp_path / "opt")
    assert deploy(tmp_path, site).returncode == 0
    assert deploy(tmp_path, site).returncode == 0
    assert len((tmp_path / "log" / "pip.log").read_text().splitlines()) == 1
    old = tmp_path / "opt" / "releases" / "0123456789abcdef"
    old.mkdir()
    assert deploy(tmp_path, site).returncode == 0
    assert not old.exists()
    assert [p.name for p in (tmp_path / "opt" / "releases").iterdir()] == [release("prod").digest]


@needs_mount_namespace
def test_an_install_that_fails_leaves_the_running_release_in_place(tmp_path: Path) -> None:
    site = controller_site(tmp_path / "opt")
    running = tmp_path / "opt" / "releases" / "0123456789abcdef"
    running.mkdir(parents=True)
    (tmp_path / "opt" / "current").symlink_to("releases/0123456789abcdef")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tar").write_text("#!/bin/sh\nexit 2\n")  # a truncated archive
    (tmp_path / "bin" / "tar").chmod(0o755)
    assert deploy(tmp_path, site).returncode != 0
    assert (tmp_path / "opt" / "current").resolve() == running.resolve()
    assert running.exists()
    assert not (tmp_path / "log" / "systemctl.log").exists()


@pytest.mark.parametrize("index", ["pypi.org/simple", "ftp://mirror/simple", "https://mirror/ simple"])
def test_a_package_index_that_is_no_url_is_refused_naming_the_field(index: str) -> None:
    values = prod_values()
    values["lending"] = {**values.get("lending", {}), "package_index": index}
    assert any("lending.package_index" in p for p in problems(values))
