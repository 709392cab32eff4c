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

1. copy into `<dest>.partial-<pid>-<random>` (root's, mode 0700, until it is complete), hashing (SHA-256) each
   byte as it is read from hot, then fsync, drop the cold copy from the page cache and re-read it, so the check
   reads storage; each file and directory keeps its hot owner, group and mode (set-uid/gid dropped), and its holes:
   what SEEK_DATA/SEEK_HOLE report as a hole is not read, and a 64 KiB block of zeros is not written (NFS before
   4.2 reports no holes), so a sparse file stays sparse on cold; the hash covers every byte, holes as zeros;
2. rename the partial to `<dest>` (atomic), fsync the directory;
3. delete from hot exactly what was copied and verified: a file or directory that appeared or changed after
   the scan (a slow rank's late shard) stays on hot with the COMPLETE marker, and the run reports it.

Team members write the hot tree while the mover, as root, works in it. So every name below a tier root is
resolved one component at a time through directory descriptors opened with O_NOFOLLOW, and each open is checked
against the inode the scan saw: a file or directory swapped for a symlink is never followed (the delete unlinks
the link), a swap is an error that leaves the checkpoint on hot, and the bytes copied are the bytes hashed,
read through the one descriptor, never more than the length the scan saw (a file that grows, or a FIFO or a
device swapped in, is refused). Devices, FIFOs and sockets inside a checkpoint are never opened: the checkpoint
stays on hot. Symlinks are carried as symlinks. Each team's cold archive, <cold>/<team>, is root's with the
group of the team's hot share and mode 2770: no other team can enter it. `--max-checkpoint-gib` and
`--max-run-gib` bound what is copied by apparent size (a sparse file counts at its length); `--deadline-s` stops
starting checkpoints, and the CronJob and the Slurm epilog kill a run that outlives its deadline.

One mover per hot tier root at a time, cluster-wide: the mover takes an exclusive flock on
`<hot>/.gpucluster/checkpoint-mover.lock`, a folder root's with mode 0700 (made, opened and checked by fstat through
descriptors, no link followed), so no user can open the lock, let alone hold it; while another mover holds it, the
run does nothing and exits 75. A dry run takes no lock.

A crash anywhere leaves either a partial (removed once nothing in it changed for `--settle-s`) or
a finished cold copy, which a later run verifies against hot and then deletes from hot: nothing is
copied twice or lost, and a second run moves nothing. A checksum mismatch, a copy error or a
permission error leaves the hot copy, is reported, and the run goes on with the other checkpoints;
a full cold tier (ENOSPC, EDQUOT) stops all further copying. Any error makes the exit status 1.

Metrics go, in Prometheus text format and replaced atomically, to `--metrics-file` for
node-exporter's textfile collector, every sample labelled `mover="<--mover-name>"`. A mover that
runs wherever it is scheduled leaves its last file on each node it ran on, so the monitoring stack
judges each mover by its newest run (`gpucluster_checkpoint_last_run_timestamp_seconds`), never by
a file a node kept: it alerts on that run's `gpucluster_checkpoint_hot_fill_ratio` over the
threshold (the default `--hot-fill-threshold-pct`, also exported as
`gpucluster_checkpoint_hot_fill_threshold_ratio`) and on its `gpucluster_checkpoint_last_run_errors`.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
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
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
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
    """A cold copy differs from hot in size, SHA-256, owner or mode."""
    SOURCE_CHANGED = "source_changed"
    """A hot file or directory changed, appeared or was swapped while it was copied or deleted."""
    COLD_FULL = "cold_full"
    """The cold tier is out of space or quota."""
    PERMISSION = "permission"
    """Refused by the file system, or the tier's lock folder or file is not root's alone (nothing is done)."""
    UNSUPPORTED = "unsupported"
    """A device, FIFO or socket inside a checkpoint: never opened, the checkpoint stays on hot."""
    TOO_LARGE = "too_large"
    """A checkpoint over --max-checkpoint-gib, or more than --max-run-gib left to copy in this run (apparent
    sizes: a sparse file counts at its full length)."""
    IO = "io"
    """Any other error reading hot or writing cold."""


class ChecksumMismatchError(Exception):
    pass


class SourceChangedError(Exception):
    pass


class UnsupportedFileError(Exception):
    pass


class TooLargeError(Exception):
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
    mover_name: str = ""
    """The label `mover` on every metric: which mover wrote the file, wherever it ran."""
    hot_fill_threshold_pct: float = DEFAULT_HOT_FILL_THRESHOLD_PCT
    max_checkpoint_bytes: int | None = None
    max_run_bytes: int | None = None
    deadline_s: float | None = None
    """s after which no further checkpoint is started; the one being copied finishes."""


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
class Entry:
    """One thing inside a checkpoint as the scan saw it through descriptors, never followed."""

    relative: str
    """Path inside the checkpoint ("" for the checkpoint itself)."""
    info: os.stat_result

    @property
    def name(self) -> str:
        return self.relative.rsplit("/", 1)[-1]

    @property
    def identity(self) -> tuple[int, int, int, int]:
        """What must not change between the scan, the copy and the delete."""
        return _identity(self.info)


@dataclass
class TieringReport:
    moved: int = 0
    copied_bytes: int = 0
    freed_bytes: int = 0
    errors: dict[ErrorKind, int] = field(default_factory=lambda: dict.fromkeys(ErrorKind, 0))

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def failed(self, where: Path, error: BaseException, outcome: str) -> bool:
        """Count an error and say what became of `where`; whether it means the cold tier is full."""
        kind = classify(error)
        self.errors[kind] += 1
        progress(f"{where}: error ({kind}), {outcome}: {error}")
        return kind is ErrorKind.COLD_FULL


def progress(message: str) -> None:
    """One log line. Messages carry names team members chose (a run directory named with a line feed once forged
    whole lines), so each is written on one line and unambiguous: a backslash doubled, anything unprintable (line
    feeds, carriage returns, terminal escapes, bytes that were not UTF-8) as its Python escape."""
    print(f"checkpoint-tiering: {one_line(message)}", file=sys.stderr, flush=True)


def one_line(text: str) -> str:
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text)


