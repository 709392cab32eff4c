"""The Slurm container packages `make artifacts` builds (packaging/slurm-containers.sh), as a test stack's
slurm.containers names them: a test's mirror is a folder (file://) holding them."""

import hashlib
from pathlib import Path
from typing import Any

from tests.builders import REPO

ARTIFACTS = REPO / "build" / "artifacts"
ENROOT_DEB, PYXIS_DEB = "enroot_4.1.2-1_amd64.deb", "nvslurm-plugin-pyxis_0.24.0-1_amd64.deb"


def missing() -> str | None:
    """Why a test of the container path cannot run here, if it cannot."""
    if not (ARTIFACTS / "SHA256SUMS").exists():
        return "needs the packages `make artifacts` builds (build/artifacts)"
    return None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def containers(mirror: Path = ARTIFACTS, pyxis: Path = ARTIFACTS / PYXIS_DEB) -> dict[str, Any]:
    """slurm.containers for a mirror folder holding enroot's package and the given Pyxis package."""
    return {"mirror_url": f"file://{mirror}",
            "enroot": {"file": ENROOT_DEB, "package_version": "4.1.2-1", "sha256": sha256(ARTIFACTS / ENROOT_DEB)},
            "pyxis": {"file": PYXIS_DEB, "package_version": "0.24.0-1", "sha256": sha256(pyxis)}}
