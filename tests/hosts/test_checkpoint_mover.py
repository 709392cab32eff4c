"""The checkpoint mover on tmp directories standing for the hot (NFS) and cold (Ceph) tiers."""

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hosts import CHECKPOINT_MOVER
from hosts import checkpoint_mover as tiering
from hosts.checkpoint_mover import Checkpoint, ErrorKind, TieringSettings

DAY_S = 86_400.0
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "optim/rank-0.pt")
Tree = dict[str, str]
"""Path relative to the tier root -> SHA-256 of the file (or of a symlink's target)."""


class Crash(BaseException):
    """Stands for the process being killed: nothing in the mover may catch it."""


def write_checkpoint(
    hot: Path, relative: str, *, complete: bool = True, age_s: float = 3_600.0, size: int = 64 * 1024
) -> None:
    root = hot / relative
    for index, shard in enumerate(SHARDS):
        path = root / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(hashlib.sha256(f"{relative}/{index}".encode()).digest() * (size // 32))
    if complete:
        (root / tiering.COMPLETE_MARKER).touch()
    set_age(root, age_s)


def set_age(path: Path, age_s: float) -> None:
    stamp = time.time() - age_s
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(Path(directory, name), (stamp, stamp), follow_symlinks=False)
    os.utime(path, (stamp, stamp), follow_symlinks=False)


def snapshot(root: Path) -> Tree:
    """The checkpoints' files under a tier root (the mover's lock folder, which it skips as a dot name, left out)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        if directory == str(root) and tiering.LOCK_DIR in dirs:
            dirs.remove(tiering.LOCK_DIR)
        for name in files:
            path = Path(directory, name)
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            found[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return found


def files_of(tree: Tree, checkpoint: str) -> Tree:
    return {path: digest for path, digest in tree.items() if path.startswith(f"{checkpoint}/") or path == checkpoint}


def assert_every_checkpoint_intact(originals: Tree, checkpoints: list[str], hot: Path, cold: Path) -> None:
    """Each checkpoint must be whole and unchanged in at least one tier."""
    hot_now, cold_now = snapshot(hot), snapshot(cold)
    for checkpoint in checkpoints:
        expected = files_of(originals, checkpoint)
        assert expected in (files_of(hot_now, checkpoint), files_of(cold_now, checkpoint)), checkpoint


def checkpoints_in(tree: Tree) -> list[str]:
    return sorted({"/".join(Path(path).parts[:3]) for path in tree})


def partials(cold: Path) -> list[Path]:
    return [p for p in cold.rglob("*") if tiering.PARTIAL_INFIX in p.name]


@pytest.fixture
def tiers(tmp_path: Path) -> tuple[Path, Path]:
    hot, cold = tmp_path / "hot", tmp_path / "cold"
    hot.mkdir()
    cold.mkdir()
    return hot, cold


def five_checkpoints(hot: Path, run: str = "team-a/llama-7b") -> list[str]:
    names = [f"{run}/step-{step:06d}" for step in (100, 200, 300, 400, 500)]
    for name in names:
        write_checkpoint(hot, name)
    return names


def settings(hot: Path, cold: Path, **overrides: object) -> TieringSettings:
    return TieringSettings(hot=hot, cold=cold, **overrides)  # type: ignore[arg-type]


def checkpoint(name: str, *, step: int | None, age_days: float, complete: bool = True) -> Checkpoint:
    return Checkpoint(relative=Path("t/r", name), step=step, mtime=NOW - age_days * DAY_S, complete=complete)


NOW = 1_800_000_000.0


# --- which checkpoints leave hot ---


@pytest.mark.parametrize(
    ("name", "step"),
    [("step-001200", 1200), ("checkpoint-1200", 1200), ("global_step1200", 1200), ("step-5.pt", 5), ("final", None)],
    ids=["reads zero-padded step", "reads checkpoint-N", "reads global_stepN", "ignores the extension", "none"],
)
def test_should_parse_the_step_number_from_the_checkpoint_name(name: str, step: int | None) -> None:
    assert tiering.parse_step(name) == step


@pytest.mark.parametrize(
    ("run", "keep", "moved"),
    [
        (
            [checkpoint(f"step-{s}", step=s, age_days=1) for s in (900, 1000, 1100, 1200)],
            3,
            ["step-900"],
        ),
        (
            # step 900 was written last (a restart from an older step), yet step 1200 is newer training.
            [checkpoint("step-1200", step=1200, age_days=2), checkpoint("step-900", step=900, age_days=1)],
            1,
            ["step-900"],
        ),
        (
            [checkpoint("final", step=None, age_days=1), checkpoint("step-5", step=5, age_days=2)],
            1,
            ["step-5"],
        ),
        (
            [checkpoint(f"step-{s}", step=s, age_days=age) for s, age in ((1, 10), (2, 3), (3, 2))],
            3,
            ["step-1"],
        ),
        (
            [checkpoint("step-1", step=1, age_days=1), checkpoint("step-2", step=2, age_days=1, complete=False)],
            0,
            ["step-1"],
        ),
    ],
    ids=[
        "should move what is beyond the newest N",
        "should order by step number before mtime",
        "should order by mtime when a name lacks a step",
        "should move a kept checkpoint older than archive-after-days",
        "should never select an incomplete checkpoint",
    ],
)
def test_select_for_cold(run: list[Checkpoint], keep: int, moved: list[str]) -> None:
    selected = tiering.select_for_cold(run, keep=keep, archive_after_days=7, now=NOW)
    assert [c.relative.name for c, _ in selected] == moved


# --- the normal case, idempotence, dry run ---


def test_should_keep_the_newest_three_hot_and_move_older_ones_byte_for_byte(
    tiers: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    originals = snapshot(hot)

    assert tiering.main(["--hot", str(hot), "--cold", str(cold), "--keep", "3"]) == 0

    assert checkpoints_in(snapshot(hot)) == names[2:]
    assert snapshot(cold) == {p: d for p, d in originals.items() if p.startswith(tuple(names[:2]))}
    copied = sum(len(SHARDS) * 64 * 1024 for _ in names[:2])
    assert (
        f"moved 2 checkpoints, copied {copied} bytes, freed {copied} bytes on hot, 0 errors" in capsys.readouterr().err
    )


def test_should_move_nothing_on_a_second_run(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    five_checkpoints(hot)
    tiering.run_tiering(settings(hot, cold))
    before = (snapshot(hot), snapshot(cold))

    report = tiering.run_tiering(settings(hot, cold))

    assert (report.moved, report.copied_bytes, report.freed_bytes, report.error_count) == (0, 0, 0, 0)
    assert (snapshot(hot), snapshot(cold)) == before


def test_should_change_nothing_in_a_dry_run(tiers: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    stale = cold / f"{names[0]}{tiering.PARTIAL_INFIX}1-dead"
    stale.mkdir(parents=True)
    set_age(stale, DAY_S)
    metrics = hot.parent / "checkpoints.prom"
    listing = sorted(str(p) for p in hot.parent.rglob("*"))
    before = (snapshot(hot), snapshot(cold))

    code = tiering.main(
        ["--hot", str(hot), "--cold", str(cold), "--keep", "0", "--dry-run", "--metrics-file", str(metrics),
         "--mover-name", "checkpoint-mover-0"]
    )

    assert code == 0
    assert (snapshot(hot), snapshot(cold)) == before
    assert sorted(str(p) for p in hot.parent.rglob("*")) == listing
    err = capsys.readouterr().err
    assert all(f"{name}: would move to cold" in err for name in names)
    assert "would remove stale partial" in err


def test_should_move_a_single_file_checkpoint_but_not_the_files_beside_it(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    run = hot / "team-b" / "bert"
    run.mkdir(parents=True)
    for name in ("checkpoint-100.pt", "checkpoint-200.pt", "latest", "config.json"):
        (run / name).write_bytes(name.encode() * 1000)
    set_age(run, 3_600)
    originals = snapshot(hot)

    report = tiering.run_tiering(settings(hot, cold, keep=1))

    assert report.moved == 1
    assert snapshot(cold) == {"team-b/bert/checkpoint-100.pt": originals["team-b/bert/checkpoint-100.pt"]}
    assert sorted(snapshot(hot)) == ["team-b/bert/checkpoint-200.pt", "team-b/bert/config.json", "team-b/bert/latest"]


def test_should_carry_symlinks_inside_a_checkpoint_as_symlinks(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    (hot / names[0] / "latest-shard").symlink_to("model-00001-of-00002.safetensors")
    set_age(hot / names[0], 3_600)
    originals = snapshot(hot)

    tiering.run_tiering(settings(hot, cold))

    assert (cold / names[0] / "latest-shard").readlink() == Path("model-00001-of-00002.safetensors")
    assert files_of(snapshot(cold), names[0]) == files_of(originals, names[0])


SPARSE_BYTES = 64 << 20
"""Long enough that writing the zeros shows in st_blocks (issue 41 found a 1 GB hole written whole)."""


def _holes(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.write(b"head")
        handle.seek(SPARSE_BYTES // 2)
        handle.write(b"middle" * 1000)
        handle.truncate(SPARSE_BYTES)  # and a hole at the end


def _written_zeros(path: Path) -> None:
    # As a file system that reports no holes (NFS before 4.2) shows a sparse file: zeros, read like any data.
    with open(path, "wb") as handle:
        handle.write(b"head" + bytes(SPARSE_BYTES - 8) + b"tail")


@pytest.mark.parametrize("make", [pytest.param(_holes, id="holes the file system reports"),
                                  pytest.param(_written_zeros, id="chunks of zeros it reads")])
def test_should_keep_a_sparse_files_holes_on_cold_and_every_byte(tiers: tuple[Path, Path],
                                                                   make: Callable[[Path], None]) -> None:
    hot, cold = tiers
    write_checkpoint(hot, "team-a/llama-7b/step-000100")
    make(hot / "team-a/llama-7b/step-000100/optim/sparse.pt")
    set_age(hot / "team-a/llama-7b/step-000100", 3_600)
    originals = snapshot(hot)

    assert tiering.main(["--hot", str(hot), "--cold", str(cold), "--keep", "0"]) == 0

    copy = (cold / "team-a/llama-7b/step-000100/optim/sparse.pt").stat()
    assert copy.st_size == SPARSE_BYTES and copy.st_blocks * 512 <= 1 << 20, f"{copy.st_blocks * 512} bytes on disk"
    assert snapshot(cold) == originals  # every byte, the holes' zeros included


# --- incomplete checkpoints ---


@pytest.mark.parametrize(
    ("complete", "age_s", "moved"),
    [(False, 10.0, False), (False, 600.0, True), (True, 10.0, True)],
    ids=[
        "should never touch a recently modified checkpoint without a marker",
        "should treat a checkpoint without a marker as complete once settled",
        "should trust the COMPLETE marker at once",
    ],
)
def test_completeness(tiers: tuple[Path, Path], complete: bool, age_s: float, moved: bool) -> None:
    hot, cold = tiers
    write_checkpoint(hot, "team-a/run/step-000001", complete=complete, age_s=age_s)
    originals = snapshot(hot)

    report = tiering.run_tiering(settings(hot, cold, keep=0, settle_s=300))

    assert report.moved == int(moved)
    assert snapshot(hot if not moved else cold) == originals


# --- crashes and resumption ---


def test_should_finish_a_move_interrupted_between_copy_and_delete_without_a_duplicate(
    tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    originals = snapshot(hot)

    def killed(*args: object) -> None:
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(tiering, "remove_copied", killed)
        with pytest.raises(Crash):
            tiering.run_tiering(settings(hot, cold))
    assert files_of(snapshot(cold), names[0]) == files_of(originals, names[0])

    report = tiering.run_tiering(settings(hot, cold))

    assert (report.moved, report.copied_bytes, report.error_count) == (2, len(SHARDS) * 64 * 1024, 0), "one copy only"
    assert snapshot(cold) == {p: d for p, d in originals.items() if p.startswith(tuple(names[:2]))}
    assert not (hot / names[0]).exists()
    assert partials(cold) == []


@pytest.mark.parametrize(
    ("partial_age_s", "left"),
    [(DAY_S, False), (5.0, True)],
    ids=["should remove a stale partial left by a crashed mover", "should leave a partial that is still being written"],
)
def test_should_resume_after_a_crash_mid_copy(tiers: tuple[Path, Path], partial_age_s: float, left: bool) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    originals = snapshot(hot)
    partial = cold / f"{names[0]}{tiering.PARTIAL_INFIX}4242-0badf00d"
    (partial / "optim").mkdir(parents=True)
    (partial / SHARDS[0]).write_bytes((hot / names[0] / SHARDS[0]).read_bytes()[:1000])
    set_age(partial, partial_age_s)

    report = tiering.run_tiering(settings(hot, cold, settle_s=300))

    assert (report.moved, report.error_count) == (2, 0)
    assert partial.exists() == left
    assert files_of(snapshot(cold), names[0]) == files_of(originals, names[0])
    assert_every_checkpoint_intact(originals, names, hot, cold)


# --- failures: the hot copy stays, the error is reported, the exit status says so ---


def test_should_never_delete_a_hot_checkpoint_whose_cold_copy_fails_its_checksum(
    tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    originals = snapshot(hot)
    real_hash = tiering.hash_fd

    def rot_then_hash(fd: int) -> tuple[int, str]:
        # The cold copy rots on its way to storage: the re-read from storage must catch it.
        path = fd_path(fd)
        if tiering.PARTIAL_INFIX in path and Path(names[0]).name in path and path.endswith(SHARDS[1]):
            os.pwrite(fd, bytes([os.pread(fd, 1, 0)[0] ^ 0xFF]), 0)
        return real_hash(fd)

    monkeypatch.setattr(tiering, "hash_fd", rot_then_hash)

    code = tiering.main(["--hot", str(hot), "--cold", str(cold)])

    assert code == 1
    assert files_of(snapshot(hot), names[0]) == files_of(originals, names[0])
    assert not (cold / names[0]).exists() and partials(cold) == []
    assert not (hot / names[1]).exists(), "the run should go on with the other checkpoints"
    assert f"{names[0]}: error (checksum), left on hot" in capsys.readouterr().err
    assert_every_checkpoint_intact(originals, names, hot, cold)


def test_should_never_delete_from_hot_when_a_cold_copy_already_there_differs(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    originals = snapshot(hot)
    shutil.copytree(hot / names[0], cold / names[0])
    (cold / names[0] / SHARDS[2]).write_bytes(b"someone else's optimizer state")

    report = tiering.run_tiering(settings(hot, cold))

    assert report.errors[ErrorKind.CHECKSUM] == 1
    assert files_of(snapshot(hot), names[0]) == files_of(originals, names[0])
    assert_every_checkpoint_intact(originals, names, hot, cold)


def test_should_never_finish_a_cold_copy_of_a_checkpoint_that_changed_while_copied(
    tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    real_copy = tiering.copy_file

    def copy_then_rewrite(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str,
                          entry: tiering.Entry) -> None:
        real_copy(src_dir_fd, src_name, dst_dir_fd, dst_name, entry)
        if names[0] in fd_path(src_dir_fd) and src_name == SHARDS[0]:
            (hot / names[0] / SHARDS[0]).write_bytes(b"rewritten by a late trainer")

    monkeypatch.setattr(tiering, "copy_file", copy_then_rewrite)
    report = tiering.run_tiering(settings(hot, cold))

    assert report.errors[ErrorKind.SOURCE_CHANGED] == 1
    assert (hot / names[0] / SHARDS[0]).read_bytes() == b"rewritten by a late trainer"
    assert not (cold / names[0]).exists() and partials(cold) == []


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def permission_denied_on(cold: Path) -> Callable[..., int]:
    real_open = os.open

    def guarded_open(path: str | Path, flags: int, *args: int, dir_fd: int | None = None, **kwargs: int) -> int:
        where = os.path.join(fd_path(dir_fd), path) if dir_fd is not None else str(path)
        if where.startswith(str(cold)) and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", where)
        return real_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

    return guarded_open


@pytest.mark.parametrize(
    ("break_cold", "kind", "count"),
    [
        (lambda cold, mp: mp.setattr(os, "open", permission_denied_on(cold)), ErrorKind.PERMISSION, 2),
        (lambda cold, mp: (cold / "team-a").write_text("a file where a directory belongs"), ErrorKind.IO, 1),
    ],
    ids=["should report a permission error per checkpoint", "should report a file in the way of a run once"],
)
def test_should_report_a_cold_write_error_and_keep_hot(
    tiers: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    break_cold: Callable[[Path, pytest.MonkeyPatch], object],
    kind: ErrorKind,
    count: int,
) -> None:
    hot, cold = tiers
    five_checkpoints(hot)
    originals = snapshot(hot)
    break_cold(cold, monkeypatch)

    report = tiering.run_tiering(settings(hot, cold))

    assert report.errors[kind] == count and report.error_count == count
    assert snapshot(hot) == originals


def test_should_stop_copying_when_the_cold_tier_is_full_and_leave_hot_untouched(
    tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot, "team-a/run-1") + five_checkpoints(hot, "team-b/run-2")
    originals = snapshot(hot)
    attempted: set[Path] = set()

    def full(src_dir_fd: int, src_name: str, dst_dir_fd: int, dst_name: str,
             entry: tiering.Entry) -> None:
        attempted.add(Path(fd_path(dst_dir_fd)))
        raise OSError(errno.ENOSPC, "No space left on device", dst_name)

    monkeypatch.setattr(tiering, "copy_file", full)

    code = tiering.main(["--hot", str(hot), "--cold", str(cold)])

    assert code == 1
    assert snapshot(hot) == originals
    assert len({p for p in attempted if tiering.PARTIAL_INFIX in p.name}) == 1, "only the first copy is tried"
    assert partials(cold) == []
    err = capsys.readouterr().err
    assert "error (cold_full)" in err and f"{names[6]}: not copied, the cold tier is full" in err
    assert_every_checkpoint_intact(originals, names, hot, cold)


# --- metrics ---


def promtool_check(metrics: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is absent: install the Debian package `prometheus` (the lead's Makefile does in CI)")
    return subprocess.run([promtool, "check", "metrics"], input=metrics.read_text(), capture_output=True, text=True)


MOVER = "checkpoint-mover-0"


def test_should_write_metrics_that_promtool_accepts(tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    hot, cold = tiers
    five_checkpoints(hot)
    metrics = hot.parent / "checkpoint_tiering.prom"
    assert tiering.main(["--hot", str(hot), "--cold", str(cold), "--metrics-file", str(metrics),
                         "--mover-name", MOVER]) == 0

    checked = promtool_check(metrics)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = metrics.read_text()
    # Every sample names its mover: the alerts judge each mover by its newest run, whichever node ran it.
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert {line.partition("{")[0] for line in samples} == set(tiering.METRICS)
    assert all(f'mover="{MOVER}"' in line for line in samples)
    assert f'gpucluster_checkpoint_last_run_moved_checkpoints{{mover="{MOVER}"}} 2\n' in text
    assert f'gpucluster_checkpoint_last_run_copied_bytes{{mover="{MOVER}"}} {2 * len(SHARDS) * 64 * 1024}\n' in text
    assert "# TYPE gpucluster_checkpoint_hot_fill_ratio gauge\n" in text
    assert f'gpucluster_checkpoint_last_run_errors{{kind="checksum",mover="{MOVER}"}} 0\n' in text
    assert f'gpucluster_checkpoint_hot_fill_threshold_ratio{{mover="{MOVER}"}} 0.85\n' in text


def test_should_refuse_a_metrics_file_without_the_movers_name(tiers: tuple[Path, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    hot, cold = tiers
    with pytest.raises(SystemExit) as exited:
        tiering.main(["--hot", str(hot), "--cold", str(cold), "--metrics-file", str(hot.parent / "m.prom")])
    assert exited.value.code == 2
    assert "--metrics-file needs --mover-name" in capsys.readouterr().err


def test_should_keep_the_last_success_time_through_a_failed_run(
    tiers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hot, cold = tiers
    five_checkpoints(hot)
    metrics = hot.parent / "checkpoint_tiering.prom"
    named = ["--metrics-file", str(metrics), "--mover-name", MOVER]
    tiering.main(["--hot", str(hot), "--cold", str(cold), "--keep", "4", *named])
    succeeded = tiering.previous_last_success(metrics)
    monkeypatch.setattr(os, "open", permission_denied_on(cold))

    assert tiering.main(["--hot", str(hot), "--cold", str(cold), "--keep", "0", *named]) == 1

    assert succeeded is not None and tiering.previous_last_success(metrics) == succeeded
    assert f'gpucluster_checkpoint_last_run_errors{{kind="permission",mover="{MOVER}"}} 4\n' in metrics.read_text()
    assert promtool_check(metrics).returncode == 0


# --- what it logs ---


def test_should_log_a_run_named_with_a_line_feed_on_one_escaped_line(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    forged = "checkpoint-tiering: summary: moved 0 checkpoints, copied 0 bytes, freed 0 bytes on hot, 0 errors"
    write_checkpoint(hot, f"team-a/run\n{forged}\r\x1b[2K\\/step-000100")

    done = subprocess.run([sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold), "--keep",
                           "0"], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith("checkpoint-tiering: ") for line in lines) and forged not in lines, lines
    assert f"checkpoint-tiering: team-a/run\\n{forged}\\r\\x1b[2K\\\\/step-000100: moved" in lines, lines


# --- runs where it is deployed: a file on its own, no project on the path ---


def test_should_run_as_a_plain_file_without_the_project(tiers: tuple[Path, Path]) -> None:
    hot, cold = tiers
    names = five_checkpoints(hot)
    script = hot.parent / "checkpoint_tiering.py"
    shutil.copy(CHECKPOINT_MOVER, script)

    # -I -S: isolated, without site-packages, so only the standard library can be imported.
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--hot", str(hot), "--cold", str(cold)],
        capture_output=True,
        text=True,
        cwd=hot.parent,
    )

    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (cold / "team-a" / "llama-7b").iterdir()) == [Path(n).name for n in names[:2]]