# --- descriptors: every name below a tier root is resolved one component at a time, never through a symlink ---

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file must not hang the open; fstat then refuses it.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
SWAPPED_ERRNOS = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENOENT})
"""What opening a name without following it raises when a user replaced or removed it since the scan."""


@contextmanager
def opened(name: str, dir_fd: int | None = None, flags: int = DIR_FLAGS) -> Iterator[int]:
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_same(name: str, dir_fd: int, entry: Entry, flags: int) -> int:
    """Open `name` without following it and check it is what the scan saw; a swap is SourceChangedError."""
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in SWAPPED_ERRNOS:
            raise SourceChangedError(f"{entry.relative or name}: replaced or removed on hot since the scan") from None
        raise
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != (entry.info.st_dev, entry.info.st_ino):
        os.close(fd)
        raise SourceChangedError(f"{entry.relative or name}: replaced on hot since the scan")
    return fd


def open_dir_unless_swapped(name: str, dir_fd: int) -> int | None:
    """The directory `name` opened without following it, or None when it is no longer a directory there."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno not in SWAPPED_ERRNOS:
            raise
        return None


def visible_names(dir_fd: int) -> list[str]:
    with os.scandir(dir_fd) as entries:
        return sorted(e.name for e in entries if not e.name.startswith("."))


def exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def child(relative: str, name: str) -> str:
    return f"{relative}/{name}" if relative else name


# --- planning: which checkpoints leave hot (no writes) ---


def parse_step(name: str) -> int | None:
    match = STEP_PATTERN.search(name)
    return int(match.group(1)) if match else None


def scan(parent_fd: int, name: str) -> list[Entry]:
    """Everything in a checkpoint, the checkpoint first, each directory before what it holds."""
    root = Entry("", os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
    if not stat.S_ISDIR(root.info.st_mode):
        return [root]
    found = [root]
    fd = open_same(name, parent_fd, root, DIR_FLAGS)
    try:
        _scan_into(fd, "", found)
    finally:
        os.close(fd)
    return found


def _scan_into(dir_fd: int, relative: str, found: list[Entry]) -> None:
    with os.scandir(dir_fd) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for item in entries:
        entry = Entry(child(relative, item.name), item.stat(follow_symlinks=False))
        found.append(entry)
        if stat.S_ISDIR(entry.info.st_mode):
            fd = open_same(item.name, dir_fd, entry, DIR_FLAGS)
            try:
                _scan_into(fd, entry.relative, found)
            finally:
                os.close(fd)


def find_runs(hot_fd: int) -> Iterator[tuple[str, str]]:
    """(team, run) of each run directory; symlinks are not run directories."""
    for team in visible_names(hot_fd):
        if not stat.S_ISDIR(os.stat(team, dir_fd=hot_fd, follow_symlinks=False).st_mode):
            continue
        try:
            with opened(team, hot_fd) as team_fd:
                runs = [r for r in visible_names(team_fd)
                        if stat.S_ISDIR(os.stat(r, dir_fd=team_fd, follow_symlinks=False).st_mode)]
        except OSError as error:
            progress(f"{team}: cannot be read, skipped: {error}")
            continue
        yield from ((team, run) for run in runs)


def find_checkpoints(run_fd: int, run: Path, settle_s: float, now: float) -> list[Checkpoint]:
    checkpoints = []
    for name in visible_names(run_fd):
        info, step = os.stat(name, dir_fd=run_fd, follow_symlinks=False), parse_step(name)
        is_dir = stat.S_ISDIR(info.st_mode)
        if not (is_dir or (stat.S_ISREG(info.st_mode) and step is not None)):
            continue
        entries = scan(run_fd, name)
        mtime = max(e.info.st_mtime for e in entries)
        marked = is_dir and any(e.relative == COMPLETE_MARKER and stat.S_ISREG(e.info.st_mode) for e in entries)
        checkpoints.append(
            Checkpoint(relative=run / name, step=step, mtime=mtime, complete=marked or now - mtime >= settle_s)
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


def checkpoint_bytes(entries: Sequence[Entry]) -> int:
    """Apparent bytes: a sparse file counts at its length, which is what a copy would write."""
    return sum(e.info.st_size for e in entries if stat.S_ISREG(e.info.st_mode))


def refuse_unsupported(entries: Sequence[Entry]) -> None:
    odd = [e.relative for e in entries if not (stat.S_ISDIR(e.info.st_mode) or stat.S_ISREG(e.info.st_mode)
                                               or stat.S_ISLNK(e.info.st_mode))]
    if odd:
        raise UnsupportedFileError(f"device, FIFO or socket inside the checkpoint, never opened: {', '.join(odd)}")


# --- copying and verifying one checkpoint ---


def write_all_at(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


ZERO_BLOCK = 64 << 10
"""64 KiB: the smallest run of zeros the cold copy leaves as a hole where the hot file system reports none."""
ZERO_CHUNK = memoryview(bytes(CHUNK_BYTES))
"""Zeros to hash in a hole's place and to compare a chunk against (calloc'd: the kernel's zero page until read)."""


