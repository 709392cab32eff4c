"""Move training checkpoints from the hot tier (NFS) to the cold tier (Ceph), never losing one.

Runs from a Kubernetes CronJob and from the Slurm epilog on GPU nodes, so it uses the Python
standard library only and imports nothing from the project (run it as
`python -m hosts.checkpoint_mover` or as a plain file).

Layout: `HOT/<team>/<run>/<checkpoint>`, where a checkpoint is a directory of shards, or a single
file whose name carries a step number (so `latest`, configs and logs beside the checkpoints stay).
Names starting with "." are skipped at every level of that layout (NFS filers expose `.snapshot`).
A checkpoint is complete when it holds a `COMPLETE` marker, or, without one, when nothing in it was
modified for `--settle-s` seconds; an incomplete checkpoint is never touched.

Per run directory the newest `--keep` complete checkpoints stay hot (ordered by the step number in
their names, e.g. `step-001200` or `checkpoint-1200`, or by mtime when a run's names lack one); the
older ones, and any older than `--archive-after-days` (the newest included: a run that stopped a
week ago leaves hot), move to the same relative path on cold:

1. copy into `<dest>.partial-<pid>-<random>`, hashing (SHA-256) each byte as it is read from hot,
   then fsync, drop the cold copy from the page cache and re-read it, so the check reads storage;
2. rename the partial to `<dest>` (atomic), fsync the directory;
3. delete from hot only after every hot file has a cold file of the same size and SHA-256 and
   did not change while it was copied.

A crash anywhere leaves either a partial (removed once nothing in it changed for `--settle-s`) or
a finished cold copy, which a later run verifies against hot and then deletes from hot: nothing is
copied twice or lost, and a second run moves nothing. A checksum mismatch, a copy error or a
permission error leaves the hot copy, is reported, and the run goes on with the other checkpoints;
a full cold tier (ENOSPC, EDQUOT) stops all further copying. Any error makes the exit status 1.

Metrics go, in Prometheus text format and replaced atomically, to `--metrics-file` for
node-exporter's textfile collector. The monitoring stack should alert on
`gpucluster_checkpoint_hot_fill_ratio > 0.85` (the default `--hot-fill-threshold-pct`, also
exported as `gpucluster_checkpoint_hot_fill_threshold_ratio`), on
`time() - gpucluster_checkpoint_last_success_timestamp_seconds > 2 * <schedule interval>`, and on
`sum(gpucluster_checkpoint_last_run_errors) > 0`.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import re
import secrets
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

DEFAULT_KEEP = 3
"""Newest complete checkpoints per run kept hot (site spec: storage.nfs_hot.keep_checkpoints)."""
DEFAULT_ARCHIVE_AFTER_DAYS = 7
"""days after which a checkpoint moves to cold even if it is among the newest (storage.ceph_cold)."""
DEFAULT_SETTLE_S = 300
"""s without a modification after which a checkpoint without a marker counts as complete."""
DEFAULT_HOT_FILL_THRESHOLD_PCT = 85.0
"""% of the hot tier in use above which the monitoring stack should alert."""
COMPLETE_MARKER = "COMPLETE"
CHUNK_BYTES = 8 << 20
"""8 MiB: large enough that per-call overhead vanishes, small enough for 8 buffers per process."""
COPY_THREADS = 8
"""Files copied at once, whatever the core count: the time goes in waiting on fsync and storage
(hashing and file I/O release the GIL); 8 beat 2 and equalled 16 in benchmarks/checkpoint_bench.py."""
THREAD_BUFFERS = threading.local()
PARTIAL_INFIX = ".partial-"
SECONDS_PER_DAY = 86_400
COLD_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
METRIC_PREFIX = "gpucluster_checkpoint_"
LAST_SUCCESS_METRIC = f"{METRIC_PREFIX}last_success_timestamp_seconds"

# The last run of digits in a name, before any extension: step-001200, checkpoint-1200.pt.
STEP_PATTERN = re.compile(r"(\d+)(?:\.[A-Za-z][A-Za-z0-9]*)*$")


class ErrorKind(StrEnum):
    CHECKSUM = "checksum"
    """A cold copy differs from hot in size or SHA-256."""
    SOURCE_CHANGED = "source_changed"
    """A hot file changed while it was copied."""
    COLD_FULL = "cold_full"
    """The cold tier is out of space or quota."""
    PERMISSION = "permission"
    IO = "io"
    """Any other error reading hot or writing cold."""


class ChecksumMismatchError(Exception):
    pass


class SourceChangedError(Exception):
    pass


@dataclass(frozen=True)
class TieringSettings:
    hot: Path
    cold: Path
    keep: int = DEFAULT_KEEP
    archive_after_days: float = DEFAULT_ARCHIVE_AFTER_DAYS
    settle_s: float = DEFAULT_SETTLE_S
    dry_run: bool = False
    metrics_file: Path | None = None
    hot_fill_threshold_pct: float = DEFAULT_HOT_FILL_THRESHOLD_PCT


@dataclass(frozen=True)
class Checkpoint:
    relative: Path
    """Path below the tier root: <team>/<run>/<checkpoint>."""
    step: int | None
    """Step number parsed from the name; None when the name has none."""
    mtime: float
    """s since the epoch; the newest modification of anything in the checkpoint."""
    complete: bool


@dataclass(frozen=True)
class FileFacts:
    size: int
    """bytes."""
    mtime_ns: int
    sha256: str


@dataclass
class TieringReport:
    moved: int = 0
    copied_bytes: int = 0
    freed_bytes: int = 0
    errors: dict[ErrorKind, int] = field(default_factory=lambda: dict.fromkeys(ErrorKind, 0))

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def progress(message: str) -> None:
    print(f"checkpoint-tiering: {message}", file=sys.stderr, flush=True)


# --- planning: which checkpoints leave hot (no writes) ---


def parse_step(name: str) -> int | None:
    match = STEP_PATTERN.search(name)
    return int(match.group(1)) if match else None


def visible_entries(directory: Path) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as entries:
        return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def find_runs(hot: Path) -> Iterator[Path]:
    """Yield each run directory, relative to the tier root."""
    for team in visible_entries(hot):
        if team.is_dir(follow_symlinks=False):
            for run in visible_entries(Path(team.path)):
                if run.is_dir(follow_symlinks=False):
                    yield Path(team.name, run.name)


def find_checkpoints(hot: Path, run: Path, settle_s: float, now: float) -> list[Checkpoint]:
    checkpoints = []
    for entry in visible_entries(hot / run):
        path, step = Path(entry.path), parse_step(entry.name)
        is_dir = entry.is_dir(follow_symlinks=False)
        if not (is_dir or (entry.is_file(follow_symlinks=False) and step is not None)):
            continue
        mtime = newest_mtime(path)
        marked = is_dir and (path / COMPLETE_MARKER).is_file()
        checkpoints.append(
            Checkpoint(relative=run / entry.name, step=step, mtime=mtime, complete=marked or now - mtime >= settle_s)
        )
    return checkpoints


def select_for_cold(
    checkpoints: Sequence[Checkpoint], keep: int, archive_after_days: float, now: float
) -> list[tuple[Checkpoint, str]]:
    """The complete checkpoints of one run that leave hot, oldest first, each with the reason."""
    complete = [c for c in checkpoints if c.complete]
    # Steps order a run only when every name has one; mixing steps and mtimes would be arbitrary.
    if all(c.step is not None for c in complete):
        complete.sort(key=lambda c: (c.step, c.mtime))
    else:
        complete.sort(key=lambda c: c.mtime)
    cutoff = now - archive_after_days * SECONDS_PER_DAY
    selected = []
    for rank_from_newest, checkpoint in enumerate(reversed(complete)):
        if rank_from_newest >= keep:
            selected.append((checkpoint, f"beyond the newest {keep}"))
        elif checkpoint.mtime < cutoff:
            selected.append((checkpoint, f"older than {archive_after_days:g} days"))
    return selected[::-1]


# --- copying and verifying one checkpoint ---


def tree_files(root: Path) -> dict[Path, os.stat_result]:
    """Every non-directory under root (or root itself if it is a file), by path relative to root."""
    if not root.is_dir() or root.is_symlink():
        return {Path(): root.lstat()}
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            if not stat.S_ISDIR(info.st_mode):
                found[path.relative_to(root)] = info
    return found


def tree_dirs(root: Path) -> list[Path]:
    if not root.is_dir() or root.is_symlink():
        return []
    return [Path(directory).relative_to(root) for directory, _, _ in os.walk(root)]


def write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


def chunk_buffer() -> memoryview:
    """This thread's reusable buffer: zeroing a fresh 8 MiB per file would cost more than the copy."""
    buffer: memoryview | None = getattr(THREAD_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = THREAD_BUFFERS.buffer = memoryview(bytearray(CHUNK_BYTES))
    return buffer


def hash_file(path: Path) -> str:
    """SHA-256 of what storage holds: the page cache is dropped first so the read reaches it."""
    digest, view = hashlib.sha256(), chunk_buffer()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while count := os.readv(fd, [view]):
            digest.update(view[:count])
    finally:
        os.close(fd)
    return digest.hexdigest()


def copy_file(source: Path, dest: Path, source_stat: os.stat_result) -> FileFacts:
    """Copy one file, hashing each byte as it is read so hot is read once; durable on return."""
    if stat.S_ISLNK(source_stat.st_mode):
        target = os.readlink(source)
        os.symlink(target, dest)
        return FileFacts(source_stat.st_size, source_stat.st_mtime_ns, hashlib.sha256(target.encode()).hexdigest())
    if not stat.S_ISREG(source_stat.st_mode):
        raise OSError(errno.EINVAL, "not a regular file, directory or symlink", str(source))
    digest, view, size = hashlib.sha256(), chunk_buffer(), 0
    source_fd = os.open(source, os.O_RDONLY)
    try:
        dest_fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(source_stat.st_mode))
        try:
            while count := os.readv(source_fd, [view]):
                digest.update(view[:count])
                write_all(dest_fd, view[:count])
                size += count
            os.fsync(dest_fd)
        finally:
            os.close(dest_fd)
    finally:
        os.close(source_fd)
    os.utime(dest, ns=(source_stat.st_atime_ns, source_stat.st_mtime_ns))
    return FileFacts(size, source_stat.st_mtime_ns, digest.hexdigest())


