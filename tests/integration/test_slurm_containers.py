"""Slurm's container path as the stack deploys it, proven by the real consumers: the step `gpuctl plan --out` wrote
(slurm/install-containers.sh, the same bytes every Slurm host's deploy command runs) installs enroot and Pyxis from an
artifact mirror with their checksums, as root in a copy-on-write overlay of this machine's root (private mount, PID
and network namespaces), with Debian 12's real dpkg, apt and sbatch; then a loopback Slurm cluster in that root runs
jobs with --container-image through the plan's plugstack.conf, Pyxis line and enroot configuration.

The packages are the ones `make artifacts` built (build/artifacts, from ../shared/sources); the test stack differs
from prod only in slurm.containers (the mirror is a folder, file://, holding them)."""

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.slurm.containers import (
    ENROOT_PACKAGE,
    PLUGSTACK,
    PYXIS_CONF,
    PYXIS_PACKAGE,
    PYXIS_PLUGIN,
    containers_step,
    node_container_files,
)
from components.slurm.install import installed_files
from runbooks.cli import app
from tests.builders import REPO, copy_project, parse, prod_values, with_changes
from tests.harness.artifacts import ARTIFACTS, ENROOT_DEB, PYXIS_DEB, containers, missing, sha256
from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import slurm_marks


def _missing() -> str | None:
    absent = [tool for tool in ("mksquashfs", "busybox", "unshare", "dpkg-deb") if shutil.which(tool) is None]
    return missing() or (f"needs {', '.join(absent)}: make test installs them" if absent else None)


SKIP = _missing()
pytestmark = [*slurm_marks(), *([pytest.mark.skip(reason=SKIP)] if SKIP else [])]

DRIVER = r"""set -u
root=$1; given=$2
mount -t tmpfs tmpfs $root
mkdir $root/upper $root/work $root/merged
mount -t overlay overlay -o lowerdir=/,upperdir=$root/upper,workdir=$root/work $root/merged
m=$root/merged
mount --rbind /dev $m/dev && mount --rbind /sys $m/sys && mount -t proc proc $m/proc && mount -t tmpfs tmpfs $m/run
# What the test reads back is written through to the test's own folder, not into the overlay.
mount --bind $given $m$given
# The overlay becomes the namespace's root (pivot_root, not chroot: the kernel refuses enroot's user namespaces to a
# chrooted process).
cd $m && mkdir -p .oldroot && pivot_root . .oldroot && cd / && umount -l /.oldroot
ip link set lo up
# A host has an address off loopback; glibc's AI_ADDRCONFIG, which Slurm asks for, resolves nothing without one.
ip addr add 10.255.0.1/32 dev lo
# What the deploy's install script writes before the step runs: the plan's files for a node, at their paths.
cp -r $given/node/. /
chmod 0755 /usr/local/bin/nvidia-container-cli && systemd-tmpfiles --create /etc/tmpfiles.d/enroot.conf
for case in $(ls $given/cases | sort); do
    c=$given/cases/$case
    sh $c/before
    start=$(date +%s.%N)
    sh $c/script > $c/stdout 2> $c/stderr
    echo $? > $c/rc
    echo "$start $(date +%s.%N)" > $c/seconds
    { dpkg-query -W -f='${Package} ${Version}\n' enroot nvslurm-plugin-pyxis 2>/dev/null
      ls /etc/slurm/plugstack.conf.d; test -z "$(dpkg --verify nvslurm-plugin-pyxis 2>&1)" && echo unmodified; } \
      > $c/after 2>&1
    cat /etc/slurm/plugstack.conf.d/pyxis.conf > $c/pyxis.conf 2>/dev/null
done
cd $3 && .venv/bin/python -m tests.harness.container_jobs $given/tiny.sqsh /var/tmp/ctr-cluster \
    > $given/jobs.json 2> $given/jobs.stderr
"""


def broken_pyxis(tmp_path: Path) -> Path:
    """Pyxis's package, its version and name, whose plugin is not a shared object: a build that does not load."""
    stage = tmp_path / "broken-stage"
    subprocess.run(["dpkg-deb", "-R", str(ARTIFACTS / PYXIS_DEB), str(stage)], check=True)
    (stage / PYXIS_PLUGIN.lstrip("/")).write_bytes(b"\x7fELF not a plugin")
    plugin = PYXIS_PLUGIN.lstrip("/")
    (stage / "DEBIAN" / "md5sums").write_text(
        f"{hashlib.md5((stage / plugin).read_bytes()).hexdigest()}  {plugin}\n")  # noqa: S324 (dpkg's own format)
    out = tmp_path / "mirror-broken"
    out.mkdir()
    shutil.copy(ARTIFACTS / ENROOT_DEB, out / ENROOT_DEB)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(stage), str(out / PYXIS_DEB)], check=True,
                   capture_output=True)
    return out / PYXIS_DEB