def data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each stretch of the first `size` bytes that the file system says may hold data
    (lseek(2) SEEK_DATA, SEEK_HOLE); the whole file where it cannot tell (an NFS mount before 4.2 reports none)."""
    position = 0
    while position < size:
        try:
            start = os.lseek(fd, position, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as error:
            if error.errno == errno.ENXIO:  # no data past `position`: the rest is a hole
                return
            if error.errno != errno.EINVAL:
                raise
            start, end = position, size  # holes unsupported: all of it is data
        if start >= size:
            return
        yield start, min(end, size)
        position = end


def copy_sparse(source_fd: int, dest_fd: int, size: int, digest: hashlib._Hash) -> int:
    """Copy the first `size` bytes, hashing each in order (a hole as the zeros it reads as), and write only what is
    not zeros: a hole on hot (or a block of zeros, where the file system hides holes) stays a hole on cold.
    The bytes accounted for: fewer than `size` when the file got shorter."""
    view, done = chunk_buffer(), 0
    buffer = view.obj
    assert isinstance(buffer, bytearray)
    for start, end in data_extents(source_fd, size):
        hash_zeros(digest, start - done)
        done = start
        while done < end:
            count = os.preadv(source_fd, [view[: end - done]], done)
            if not count:
                return done
            digest.update(view[:count])
            write_unless_zeros(dest_fd, view[:count], buffer, done)
            done += count
    hash_zeros(digest, size - done)
    os.ftruncate(dest_fd, size)  # the length, with any trailing hole
    return size


def write_unless_zeros(fd: int, chunk: memoryview, buffer: bytearray, offset: int) -> None:
    """Write `chunk` (the start of `buffer`) at `offset`, each run of ZERO_BLOCK-sized blocks that are not all zeros
    in one write; the zero blocks are left unwritten, holes once the file is truncated to its length."""
    run_start: int | None = None
    for block in range(0, len(chunk), ZERO_BLOCK):
        # startswith at an offset is one memcmp, with no copy: a block costs about a hundredth of hashing it.
        zeros = buffer.startswith(ZERO_CHUNK[: min(ZERO_BLOCK, len(chunk) - block)], block)
        if zeros and run_start is not None:
            write_all_at(fd, chunk[run_start:block], offset + run_start)
            run_start = None
        elif not zeros and run_start is None:
            run_start = block
    if run_start is not None:
        write_all_at(fd, chunk[run_start:], offset + run_start)


def hash_zeros(digest: hashlib._Hash, count: int) -> None:
    while count > 0:
        digest.update(ZERO_CHUNK[: min(count, CHUNK_BYTES)])
        count -= CHUNK_BYTES


def chunk_buffer() -> memoryview:
    """This thread's reusable buffer: zeroing a fresh 8 MiB per file would cost more than the copy."""
    buffer: memoryview | None = getattr(THREAD_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = THREAD_BUFFERS.buffer = memoryview(bytearray(CHUNK_BYTES))
    return buffer


def hash_fd(fd: int) -> tuple[int, str]:
    """(bytes, SHA-256) of what storage holds: the page cache is dropped first so the read reaches it."""
    digest, view, size = hashlib.sha256(), chunk_buffer(), 0
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    while count := os.preadv(fd, [view], size):
        digest.update(view[:count])
        size += count
    return size, digest.hexdigest()


def kept_mode(info: os.stat_result) -> int:
    """The permission bits the cold copy keeps: set-uid and set-gid are dropped (root wrote the copy)."""
    return stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)


def check_metadata(info: os.stat_result, entry: Entry, where: str) -> None:
    if (info.st_uid, info.st_gid) != (entry.info.st_uid, entry.info.st_gid) or (
            not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) != kept_mode(entry.info)):
        raise ChecksumMismatchError(f"{where}: cold copy differs from hot in owner, group or mode")