def cold_matches(dest: Path, facts: FileFacts) -> bool:
    try:
        info = dest.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        return hashlib.sha256(os.readlink(dest).encode()).hexdigest() == facts.sha256
    return stat.S_ISREG(info.st_mode) and info.st_size == facts.size and hash_file(dest) == facts.sha256


def copy_and_verify(source: Path, dest: Path, source_stat: os.stat_result) -> FileFacts:
    facts = copy_file(source, dest, source_stat)
    if not cold_matches(dest, facts):
        raise ChecksumMismatchError(f"{dest}: cold copy differs from hot in size or SHA-256")
    return facts


def hot_facts(source: Path, source_stat: os.stat_result) -> FileFacts:
    if stat.S_ISLNK(source_stat.st_mode):
        target = os.readlink(source)
        return FileFacts(source_stat.st_size, source_stat.st_mtime_ns, hashlib.sha256(target.encode()).hexdigest())
    return FileFacts(source_stat.st_size, source_stat.st_mtime_ns, hash_file(source))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def join(root: Path, relative: Path) -> Path:
    return root if relative == Path() else root / relative


def run_all(
    pool: ThreadPoolExecutor, task: Callable[[Path], FileFacts], paths: Iterable[Path]
) -> dict[Path, FileFacts]:
    """Run task on every path; the first error is raised only after all tasks ended."""
    futures = {path: pool.submit(task, path) for path in paths}
    for future in futures.values():
        future.exception()
    return {path: future.result() for path, future in futures.items()}


