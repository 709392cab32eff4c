"""How an sbatch job gets the GPU driver (docs/gpu-driver.md): Pyxis and enroot on every Slurm node, enroot's GPU hook
pointed at the driver root and toolkit the GPU Operator really uses, as the real Helm renders its ClusterPolicy."""

import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.charts import GPU_OPERATOR
from components.facility.admission import check_command
from components.facility.power import node_loads
from components.gpu_operator.values import operator_values
from components.slurm.conf import render_slurm_conf
from components.slurm.containers import (
    CONTAINER_CLI,
    ENROOT_CONF,
    ENROOT_TMPFILES,
    PLUGSTACK,
    PYXIS_CONF,
    PYXIS_PLUGIN,
    render_pyxis_conf,
    submit_files,
)
from components.slurm.install import node_files
from runbooks.plan.helm import chart_archive, find_helm
from tests.builders import REPO, parse, problems, with_changes

MIRROR = REPO.parent / "shared" / "charts"
HELM = find_helm()


def cluster_policy(site_values: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The ClusterPolicy the operator reconciles, as the pinned chart renders it from our values."""
    assert HELM is not None
    values = tmp_path / "values.json"
    values.write_text(json.dumps(site_values))
    done = subprocess.run([HELM, "template", "gpu-operator", str(chart_archive(MIRROR, GPU_OPERATOR.name,
                                                                               GPU_OPERATOR.version)),
                           "--namespace", "gpu-operator", "--values", str(values)],
                          capture_output=True, text=True, timeout=120, check=True)
    (policy,) = [o for o in yaml.safe_load_all(done.stdout) if isinstance(o, dict) and o["kind"] == "ClusterPolicy"]
    return policy


@pytest.mark.skipif(HELM is None or not MIRROR.is_dir(), reason="needs helm and the chart mirror ../shared/charts")
def test_should_point_slurm_containers_and_the_node_check_at_the_driver_root_and_toolkit_the_operator_uses(
        tmp_path: Path, prod: dict[str, Any]) -> None:
    site = parse(prod)
    spec = cluster_policy(operator_values(site), tmp_path)["spec"]
    driver_root = spec["hostPaths"]["driverInstallDir"]
    toolkit_cli = f"{spec['toolkit']['installDir']}/toolkit/nvidia-container-cli"
    assert (driver_root, spec["dcgm"]["enabled"]) == ("/run/nvidia/driver", True)
    # Every Slurm node runs the operator's toolkit against the operator's driver root when enroot asks for GPUs...
    wrapper, mode = node_files(site)[CONTAINER_CLI]
    assert shlex.split(wrapper.splitlines()[-1]) == ["exec", toolkit_cli, f"--root={driver_root}", "$@"]
    assert mode == 0o755
    # ...and the node check proves exactly that path works before the node takes a job.
    argv = shlex.split(check_command(site, node_loads(site)[0]).split("; ")[1])
    assert argv[argv.index("--driver-root") + 1] == driver_root
    assert argv[argv.index("--toolkit-cli") + 1] == toolkit_cli


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace (unshare --mount)")
def test_should_hand_the_toolkit_the_driver_root_before_the_arguments_enroots_hook_passes(
        tmp_path: Path, prod: dict[str, Any]) -> None:
    wrapper = node_files(parse(prod))[CONTAINER_CLI][0]
    toolkit_cli = shlex.split(wrapper.splitlines()[-1])[1]
    assert toolkit_cli.startswith("/usr/local/")
    toolkit = tmp_path / "nvidia-container-cli"
    toolkit.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\n")
    toolkit.chmod(0o755)
    script = tmp_path / "wrapper"
    script.write_text(wrapper)
    # enroot conf/hooks/98-nvidia.sh: exec nvidia-container-cli --user configure "${cli_args[@]}" "${ENROOT_ROOTFS}"
    hook = ["--user", "configure", "--no-cgroups", "--ldconfig=@/sbin/ldconfig", "--device=0,1", "--compute",
            "--utility", "/run/enroot/user-1000/job 42"]
    # The wrapper as shipped execs the toolkit where the operator installs it: in a private mount namespace, an empty
    # /usr/local holds the stand-in there.
    subprocess.run(["unshare", "--mount", "--", "sh", "-c", 'mount -t tmpfs tmpfs /usr/local && mkdir -p "${1%/*}" && '
                    'cp "$0" "$1" && shift && exec sh "$@"', str(toolkit), toolkit_cli, str(script), *hook],
                   check=True, timeout=10)
    assert (tmp_path / "argv").read_text().splitlines() == ["--root=/run/nvidia/driver", *hook]


def test_should_load_pyxis_from_local_disk_wherever_jobs_are_submitted_or_run(prod: dict[str, Any]) -> None:
    site = parse(prod)
    assert f"PlugStackConfig={PLUGSTACK}" in render_slurm_conf(site).splitlines()
    on_nodes = node_files(site)
    for files in (submit_files(), on_nodes):
        assert files[PLUGSTACK][0].splitlines()[-1] == "include /etc/slurm/plugstack.conf.d/*.conf"
        # Only the step that installs Pyxis writes its line (tests/integration/test_slurm_containers.py runs it).
        assert PYXIS_CONF not in files
    pyxis = f"required {PYXIS_PLUGIN} runtime_path=/run/pyxis container_scope=job"
    assert render_pyxis_conf().splitlines()[-1] == pyxis
    # enroot under slurmstepd has no XDG session directories: everything on local disk, made at every boot.
    assert "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)" in on_nodes[ENROOT_CONF][0].splitlines()
    assert "d /run/enroot 1777 root root -" in on_nodes[ENROOT_TMPFILES][0].splitlines()


@pytest.mark.skipif(shutil.which("systemd-tmpfiles") is None, reason="needs systemd-tmpfiles")
def test_should_make_enroots_directories_at_boot_as_systemd_reads_the_entry(tmp_path: Path,
                                                                            prod: dict[str, Any]) -> None:
    entry = tmp_path / ENROOT_TMPFILES.lstrip("/")
    entry.parent.mkdir(parents=True)
    entry.write_text(node_files(parse(prod))[ENROOT_TMPFILES][0])
    subprocess.run(["systemd-tmpfiles", f"--root={tmp_path}", "--create", str(entry)], check=True, timeout=30)
    for directory in ("run/enroot", "var/lib/enroot", "var/cache/enroot"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o1777


@pytest.mark.parametrize(("changes", "expected"), [
    pytest.param({"slurm__containers__pyxis__sha256": "abc"},
                 "slurm.containers.pyxis.sha256: String should match pattern '^[0-9a-f]{64}$' (got \"abc\")",
                 id="rejects a checksum that is not a sha256"),
    pytest.param({"slurm__containers__mirror_url": "ftp://mirror/x"}, "slurm.containers.mirror_url: String should "
                 "match pattern", id="rejects a mirror curl is not told to fetch from"),
    pytest.param({"slurm__containers__enroot__file": "../enroot.deb"}, "slurm.containers.enroot.file: String should "
                 "match pattern", id="rejects a package file outside the mirror folder"),
])
def test_should_deny_a_container_artifact_the_deploy_cannot_check(prod: dict[str, Any], changes: dict[str, Any],
                                                                  expected: str) -> None:
    [problem] = problems(with_changes(prod, **changes))
    assert problem.startswith(expected), problem


def test_should_name_the_missing_container_path(prod: dict[str, Any]) -> None:
    # No default: a site without its own enroot and Pyxis builds could not run a single containerised job.
    del prod["slurm"]["containers"]
    assert problems(prod) == ["slurm.containers: required key is missing"]