def copy_file(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str, entry: Entry) -> None:
    """Copy one regular file through descriptors: exactly the length the scan saw, hashed as read, its holes kept,
    then written with the owner, group and mode of the hot file, durable, and re-read from storage to verify."""
    digest, where = hashlib.sha256(), entry.relative or src_name
    source_fd = open_same(src_name, src_dir_fd, entry, FILE_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(source_fd).st_mode):
            raise SourceChangedError(f"{where}: no longer a regular file")
        dest_fd = os.open(dst_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=dst_dir_fd)
        try:
            # Bounded by the scanned length: a file that grows (or never ends) is a changed file, not a longer copy.
            size = copy_sparse(source_fd, dest_fd, entry.info.st_size, digest)
            after = os.fstat(source_fd)
            if size != entry.info.st_size or os.pread(source_fd, 1, size) or (after.st_size, after.st_mtime_ns) != (
                    entry.info.st_size, entry.info.st_mtime_ns):
                raise SourceChangedError(f"{where}: changed on hot while it was copied")
            os.fchown(dest_fd, entry.info.st_uid, entry.info.st_gid)
            os.fchmod(dest_fd, kept_mode(entry.info))
            os.utime(dest_fd, ns=(entry.info.st_atime_ns, entry.info.st_mtime_ns))
            os.fsync(dest_fd)
            if hash_fd(dest_fd) != (size, digest.hexdigest()):
                raise ChecksumMismatchError(f"{where}: cold copy differs from hot in size or SHA-256")
            check_metadata(os.fstat(dest_fd), entry, where)
        finally:
            os.close(dest_fd)
    finally:
        os.close(source_fd)


def copy_symlink(src_dir_fd: int, dst_dir_fd: int, entry: Entry) -> None:
    """A symlink is carried as a symlink: its text, never what it points at."""
    target = os.readlink(entry.name, dir_fd=src_dir_fd)
    if os.stat(entry.name, dir_fd=src_dir_fd, follow_symlinks=False).st_ino != entry.info.st_ino:
        raise SourceChangedError(f"{entry.relative}: replaced on hot since the scan")
    os.symlink(target, entry.name, dir_fd=dst_dir_fd)
    os.chown(entry.name, entry.info.st_uid, entry.info.st_gid, dir_fd=dst_dir_fd, follow_symlinks=False)


def run_all(pool: ThreadPoolExecutor, tasks: list[Callable[[], None]]) -> None:
    """Run every task; the first error is raised only after all tasks ended."""
    futures = [pool.submit(task) for task in tasks]
    for future in futures:
        future.exception()
    for future in futures:
        future.result()


def copy_tree(src_fd: int, dst_fd: int, entries: Sequence[Entry], pool: ThreadPoolExecutor) -> None:
    """Copy what `entries` lists under the directory src_fd into dst_fd, every directory opened without following
    and checked against the scan; directories get the hot owner and mode once filled."""
    tasks: list[Callable[[], None]] = []
    opened_dirs: list[tuple[int, int, Entry]] = []
    fds = {"": (src_fd, dst_fd)}
    try:
        for entry in entries[1:]:
            parent = entry.relative.rpartition("/")[0]
            src_parent, dst_parent = fds[parent]
            mode = entry.info.st_mode
            if stat.S_ISDIR(mode):
                os.mkdir(entry.name, 0o700, dir_fd=dst_parent)
                src = open_same(entry.name, src_parent, entry, DIR_FLAGS)
                dst = os.open(entry.name, DIR_FLAGS, dir_fd=dst_parent)
                fds[entry.relative] = (src, dst)
                opened_dirs.append((src, dst, entry))
            elif stat.S_ISREG(mode):
                tasks.append(partial(copy_file, src_parent, entry.name, dst_parent, entry.name, entry))
            else:
                tasks.append(partial(copy_symlink, src_parent, dst_parent, entry))
        run_all(pool, tasks)
        for _, dst, entry in opened_dirs:
            set_directory_metadata(dst, entry)
            os.fsync(dst)
    finally:
        for src, dst, _ in opened_dirs:
            os.close(src)
            os.close(dst)


def set_directory_metadata(fd: int, entry: Entry) -> None:
    os.fchown(fd, entry.info.st_uid, entry.info.st_gid)
    os.fchmod(fd, kept_mode(entry.info))
    os.utime(fd, ns=(entry.info.st_atime_ns, entry.info.st_mtime_ns))


def ensure_unchanged(run_fd: int, name: str, entries: Sequence[Entry]) -> None:
    """Scan again under descriptors: the same things, none grown, changed, added or swapped."""
    again = scan(run_fd, name)
    if [(e.relative, e.identity) for e in again if e.relative] != [(e.relative, e.identity) for e in entries
                                                                    if e.relative]:
        raise SourceChangedError(f"{name}: changed on hot while it was copied")


def copy_checkpoint(hot_run_fd: int, cold_run_fd: int, name: str, entries: Sequence[Entry],
                    pool: ThreadPoolExecutor) -> bool:
    """Copy via a verified partial, private to root until it is complete, renamed into place; False if another
    mover got there first."""
    partial_name = f"{name}{PARTIAL_INFIX}{os.getpid()}-{secrets.token_hex(4)}"
    root = entries[0]
    try:
        if stat.S_ISDIR(root.info.st_mode):
            os.mkdir(partial_name, 0o700, dir_fd=cold_run_fd)
            with fd_of(open_same(name, hot_run_fd, root, DIR_FLAGS)) as src, opened(partial_name, cold_run_fd) as dst:
                if os.fstat(dst).st_uid != os.geteuid():
                    raise SourceChangedError(f"{partial_name}: replaced on cold while it was made")
                copy_tree(src, dst, entries, pool)
                ensure_unchanged(hot_run_fd, name, entries)
                set_directory_metadata(dst, root)
                os.fsync(dst)
        else:
            copy_file(hot_run_fd, name, cold_run_fd, partial_name, root)
            ensure_unchanged(hot_run_fd, name, entries)
        try:
            os.rename(partial_name, name, src_dir_fd=cold_run_fd, dst_dir_fd=cold_run_fd)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                raise
            remove_all(cold_run_fd, partial_name)
            return False
        os.fsync(cold_run_fd)
    except BaseException:
        with suppress(OSError):
            remove_all(cold_run_fd, partial_name)
        raise
    return True


