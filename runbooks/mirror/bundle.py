"""What an air-gapped site carries across the gap, computed from the render, and the check of what arrived.

A bundle is a folder: the pinned chart archives every release installs (charts/), the images the render names, by
their source references and where the site's registry keeps them (images.txt), Slurm's host artifacts from
slurm.containers (host-artifacts/), the model directories the NVMe prefetch copies (models.txt), and SHA256SUMS, the
sha256 of every other file in `sha256sum` format, so `sha256sum -c SHA256SUMS` checks it too.
"""

import hashlib
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from components.charts import sha256_of
from components.mirror.images import mirrored
from components.site.site import Site
from components.storage.tiers import prefetched_dirs
from runbooks.offline.engine import ResourceGraph
from runbooks.plan import helm
from runbooks.plan.images import ImageUse

MANIFEST = "SHA256SUMS"
CHARTS_DIR, ARTIFACTS_DIR = "charts", "host-artifacts"
IMAGES, MODELS = "images.txt", "models.txt"
DRIVER_IMAGE = "nvcr.io/nvidia/driver"
"""The GPU Operator pulls its driver as `<version>-<os><os version>` of the node (`535.230.02-ubuntu22.04`; GPU
Operator docs, "Precompiled and signed drivers" and driver container tags): the list names the version the render
has, and the site copies the tag of its nodes' OS."""


class BundleError(Exception):
    """The bundle cannot be made from these inputs (an artifact missing or not the one the spec pins, a folder that is
    not empty)."""


@dataclass(frozen=True)
class Mismatch:
    path: str
    """The file, relative to the bundle."""
    reason: str


def image_lines(images: dict[str, list[ImageUse]], registry: str | None) -> list[str]:
    """images.txt: one image a line, its source reference and, tab-separated, where the site's registry keeps it."""
    header = [f"# source reference\tin the site's registry ({registry or 'mirror.images not set'})",
              f"# {DRIVER_IMAGE}: the GPU Operator appends the nodes' OS to the tag (-ubuntu22.04, -rhel9.4, ...)"]
    return header + [f"{source}\t{mirrored(source, registry) if registry else '-'}" for source in images]


def model_lines(site: Site) -> list[str]:
    """models.txt: each model directory the prefetch copies to every GPU node, and where it must be in the site's
    model registry (storage.nfs_hot.models_export on the first hot-tier server) before the first `pulumi up`."""
    nfs = site.storage.nfs_hot
    return ["# model directory\tin the site's model registry"] + [
        f"{d}\t{nfs.servers[0]}:{nfs.models_export}/{d}" for d in prefetched_dirs(site)]


def write_bundle(out_dir: Path, site: Site, graph: ResourceGraph, images: dict[str, list[ImageUse]],
                 chart_mirror: Path | None, source: helm.ChartSource, helm_binary: str, artifacts: Path) -> list[Path]:
    """Fill a new or empty out_dir; the files written, the manifest last."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise BundleError(f"--out {out_dir}: not a new or empty folder")
    containers = site.slurm.containers
    for artifact in (containers.enroot, containers.pyxis):
        path = artifacts / artifact.file
        if not path.is_file():
            raise BundleError(f"slurm.containers: {artifact.file} is not in {artifacts} (`make artifacts` builds it)")
        if sha256_of(path) != artifact.sha256:
            raise BundleError(f"slurm.containers: {path} has sha256 {sha256_of(path)}, not the {artifact.sha256} the "
                              "spec pins")
    (out_dir / CHARTS_DIR).mkdir(parents=True)
    (out_dir / ARTIFACTS_DIR).mkdir()
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        for release in graph.of_type(helm.RELEASE_TYPE):
            archive = helm.fetch(release.inputs["chart"], release.inputs["version"], chart_mirror, source,
                                 helm_binary, Path(scratch))
            target = out_dir / CHARTS_DIR / archive.name
            if not target.exists():
                written.append(Path(shutil.copyfile(archive, target)))
    for artifact in (containers.enroot, containers.pyxis):
        written.append(Path(shutil.copyfile(artifacts / artifact.file, out_dir / ARTIFACTS_DIR / artifact.file)))
    for name, lines in ((IMAGES, image_lines(images, site.mirror.images)), (MODELS, model_lines(site))):
        (out_dir / name).write_text("".join(f"{line}\n" for line in lines))
        written.append(out_dir / name)
    manifest = out_dir / MANIFEST
    manifest.write_text(_manifest(out_dir, written))
    return [*written, manifest]


def _manifest(root: Path, files: Iterable[Path]) -> str:
    return "".join(f"{sha256_of(f)}  {f.relative_to(root).as_posix()}\n"
                   for f in sorted(files, key=lambda f: f.relative_to(root).as_posix()))


def manifest_digest(bundle: Path) -> str:
    """sha256 of the manifest: compare it with the one `gpuctl mirror bundle` printed, over another channel, to know
    the manifest itself is the one written."""
    return hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest()


def check_bundle(bundle: Path) -> list[Mismatch]:
    """Every file the manifest lists that is missing or whose sha256 differs, every file it does not list, and every
    line it cannot read; empty when the bundle is what was written."""
    manifest = bundle / MANIFEST
    if not manifest.is_file():
        return [Mismatch(MANIFEST, "missing: not a bundle `gpuctl mirror bundle` wrote")]
    problems, listed = [], set()
    for number, line in enumerate(manifest.read_text().splitlines(), 1):
        digest, _, relative = line.partition("  ")
        path = Path(relative)
        if len(digest) != 64 or not relative or path.is_absolute() or ".." in path.parts:
            problems.append(Mismatch(MANIFEST, f"line {number} is not `<sha256>  <relative path>`: {line!r}"))
            continue
        listed.add(path.as_posix())
        target = bundle / path
        if target.is_symlink() or not target.is_file():
            problems.append(Mismatch(path.as_posix(), "missing"))
        elif (actual := sha256_of(target)) != digest:
            problems.append(Mismatch(path.as_posix(), f"sha256 {actual}, not the {digest} the manifest lists"))
    for found in sorted(p for p in bundle.rglob("*") if not p.is_dir()):
        relative = found.relative_to(bundle).as_posix()
        if relative != MANIFEST and relative not in listed:
            problems.append(Mismatch(relative, "not in the manifest"))
    return problems

