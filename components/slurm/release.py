"""The lending controller's code on the Slurm controller, shipped by the stack: this project's source and the stack's
spec as one archive named by its digest, installed into a venv of its own. Pure: no pulumi.

The controller runs `gpuctl flex control` (runbooks/flex), which reads the site from the stack file beside the code,
so both travel together: a change to either is a new release, and the unit restarts on it. The dependencies come
pinned by pyproject.toml from the site's package index (lending.package_index: PyPI or its mirror), as the operator's
own checkout gets them. Releases live under lending.project_dir/releases/<digest>; `current` points at the one the
unit runs, so a half-installed release is never run, and the ones before it are removed once it is in place.
"""

import base64
import gzip
import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path

from components.site.site import Site
from components.slurm.health_unit import HEALTH_UNIT, render_health_unit
from components.slurm.install import SYSTEMD_UNIT_DIR, install_script
from components.slurm.scripts import LENDING_UNIT, render_lending_unit

PROJECT_DIR = Path(__file__).resolve().parents[2]
# What `pip install <release>` builds the project from and `gpuctl flex --project-dir <release>` reads the site from.
PACKAGES = ("components", "runbooks", "hosts")
PROJECT_FILES = ("pyproject.toml", "Pulumi.yaml")
# Marks a release whose venv finished installing: written last, so an interrupted install is redone, never run.
INSTALLED_MARKER = ".installed"


@dataclass(frozen=True)
class Release:
    archive: str
    """A gzip'd tar, base64-encoded, of the project's packages and files and the stack file: byte-identical for the same
    tree. It travels on the command's stdin: as a command line it would pass Linux's 128 KiB limit on one argument
    (MAX_ARG_STRLEN, execve(2)), which `bash -c` on the controller gets the whole command as."""
    digest: str
    """The archive's sha256, first 16 hex digits: the release's directory name and the command's trigger."""


def release(stack: str, project_dir: Path = PROJECT_DIR) -> Release:
    """The project's packages (their .py files), pyproject.toml, Pulumi.yaml and Pulumi.<stack>.yaml. Names sorted,
    owner, mode and time fixed, so the same tree always gives the same archive and digest."""
    names = [*PROJECT_FILES, f"Pulumi.{stack}.yaml"]
    for package in PACKAGES:
        names += sorted(str(path.relative_to(project_dir)) for path in (project_dir / package).rglob("*.py"))
    buffer = io.BytesIO()
    # Level 1: gzip's default, 6, took three times its CPU (22 vs 7 ms, 8 % of the prod plan; issue 22) for an
    # archive 17 % smaller (276 vs 331 kB of the 1 MB tar), and 9 twice that again for 0.5 % more.
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=1, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            data = (project_dir / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    return Release(base64.b64encode(archive).decode(), hashlib.sha256(archive).hexdigest()[:16])


def release_command(site: Site, stack: str, digest: str) -> str:
    """Writes the lending and health controllers' units, installs the release read from stdin unless it already
    is, points `current` at it and (re)starts both units, then removes the releases before it. Run as root on the
    Slurm controller."""
    lending = site.lending
    root = shlex.quote(lending.project_dir)
    directory = shlex.quote(f"{lending.project_dir}/releases/{digest}")
    install = (f"rm -rf {directory} && install -d -m 0755 {directory} "
               f"&& base64 -d | tar -xzf - --no-same-owner -C {directory} "
               f"&& python3 -m venv {directory}/.venv "
               f"&& {directory}/.venv/bin/pip install --quiet --index-url {shlex.quote(lending.package_index)} "
               f"{directory} && touch {directory}/{INSTALLED_MARKER}")
    unit = {f"{SYSTEMD_UNIT_DIR}/{LENDING_UNIT}": (render_lending_unit(site, stack), 0o644),
            f"{SYSTEMD_UNIT_DIR}/{HEALTH_UNIT}": (render_health_unit(site, stack), 0o644)}
    units = f"{LENDING_UNIT} {HEALTH_UNIT}"
    return install_script(unit, " && ".join([
        f"{{ test -e {directory}/{INSTALLED_MARKER} || {{ {install}; }}; }}",
        f"ln -sfn releases/{digest} {root}/current.new && mv -T {root}/current.new {root}/current",
        f"systemctl daemon-reload && systemctl enable {units} && systemctl restart {units}",
        # Only once the unit runs the new release: a failed install or start leaves the one before in place.
        f"find {root}/releases -mindepth 1 -maxdepth 1 ! -name {digest} -exec rm -rf {{}} +",
    ]))