def verify_on_cold(hot_run_fd: int, cold_run_fd: int, name: str, entries: Sequence[Entry]) -> None:
    """A cold copy a crashed mover finished: every hot thing has an identical cold one (content, owner, mode)."""
    cold = {e.relative: e for e in scan(cold_run_fd, name)}
    if set(cold) != {e.relative for e in entries}:
        raise ChecksumMismatchError(f"{name}: the cold copy holds other files than hot")
    with ExitStack() as stack:
        dirs = {"": (stack.enter_context(fd_of(open_same(name, hot_run_fd, entries[0], DIR_FLAGS))),
                     stack.enter_context(fd_of(open_same(name, cold_run_fd, cold[""], DIR_FLAGS))))
                if stat.S_ISDIR(entries[0].info.st_mode) else (hot_run_fd, cold_run_fd)}
        for entry in entries:
            there = cold[entry.relative]
            hot_dir, cold_dir = dirs[entry.relative.rpartition("/")[0]]
            own_name = entry.name if entry.relative else name
            if stat.S_IFMT(there.info.st_mode) != stat.S_IFMT(entry.info.st_mode):
                raise ChecksumMismatchError(f"{entry.relative or name}: a different kind of file on cold")
            check_metadata(there.info, entry, entry.relative or name)
            if stat.S_ISDIR(entry.info.st_mode) and entry.relative:
                dirs[entry.relative] = (stack.enter_context(fd_of(open_same(own_name, hot_dir, entry, DIR_FLAGS))),
                                        stack.enter_context(fd_of(open_same(own_name, cold_dir, there, DIR_FLAGS))))
            elif stat.S_ISLNK(entry.info.st_mode):
                if os.readlink(own_name, dir_fd=hot_dir) != os.readlink(own_name, dir_fd=cold_dir):
                    raise ChecksumMismatchError(f"{entry.relative}: the cold symlink differs")
            elif stat.S_ISREG(entry.info.st_mode):
                with fd_of(open_same(own_name, hot_dir, entry, FILE_FLAGS)) as hot_fd, \
                        fd_of(open_same(own_name, cold_dir, there, FILE_FLAGS)) as cold_fd:
                    hot_hash, cold_hash = hash_fd(hot_fd), hash_fd(cold_fd)
                if hot_hash != cold_hash:
                    raise ChecksumMismatchError(f"{entry.relative or name}: cold copy differs from hot in size or "
                                                "SHA-256")


@contextmanager
def fd_of(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def remove_copied(run_fd: int, name: str, entries: Sequence[Entry], pool: ThreadPoolExecutor) -> None:
    """Delete from hot exactly what was copied and verified, through descriptors: a name swapped for a symlink is
    unlinked, never followed, and anything the scan did not see (a late shard) stays, with its directories and the
    COMPLETE marker, and is reported. A directory's files are unlinked on the pool: an unlink waits on the file
    system (2.8 ms each on an ext4 mounted with discard, 0.5 ms with 8 at once), and the removal took as long as
    the copy."""
    root = entries[0]
    if not stat.S_ISDIR(root.info.st_mode):
        if _identity(os.stat(name, dir_fd=run_fd, follow_symlinks=False)) != root.identity:
            raise SourceChangedError(f"{name}: changed on hot after it was copied; left on hot")
        os.unlink(name, dir_fd=run_fd)
        return
    known = {e.relative: e.identity for e in entries}
    left: list[str] = []
    with fd_of(open_same(name, run_fd, root, DIR_FLAGS)) as fd:
        _remove_known(fd, "", known, left, pool)
        if not left:
            with suppress(FileNotFoundError):
                os.unlink(COMPLETE_MARKER, dir_fd=fd)
    if left:
        raise SourceChangedError(f"{name}: {len(left)} file(s) appeared or changed after the copy and stay on hot: "
                                 f"{', '.join(sorted(left)[:5])}")
    os.rmdir(name, dir_fd=run_fd)


def _remove_known(dir_fd: int, relative: str, known: dict[str, tuple[int, int, int, int]], left: list[str],
                  pool: ThreadPoolExecutor) -> None:
    def unlink_if_known(name: str, path: str) -> None:
        # Checked again right before the unlink, as when it ran inline: a file swapped since the scan stays.
        if known.get(path) == _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)):
            os.unlink(name, dir_fd=dir_fd)
        else:
            left.append(path)  # list.append is atomic: the pool's threads may append at once

    unlinks: list[Callable[[], None]] = []
    for name in sorted(os.listdir(dir_fd)):
        path = child(relative, name)
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            if path not in known:
                left.append(path)
                continue
            sub = open_dir_unless_swapped(name, dir_fd)
            if sub is None:
                left.append(path)
                continue
            with fd_of(sub):
                if os.fstat(sub).st_ino != info.st_ino:
                    left.append(path)
                    continue
                before = len(left)
                _remove_known(sub, path, known, left, pool)
            if len(left) == before:
                os.rmdir(name, dir_fd=dir_fd)
        elif path == COMPLETE_MARKER:
            continue  # last, once all else is gone: a half-deleted checkpoint is incomplete
        elif known.get(path) == _identity(info):
            unlinks.append(partial(unlink_if_known, name, path))
        else:
            left.append(path)
    run_all(pool, unlinks)  # before the caller closes dir_fd or removes the directory