def ensure_unchanged(source: Path, copied: dict[Path, FileFacts]) -> None:
    for rel, info in tree_files(source).items():
        facts = copied.get(rel)
        if facts is None or info.st_mtime_ns != facts.mtime_ns or info.st_size != facts.size:
            raise SourceChangedError(f"{join(source, rel)}: changed on hot while it was copied")


def copy_checkpoint(source: Path, dest: Path, pool: ThreadPoolExecutor) -> dict[Path, FileFacts] | None:
    """Copy source to dest via a verified partial renamed into place; None if another mover got there first."""
    files = tree_files(source)
    partial = dest.with_name(f"{dest.name}{PARTIAL_INFIX}{os.getpid()}-{secrets.token_hex(4)}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        for directory in tree_dirs(source):
            join(partial, directory).mkdir(parents=True, exist_ok=True)
        copied = run_all(pool, lambda rel: copy_and_verify(join(source, rel), join(partial, rel), files[rel]), files)
        # Checked before the rename: a finished cold copy must always equal the hot one.
        ensure_unchanged(source, copied)
        for directory in reversed(tree_dirs(partial)):
            fsync_dir(join(partial, directory))
        try:
            partial.rename(dest)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            remove_tree(partial)
            return None
        fsync_dir(dest.parent)
    except BaseException:
        if partial.exists() or partial.is_symlink():
            remove_tree(partial)
        raise
    return copied


def verify_on_cold(source: Path, dest: Path, pool: ThreadPoolExecutor) -> dict[Path, FileFacts]:
    """Check that every hot file has an identical cold copy; return the hot files' facts."""
    files = tree_files(source)
    facts = run_all(pool, lambda rel: hot_facts(join(source, rel), files[rel]), files)
    for rel, hot in facts.items():
        if not cold_matches(join(dest, rel), hot):
            raise ChecksumMismatchError(f"{join(dest, rel)}: cold copy differs from hot in size or SHA-256")
    return facts


def remove_tree(path: Path) -> None:
    """Delete a file or a tree, the COMPLETE marker last, so a half-deleted checkpoint is incomplete."""
    if not path.is_dir() or path.is_symlink():
        path.unlink()
        return
    for directory, dirs, files in os.walk(path, topdown=False):
        for name in files:
            if not (directory == str(path) and name == COMPLETE_MARKER):
                os.unlink(os.path.join(directory, name))
        for name in dirs:
            child = os.path.join(directory, name)
            if os.path.islink(child):
                os.unlink(child)
            else:
                os.rmdir(child)
    marker = path / COMPLETE_MARKER
    if marker.exists():
        marker.unlink()
    path.rmdir()


def remove_stale_partials(cold_run_dir: Path, settle_s: float, now: float, dry_run: bool) -> None:
    """Remove partials left by crashed movers; a partial still changing belongs to a running one."""
    if not cold_run_dir.is_dir():
        return
    for entry in visible_entries(cold_run_dir):
        path = Path(entry.path)
        if PARTIAL_INFIX in entry.name and now - newest_mtime(path) >= settle_s:
            progress(f"{'would remove' if dry_run else 'removing'} stale partial {path}")
            if not dry_run:
                remove_tree(path)


def classify(error: BaseException) -> ErrorKind:
    if isinstance(error, ChecksumMismatchError):
        return ErrorKind.CHECKSUM
    if isinstance(error, SourceChangedError):
        return ErrorKind.SOURCE_CHANGED
    if isinstance(error, PermissionError):
        return ErrorKind.PERMISSION
    if isinstance(error, OSError) and error.errno in COLD_FULL_ERRNOS:
        return ErrorKind.COLD_FULL
    return ErrorKind.IO


# --- the run ---


def move_checkpoint(
    settings: TieringSettings, checkpoint: Checkpoint, pool: ThreadPoolExecutor, report: TieringReport
) -> None:
    source, dest = settings.hot / checkpoint.relative, settings.cold / checkpoint.relative
    copied = None
    if not (dest.exists() or dest.is_symlink()):
        progress(f"{checkpoint.relative}: copying to cold")
        copied = copy_checkpoint(source, dest, pool)
    if copied is None:
        progress(f"{checkpoint.relative}: already on cold, verifying before deleting from hot")
        facts = verify_on_cold(source, dest, pool)
    else:
        facts = copied
        report.copied_bytes += sum(f.size for f in copied.values())
    remove_tree(source)
    report.moved += 1
    report.freed_bytes += sum(f.size for f in facts.values())
    progress(f"{checkpoint.relative}: moved")


def plan_run(settings: TieringSettings, run: Path, now: float, report: TieringReport) -> list[tuple[Checkpoint, str]]:
    """Scan one run directory and say what leaves hot; a run that cannot be read is reported and skipped."""
    try:
        remove_stale_partials(settings.cold / run, settings.settle_s, now, settings.dry_run)
        checkpoints = find_checkpoints(settings.hot, run, settings.settle_s, now)
    except OSError as error:
        # Trainers rotate their own checkpoints: one may vanish while it is scanned.
        report.errors[classify(error)] += 1
        progress(f"{run}: cannot be scanned, skipped: {error}")
        return []
    for checkpoint in checkpoints:
        if not checkpoint.complete:
            progress(f"{checkpoint.relative}: incomplete, left alone")
    return select_for_cold(checkpoints, settings.keep, settings.archive_after_days, now)


def run_tiering(settings: TieringSettings, now: float | None = None) -> TieringReport:
    """Move what leaves hot; in a dry run, count what would move and change nothing."""
    now = time.time() if now is None else now
    report, cold_full = TieringReport(), False
    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="checkpoint-copy") as pool:
        for run in find_runs(settings.hot):
            for checkpoint, reason in plan_run(settings, run, now, report):
                needs_copy = not (settings.cold / checkpoint.relative).exists()
                if settings.dry_run:
                    size = sum(info.st_size for info in tree_files(settings.hot / checkpoint.relative).values())
                    report.moved += 1
                    report.copied_bytes += size if needs_copy else 0
                    report.freed_bytes += size
                    progress(f"{checkpoint.relative}: would move to cold ({reason})")
                    continue
                if cold_full and needs_copy:
                    progress(f"{checkpoint.relative}: not copied, the cold tier is full")
                    continue
                try:
                    move_checkpoint(settings, checkpoint, pool, report)
                except (OSError, ChecksumMismatchError, SourceChangedError) as error:
                    kind = classify(error)
                    report.errors[kind] += 1
                    cold_full = cold_full or kind is ErrorKind.COLD_FULL
                    progress(f"{checkpoint.relative}: error ({kind}), left on hot: {error}")
    return report