def tiny_image(tmp_path: Path) -> Path:
    """A squashfs image of busybox and a file only it holds (/etc/inside), as a site's image would be one."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "etc").mkdir()
    shutil.copy(shutil.which("busybox") or "", rootfs / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "ls", "test"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    (rootfs / "etc" / "inside").write_text("inside the tiny image\n")
    image = tmp_path / "tiny.sqsh"
    subprocess.run(["mksquashfs", str(rootfs), str(image), "-quiet", "-noappend", "-all-root"], check=True)
    return image


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("containers")
    mirror = tmp / "mirror"
    mirror.mkdir()
    for deb in (ENROOT_DEB, PYXIS_DEB):
        shutil.copy(ARTIFACTS / deb, mirror / deb)

    def test_stack(config: dict[str, Any]) -> None:
        config["gpu-cluster:slurm"]["containers"] = containers(mirror, ARTIFACTS / PYXIS_DEB)

    (tmp / "project").mkdir()
    project, out = copy_project(tmp / "project", test_stack), tmp / "plan"
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(out)])
    assert result.exit_code == 0, result.output
    step = (out / "slurm" / "install-containers.sh").read_text()

    broken = broken_pyxis(tmp)
    broken_site = parse(with_changes(prod_values(), slurm__containers=containers(broken.parent, broken)))
    given = tmp / "given"
    for path in node_container_files():  # what the install script writes before the step: never the Pyxis line
        (given / f"node{path}").parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "slurm" / f"node{path}", given / f"node{path}")
    pyxis_on_mirror = mirror / PYXIS_DEB
    cases = {
        # The mirror's Pyxis package changed after the site took its checksum.
        "1-tampered": (f"printf x >> {pyxis_on_mirror}", step),
        # A package of the spec's checksum whose plugin does not load (in the overlay, the mirror is whole again).
        "2-does-not-load": (f"cp {ARTIFACTS / PYXIS_DEB} {pyxis_on_mirror}", containers_step(broken_site) + "\n"),
        "3-deploy": ("true", step),
        "4-plugin-removed": (f"rm {PYXIS_PLUGIN}", step),
    }
    for name, (before, script) in cases.items():
        (given / "cases" / name).mkdir(parents=True)
        (given / "cases" / name / "before").write_text(before + "\n")
        (given / "cases" / name / "script").write_text(script)
    tiny_image(given)
    root = tmp / "root"
    root.mkdir()
    started = time.monotonic()
    # The driver is PID 1 of its own PID namespace: when it ends, however it ends, the kernel ends every daemon.
    subprocess.run(["unshare", "--mount", "--uts", "--net", "--pid", "--fork", "--", "sh", "-c", DRIVER, "driver",
                    str(root), str(given), str(REPO)], check=True, timeout=300)
    outcome = {name: {part: (given / "cases" / name / part).read_text()
                      for part in ("rc", "stdout", "stderr", "after", "pyxis.conf", "seconds")} for name in cases}
    spans = [float(end) - float(begin) for begin, end in (o["seconds"].split() for o in outcome.values())]
    FIGURES.append(f"Slurm containers: deploy cases {', '.join(f'{s:.1f}' for s in spans)} s; with the loopback "
                   f"cluster's container jobs {time.monotonic() - started:.1f} s in all")
    jobs = (given / "jobs.json").read_text()
    return {"out": out, "step": step, "cases": outcome, "mirror": mirror, "broken": broken,
            "jobs": json.loads(jobs) if jobs else {"stderr": (given / "jobs.stderr").read_text()[-3000:]}}


@pytest.mark.expected_s(70)
def test_should_run_in_each_deploy_the_step_the_plan_wrote(deployed: dict[str, Any]) -> None:
    out: Path = deployed["out"]
    commands = [json.loads(path.read_text())["inputs"]["create"]
                for path in (out / "resources").glob("command-remote-Command--*-config.json")]
    assert len(commands) == 1 + 10, "the controller and the ten Slurm nodes"
    assert all(deployed["step"].rstrip("\n") in create for create in commands)
    for create in commands:
        # The Pyxis line is written once, by the step, after it installed the plugin.
        assert create.count(f"> {PYXIS_CONF}.new") == 1
        assert create.index(f"> {PYXIS_CONF}.new") > create.index(f"install_artifact pyxis {PYXIS_PACKAGE} ")
        files, _ = installed_files(create)
        assert files[PLUGSTACK] == (out / "slurm" / f"node{PLUGSTACK}").read_text()
    node = json.loads(next((out / "resources").glob("*gpu-a800-01-config.json")).read_text())["inputs"]["create"]
    files, _ = installed_files(node)
    for path in node_container_files():
        assert files[path] == (out / "slurm" / f"node{path}").read_text(), path


def test_should_refuse_a_package_whose_checksum_is_not_the_specs(deployed: dict[str, Any]) -> None:
    tampered = deployed["cases"]["1-tampered"]
    assert tampered["rc"].strip() == "1", tampered
    url = f"file://{deployed['mirror']}/{PYXIS_DEB}"
    assert f"slurm.containers.pyxis.sha256: {url} has sha256 " in tampered["stderr"], tampered["stderr"]
    assert f", not {sha256(ARTIFACTS / PYXIS_DEB)}: refused" in tampered["stderr"]
    assert PYXIS_PACKAGE not in tampered["after"] and "pyxis.conf" not in tampered["after"], tampered["after"]
    assert f"{ENROOT_PACKAGE} 4.1.2-1" in tampered["after"]  # enroot's checksum was right


def test_should_remove_the_plugin_line_again_when_sbatch_cannot_load_the_plugin(deployed: dict[str, Any]) -> None:
    broken = deployed["cases"]["2-does-not-load"]
    assert broken["rc"].strip() == "1", broken
    assert f"Pyxis does not load ({PYXIS_PLUGIN}), so {PYXIS_CONF} is removed again" in broken["stderr"]
    assert "Failed to load plugin" in broken["stderr"], broken["stderr"]  # what the real sbatch said
    assert "pyxis.conf" not in broken["after"], broken["after"]


def test_should_install_both_packages_and_then_the_plans_pyxis_line(deployed: dict[str, Any]) -> None:
    deploy = deployed["cases"]["3-deploy"]
    assert deploy["rc"].strip() == "0", deploy["stderr"][-3000:]
    # The package of case 2 came from another build of the same version: the spec's artifact replaced it.
    assert deploy["after"].splitlines() == [f"{ENROOT_PACKAGE} 4.1.2-1", f"{PYXIS_PACKAGE} 0.24.0-1", "pyxis.conf",
                                            "unmodified"], deploy["after"]
    assert deploy["pyxis.conf"] == (deployed["out"] / "slurm" / f"node{PYXIS_CONF}").read_text()
    begin, end = map(float, deploy["seconds"].split())
    FIGURES.append(f"Slurm containers: enroot and Pyxis installed from the mirror and loaded by sbatch in "
                   f"{end - begin:.1f} s")


def test_should_put_a_removed_plugin_back_on_the_next_deploy(deployed: dict[str, Any]) -> None:
    healed = deployed["cases"]["4-plugin-removed"]
    assert healed["rc"].strip() == "0", healed["stderr"][-3000:]
    assert healed["after"].splitlines()[-2:] == ["pyxis.conf", "unmodified"], healed["after"]


def test_should_run_job_steps_in_the_image_on_two_nodes_through_the_plans_files(deployed: dict[str, Any]) -> None:
    jobs = deployed["jobs"]
    assert "srun" in jobs, jobs
    FIGURES.append("Slurm containers, loopback cluster: " + ", ".join(
        f"{name} {seconds:.1f} s" for name, seconds in jobs["seconds"].items()))
    srun = jobs["srun"]
    assert srun["rc"] == 0, srun
    lines = srun["stdout"].splitlines()
    assert lines.count("inside the tiny image") == 2, srun
    assert len({line for line in lines if line.startswith("node=")}) == 2, srun
    batch = jobs["sbatch"]
    assert batch["state"].get("JobState") == "COMPLETED", batch
    assert "inside the tiny image" in batch["stdout"], batch


def test_should_still_run_a_job_without_an_image_on_the_host(deployed: dict[str, Any]) -> None:
    plain = deployed["jobs"]["plain"]
    assert plain["state"].get("JobState") == "COMPLETED", plain
    assert plain["stdout"] == "on the host\n", plain