def remove_all(parent_fd: int, name: str) -> None:
    """Delete a tree of our own making (a partial) through descriptors; symlinks are unlinked, never followed."""
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    fd = open_dir_unless_swapped(name, parent_fd)
    if fd is None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent_fd)  # swapped for a symlink since the stat: the link goes
        return
    with fd_of(fd):
        for entry in os.listdir(fd):
            remove_all(fd, entry)
    os.rmdir(name, dir_fd=parent_fd)


def remove_stale_partials(cold_run_fd: int, run: Path, settle_s: float, now: float, dry_run: bool) -> None:
    """Remove partials left by crashed movers; a partial still changing belongs to a running one."""
    for name in visible_names(cold_run_fd):
        if PARTIAL_INFIX in name and now - max(e.info.st_mtime for e in scan(cold_run_fd, name)) >= settle_s:
            progress(f"{'would remove' if dry_run else 'removing'} stale partial {run / name}")
            if not dry_run:
                remove_all(cold_run_fd, name)


TEAM_ARCHIVE_MODE = 0o2770
"""A team's cold archive: owner root, group that of the team's hot share, set-gid so what is archived inside keeps
the group; no other team enters it."""


def cold_run_dir(cold_fd: int, hot_fd: int, team: str, run: str) -> int:
    """The cold <team>/<run> directory, made or checked through descriptors: the team's archive closed to other
    teams, the run directory with the hot one's owner and mode."""
    team_info = os.stat(team, dir_fd=hot_fd, follow_symlinks=False)
    with suppress(FileExistsError):
        os.mkdir(team, 0o700, dir_fd=cold_fd)
    with opened(team, cold_fd) as team_fd:
        os.fchown(team_fd, 0, team_info.st_gid)
        os.fchmod(team_fd, TEAM_ARCHIVE_MODE)
        with opened(team, hot_fd) as hot_team_fd:
            run_info = os.stat(run, dir_fd=hot_team_fd, follow_symlinks=False)
        try:
            os.mkdir(run, 0o700, dir_fd=team_fd)
        except FileExistsError:
            return os.open(run, DIR_FLAGS, dir_fd=team_fd)
        run_fd = os.open(run, DIR_FLAGS, dir_fd=team_fd)
        os.fchown(run_fd, run_info.st_uid, run_info.st_gid)
        os.fchmod(run_fd, kept_mode(run_info))
        return run_fd


def existing_dir(cold_fd: int | None, team: str, run: str) -> int | None:
    """The cold <team>/<run> if it is there (a dry run makes nothing)."""
    if cold_fd is None:
        return None
    try:
        with opened(team, cold_fd) as team_fd:
            return os.open(run, DIR_FLAGS, dir_fd=team_fd)
    except FileNotFoundError:
        return None


def classify(error: BaseException) -> ErrorKind:
    if isinstance(error, ChecksumMismatchError):
        return ErrorKind.CHECKSUM
    if isinstance(error, SourceChangedError):
        return ErrorKind.SOURCE_CHANGED
    if isinstance(error, UnsupportedFileError):
        return ErrorKind.UNSUPPORTED
    if isinstance(error, TooLargeError):
        return ErrorKind.TOO_LARGE
    if isinstance(error, PermissionError | LockUnsafeError):
        return ErrorKind.PERMISSION
    if isinstance(error, OSError) and error.errno in COLD_FULL_ERRNOS:
        return ErrorKind.COLD_FULL
    return ErrorKind.IO


# --- the run ---

MOVE_ERRORS = (OSError, ChecksumMismatchError, SourceChangedError, UnsupportedFileError, TooLargeError)