# --- metrics (Prometheus text format, for node-exporter's textfile collector) ---


def previous_last_success(metrics_file: Path) -> float | None:
    try:
        text = metrics_file.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == LAST_SUCCESS_METRIC:
            return float(value)
    return None


def hot_fill_ratio(hot: Path) -> float:
    usage = os.statvfs(hot)
    # Blocks in use over blocks users can have, as df computes Use%.
    used = usage.f_blocks - usage.f_bfree
    return used / (used + usage.f_bavail) if used + usage.f_bavail else 0.0


GAUGES = {
    "last_run_moved_checkpoints": "Checkpoints moved from hot to cold by the last run.",
    "last_run_copied_bytes": "Bytes copied to the cold tier by the last run.",
    "last_run_freed_bytes": "Bytes deleted from the hot tier by the last run.",
    "last_run_errors": "Errors in the last run by kind; each left its checkpoint or run on hot.",
    "last_run_timestamp_seconds": "Unix time the last run ended.",
    "last_success_timestamp_seconds": "Unix time of the last run that ended without errors.",
    "hot_fill_ratio": "Fraction of the hot tier's capacity in use.",
    "hot_fill_threshold_ratio": "Hot tier fill ratio above which to alert.",
}
METRICS = tuple(f"{METRIC_PREFIX}{name}" for name in GAUGES)
"""Every metric the mover writes (gpuctl plan checks that what the rules read is among them)."""


