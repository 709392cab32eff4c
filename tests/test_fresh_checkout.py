"""The README's first command as a new user runs it: `make plan` on a fresh checkout with a new virtualenv.

The checkout is what a clone of this tree would hold (tracked and untracked files, none git ignores: no .venv, no
build). Then a module the policy pack needs is taken out of that virtualenv, as a broken install would leave it.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.builders import REPO

MAKE_PLAN_TIMEOUT_S = 900
"""s for a virtualenv, the pip install (from pip's cache after the first run) and the plan."""


def fresh_checkout(destination: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.mark.expected_s(110)
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_should_plan_prod_on_a_fresh_checkout_and_name_a_module_the_install_lacks(tmp_path: Path) -> None:
    checkout = fresh_checkout(tmp_path / "gpu-cluster")
    planned = subprocess.run(["make", "plan"], cwd=checkout, capture_output=True, text=True,
                             timeout=MAKE_PLAN_TIMEOUT_S)
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    assert "stack prod: 128 GPUs on 16 nodes in 4 racks" in planned.stdout
    assert (checkout / "build" / "plan" / "slurm" / "slurm.conf").is_file()

    venv = checkout / ".venv"
    subprocess.run([venv / "bin" / "pip", "uninstall", "--quiet", "--yes", "pulumi-policy"], check=True, timeout=120)
    broken = subprocess.run([venv / "bin" / "gpuctl", "plan"], cwd=checkout, capture_output=True, text=True,
                            timeout=300)
    assert broken.returncode == 1, broken.stderr
    assert broken.stderr.splitlines()[0] == (
        "error: the policy pack exited with status 1 before it served: module 'pulumi_policy' is not installed in "
        f"{venv} (`make plan` installs what gpuctl needs)")