@dataclass
class Budget:
    """What this run may still copy, and until when it may start another checkpoint."""

    bytes_left: int | None
    deadline: float | None

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def move_checkpoint(hot_run_fd: int, cold_run_fd: int, checkpoint: Checkpoint, pool: ThreadPoolExecutor,
                    settings: TieringSettings, budget: Budget, report: TieringReport) -> None:
    name = checkpoint.relative.name
    entries = scan(hot_run_fd, name)
    refuse_unsupported(entries)
    size = checkpoint_bytes(entries)
    copied = False
    if not exists_at(cold_run_fd, name):
        if settings.max_checkpoint_bytes is not None and size > settings.max_checkpoint_bytes:
            raise TooLargeError(f"{size} bytes, over the {settings.max_checkpoint_bytes} a checkpoint may have")
        if budget.bytes_left is not None and size > budget.bytes_left:
            raise TooLargeError(f"{size} bytes, over the {budget.bytes_left} this run may still copy")
        progress(f"{checkpoint.relative}: copying to cold")
        copied = copy_checkpoint(hot_run_fd, cold_run_fd, name, entries, pool)
        if budget.bytes_left is not None:
            budget.bytes_left -= size
    if not copied:
        progress(f"{checkpoint.relative}: already on cold, verifying before deleting from hot")
        verify_on_cold(hot_run_fd, cold_run_fd, name, entries)
    else:
        report.copied_bytes += size
    remove_copied(hot_run_fd, name, entries, pool)
    report.moved += 1
    report.freed_bytes += size
    progress(f"{checkpoint.relative}: moved")


def plan_run(settings: TieringSettings, hot_run_fd: int, cold_run_fd: int | None, run: Path, now: float,
             report: TieringReport) -> list[tuple[Checkpoint, str]]:
    """Scan one run directory and say what leaves hot; a run that cannot be read is reported and skipped."""
    try:
        if cold_run_fd is not None:
            remove_stale_partials(cold_run_fd, run, settings.settle_s, now, settings.dry_run)
        checkpoints = find_checkpoints(hot_run_fd, run, settings.settle_s, now)
    except (OSError, SourceChangedError) as error:
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
    budget = Budget(settings.max_run_bytes,
                    None if settings.deadline_s is None else time.monotonic() + settings.deadline_s)
    with ExitStack() as stack:
        hot_fd = stack.enter_context(opened(str(settings.hot)))
        if not settings.dry_run:
            settings.cold.mkdir(parents=True, exist_ok=True)
        cold_fd = stack.enter_context(opened(str(settings.cold))) if settings.cold.is_dir() else None
        pool = stack.enter_context(ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="checkpoint-copy"))
        for team, run in find_runs(hot_fd):
            relative = Path(team, run)
            if budget.expired():
                progress(f"{relative}: the run's deadline of {settings.deadline_s:g} s passed, left for the next run")
                continue
            try:
                with ExitStack() as run_stack:
                    team_fd = run_stack.enter_context(opened(team, hot_fd))
                    hot_run_fd = run_stack.enter_context(opened(run, team_fd))
                    cold_run_fd = cold_run_dir(cold_fd, hot_fd, team, run) if (
                        cold_fd is not None and not settings.dry_run) else existing_dir(cold_fd, team, run)
                    if cold_run_fd is not None:
                        run_stack.callback(os.close, cold_run_fd)
                    cold_full = move_run(settings, hot_run_fd, cold_run_fd, relative, now, pool, budget, report,
                                         cold_full)
            except OSError as error:
                cold_full = report.failed(relative, error, "run skipped") or cold_full
    return report


def move_run(settings: TieringSettings, hot_run_fd: int, cold_run_fd: int | None, run: Path, now: float,
             pool: ThreadPoolExecutor, budget: Budget, report: TieringReport, cold_full: bool) -> bool:
    """Move one run's checkpoints that leave hot; whether the cold tier is full."""
    for checkpoint, reason in plan_run(settings, hot_run_fd, cold_run_fd, run, now, report):
        name = checkpoint.relative.name
        if settings.dry_run or cold_run_fd is None:
            size = checkpoint_bytes(scan(hot_run_fd, name))
            report.moved += 1
            report.copied_bytes += size
            report.freed_bytes += size
            progress(f"{checkpoint.relative}: would move to cold ({reason})")
            continue
        if budget.expired():
            progress(f"{checkpoint.relative}: the run's deadline passed, left for the next run")
            continue
        if cold_full and not exists_at(cold_run_fd, name):
            progress(f"{checkpoint.relative}: not copied, the cold tier is full")
            continue
        try:
            move_checkpoint(hot_run_fd, cold_run_fd, checkpoint, pool, settings, budget, report)
        except MOVE_ERRORS as error:
            cold_full = report.failed(checkpoint.relative, error, "left on hot") or cold_full
    return cold_full


# --- metrics (Prometheus text format, for node-exporter's textfile collector) ---