def render_metrics(report: TieringReport, settings: TieringSettings, now: float, last_success: float | None) -> str:
    lines: list[str] = []

    def gauge(name: str, samples: Iterable[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {METRIC_PREFIX}{name} {GAUGES[name]}", f"# TYPE {METRIC_PREFIX}{name} gauge"])
        # repr is the shortest text that reads back as the same float; counts stay integers.
        lines.extend(f"{METRIC_PREFIX}{name}{labels} {value!r}" for labels, value in samples)

    gauge("last_run_moved_checkpoints", [("", report.moved)])
    gauge("last_run_copied_bytes", [("", report.copied_bytes)])
    gauge("last_run_freed_bytes", [("", report.freed_bytes)])
    gauge("last_run_errors", [(f'{{kind="{kind}"}}', count) for kind, count in report.errors.items()])
    gauge("last_run_timestamp_seconds", [("", now)])
    gauge("last_success_timestamp_seconds", [] if last_success is None else [("", last_success)])
    gauge("hot_fill_ratio", [("", hot_fill_ratio(settings.hot))])
    gauge("hot_fill_threshold_ratio", [("", settings.hot_fill_threshold_pct / 100)])
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """The textfile collector may read at any moment: it must see the old file or the new, whole."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


# --- command line ---


def non_negative(parse: Callable[[str], float]) -> Callable[[str], float]:
    def checked(text: str) -> float:
        value = parse(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    return checked


def parse_args(argv: Sequence[str] | None) -> TieringSettings:
    parser = argparse.ArgumentParser(
        prog="checkpoint_tiering", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--hot", type=Path, required=True, help="hot tier root: <hot>/<team>/<run>/<checkpoint>")
    parser.add_argument("--cold", type=Path, required=True, help="cold tier root, same layout")
    parser.add_argument("--keep", type=non_negative(int), default=DEFAULT_KEEP, help="newest checkpoints kept hot")
    parser.add_argument("--archive-after-days", type=non_negative(float), default=DEFAULT_ARCHIVE_AFTER_DAYS)
    parser.add_argument("--settle-s", type=non_negative(float), default=DEFAULT_SETTLE_S)
    parser.add_argument("--dry-run", action="store_true", help="print what would move, change nothing")
    parser.add_argument("--metrics-file", type=Path, help="Prometheus textfile collector file (*.prom)")
    parser.add_argument("--hot-fill-threshold-pct", type=non_negative(float), default=DEFAULT_HOT_FILL_THRESHOLD_PCT)
    args = parser.parse_args(argv)
    if not args.hot.is_dir():
        parser.error(f"--hot {args.hot}: not a directory")
    return TieringSettings(
        hot=args.hot,
        cold=args.cold,
        keep=int(args.keep),
        archive_after_days=args.archive_after_days,
        settle_s=args.settle_s,
        dry_run=args.dry_run,
        metrics_file=args.metrics_file,
        hot_fill_threshold_pct=args.hot_fill_threshold_pct,
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    report = run_tiering(settings)
    now = time.time()
    verbs = ("dry run: would move", "copy", "free") if settings.dry_run else ("moved", "copied", "freed")
    progress(
        f"summary: {verbs[0]} {report.moved} checkpoints, {verbs[1]} {report.copied_bytes} bytes, "
        f"{verbs[2]} {report.freed_bytes} bytes on hot, {report.error_count} errors"
        + "".join(f", {kind}={count}" for kind, count in report.errors.items() if count)
    )
    ratio = hot_fill_ratio(settings.hot)
    if ratio * 100 > settings.hot_fill_threshold_pct:
        progress(f"hot tier {ratio:.1%} full, above the {settings.hot_fill_threshold_pct:g} % threshold")
    if settings.metrics_file is not None and not settings.dry_run:
        last_success = now if report.error_count == 0 else previous_last_success(settings.metrics_file)
        write_atomically(settings.metrics_file, render_metrics(report, settings, now, last_success))
    return 1 if report.error_count else 0


if __name__ == "__main__":
    sys.exit(main())