def previous_last_success(metrics_file: Path) -> float | None:
    try:
        text = metrics_file.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.partition("{")[0] == LAST_SUCCESS_METRIC:
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

    mover = f'mover="{label_value(settings.mover_name)}"'

    def gauge(name: str, samples: Iterable[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {METRIC_PREFIX}{name} {GAUGES[name]}", f"# TYPE {METRIC_PREFIX}{name} gauge"])
        # repr is the shortest text that reads back as the same float; counts stay integers.
        lines.extend(f"{METRIC_PREFIX}{name}{{{labels}}} {value!r}" for labels, value in samples)

    gauge("last_run_moved_checkpoints", [(mover, report.moved)])
    gauge("last_run_copied_bytes", [(mover, report.copied_bytes)])
    gauge("last_run_freed_bytes", [(mover, report.freed_bytes)])
    gauge("last_run_errors", [(f'kind="{kind}",{mover}', count) for kind, count in report.errors.items()])
    gauge("last_run_timestamp_seconds", [(mover, now)])
    gauge("last_success_timestamp_seconds", [] if last_success is None else [(mover, last_success)])
    gauge("hot_fill_ratio", [(mover, hot_fill_ratio(settings.hot))])
    gauge("hot_fill_threshold_ratio", [(mover, settings.hot_fill_threshold_pct / 100)])
    return "\n".join(lines) + "\n"


def label_value(text: str) -> str:
    """A label value in the text format: backslash, double quote and line feed escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
    parser.add_argument("--mover-name", default="",
                        help="with --metrics-file: the mover's name, label `mover` on every metric")
    parser.add_argument("--hot-fill-threshold-pct", type=non_negative(float), default=DEFAULT_HOT_FILL_THRESHOLD_PCT)
    parser.add_argument("--max-checkpoint-gib", type=non_negative(float),
                        help="refuse a checkpoint whose files' apparent sizes add up to more")
    parser.add_argument("--max-run-gib", type=non_negative(float), help="copy at most this much in one run")
    parser.add_argument("--deadline-s", type=non_negative(float),
                        help="start no checkpoint after this many seconds; the rest waits for the next run")
    args = parser.parse_args(argv)
    if not args.hot.is_dir():
        parser.error(f"--hot {args.hot}: not a directory")
    if args.metrics_file is not None and not args.mover_name:
        parser.error("--metrics-file needs --mover-name: the alerts tell movers apart by it, not by the node")
    return TieringSettings(
        hot=args.hot,
        cold=args.cold,
        keep=int(args.keep),
        archive_after_days=args.archive_after_days,
        settle_s=args.settle_s,
        dry_run=args.dry_run,
        metrics_file=args.metrics_file,
        mover_name=args.mover_name,
        hot_fill_threshold_pct=args.hot_fill_threshold_pct,
        max_checkpoint_bytes=None if args.max_checkpoint_gib is None else int(args.max_checkpoint_gib * 2**30),
        max_run_bytes=None if args.max_run_gib is None else int(args.max_run_gib * 2**30),
        deadline_s=args.deadline_s,
    )


# --- the tier's lock: one mover per hot tier root at a time, cluster-wide ---

LOCK_DIR = ".gpucluster"
"""In the hot tier root: root's, mode 0700. The lock file lives inside, so a user cannot open it, let alone hold a
lock on it (a user's shared lock on a readable lock file once stopped every mover of the server)."""
LOCK_FILE = "checkpoint-mover.lock"
LOCK_HELD_EXIT = 75
"""EX_TEMPFAIL (sysexits.h): another mover holds this tier's lock; the epilog logs it, the next CronJob run retries."""


class LockUnsafeError(Exception):
    """The lock's folder or file is not root's alone: a link, another owner, or open to group or others."""


def root_only(fd: int, where: Path, kind: Callable[[int], bool], what: str) -> None:
    """Refuse a lock folder or file that someone else could have made, replaced or opened."""
    info = os.fstat(fd)
    if not kind(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise LockUnsafeError(
            f"{where}: must be a {what} owned by uid {os.geteuid()} with no group or other access (it is uid "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); remove it and the next run makes it")


@contextmanager
def tier_lock(hot: Path) -> Iterator[bool]:
    """Whether this mover holds the exclusive lock of the tier root `hot`, for as long as the block runs. The folder
    and file are made and opened through descriptors, no link followed, and checked by fstat on what was opened.
    flock reaches the server on NFSv4, so movers on different nodes exclude each other."""
    with opened(str(hot)) as hot_fd:
        with suppress(FileExistsError):
            os.mkdir(LOCK_DIR, 0o700, dir_fd=hot_fd)
        folder = hot / LOCK_DIR
        try:
            dir_fd = os.open(LOCK_DIR, DIR_FLAGS, dir_fd=hot_fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise LockUnsafeError(f"{folder}: a symlink or a file, not the mover's lock folder; remove it "
                                      "and the next run makes it") from None
            raise
    with fd_of(dir_fd):
        root_only(dir_fd, folder, stat.S_ISDIR, "folder")
        try:
            lock_fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                              dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise LockUnsafeError(f"{folder / LOCK_FILE}: a symlink; remove it and the next run makes the "
                                      "lock file") from None
            raise
    with fd_of(lock_fd):
        root_only(lock_fd, folder / LOCK_FILE, stat.S_ISREG, "regular file")
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    if settings.dry_run:  # changes nothing, so needs no lock, and makes none
        return finish(settings, run_tiering(settings))
    with ExitStack() as lock:
        try:
            held = lock.enter_context(tier_lock(settings.hot))
        except (LockUnsafeError, OSError) as error:
            # Counted, so the metrics (and CheckpointMoverFailing) say so, not only the log.
            report = TieringReport()
            report.failed(settings.hot / LOCK_DIR, error, "cannot take the tier's lock, nothing done")
            return finish(settings, report)
        if not held:
            progress(f"{settings.hot / LOCK_DIR / LOCK_FILE}: held by another mover, nothing done")
            return LOCK_HELD_EXIT
        return finish(settings, run_tiering(settings))


def finish(settings: TieringSettings, report: TieringReport) -> int:
    """Say what the run did, write its metrics; the exit status."""
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
