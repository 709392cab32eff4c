"""The mover, run as root, against a team member who races it from a separate unprivileged process.

Each attacker is a forked process that drops to an unprivileged uid before it touches anything, watches what the
member may see (its hot tree, its team's cold archive) for the moment the mover is at work, and then strikes once:
swaps a directory or a file in its own hot tree for a symlink, a FIFO or a late shard. Each test counts the rounds
in which the member struck while the mover ran and those in which the attack got through (another team's data
deleted, a root-only file in the archive, a mover that never ends, a shard lost), and checks that no checkpoint
byte was lost. GPUCLUSTER_ATTACK_ROUNDS sets the rounds: 100 in `make test` (the member strikes mid-run in every one
of them here), more for a longer hunt (earlier sessions ran 200).
"""

import fcntl
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components.storage.tiers import mover_cronjob
from hosts import CHECKPOINT_MOVER
from hosts import checkpoint_mover as tiering
from hosts.checkpoint_mover import ErrorKind, TieringSettings
from tests.builders import parse, prod_values
from tests.harness.figures import FIGURES

ATTACKER = 65534
"""nobody/nogroup on Debian: a team member with no privilege."""
OTHER_MEMBER = 65533
ROUNDS = int(os.environ.get("GPUCLUSTER_ATTACK_ROUNDS", "100"))
SHARD = 64 * 1024
SECRET = (b"root-only: the munge key " * (SHARD // 24 + 1))[:SHARD]
"""As long as the shard it stands in for, so sizes match once the shard is put back."""
SUBDIRS = 16
PARTS = 4
"""Small files beside each rank: deleting them takes long enough for a member to act in the middle."""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the mover runs as root; the attacker drops from root")


@pytest.fixture
def arena() -> Iterator[Path]:
    """A directory every uid can traverse (pytest's own tmp is root's 0700)."""
    base = Path(tempfile.mkdtemp(prefix="mover-attack-", dir="/tmp"))
    base.chmod(0o755)
    records = base / "strikes"
    records.mkdir()
    os.chown(records, ATTACKER, ATTACKER)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)


def owned_tree(root: Path, uid: int = ATTACKER) -> None:
    for directory, dirs, files in os.walk(root):
        os.chown(directory, uid, uid)
        for name in dirs + files:
            os.chown(os.path.join(directory, name), uid, uid, follow_symlinks=False)


def make_checkpoint(hot: Path, marker: bool = True) -> Path:
    """hot/team-a/run/step-000001 (old, beyond keep 0), the member's: a shard and SUBDIRS directories of ranks."""
    checkpoint = hot / "team-a" / "run" / "step-000001"
    for i in range(SUBDIRS):
        sub = checkpoint / f"sub-{i:02d}"
        sub.mkdir(parents=True)
        (sub / f"rank-{i}.pt").write_bytes(hashlib.sha256(b"%d" % i).digest() * (SHARD // 32))
        for part in range(PARTS):
            (sub / f"rank-{i}-part-{part}.pt").write_bytes(b"%d/%d" % (i, part))
    (checkpoint / "shard.pt").write_bytes(b"w" * SHARD)
    if marker:
        (checkpoint / tiering.COMPLETE_MARKER).touch()
    owned_tree(hot / "team-a")
    return checkpoint


def contents(root: Path) -> dict[str, bytes]:
    """Every regular file's bytes under root, by name (wherever a swap left it)."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                found[name] = path.read_bytes()
    return found


class Stopped(BaseException):
    """Raised in the attacker by SIGTERM, wherever it is."""


def _stop(*_: object) -> None:
    raise Stopped


class Attacker:
    """A forked process, unprivileged before its first step, that polls `trigger` and strikes once when it holds,
    leaving `record` behind so that the test can count the rounds in which it struck while the mover ran."""

    def __init__(self, trigger: Callable[[], bool], strike: Callable[[], None], record: Path) -> None:
        self.record = record
        self.pid = os.fork()
        if self.pid == 0:  # the attacker: never returns into pytest
            try:
                signal.signal(signal.SIGTERM, _stop)
                os.setgroups([])
                os.setgid(ATTACKER)
                os.setuid(ATTACKER)
                deadline = time.monotonic() + 60  # bounded even if the test dies
                while time.monotonic() < deadline and not self._struck(trigger, strike):
                    pass
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                os._exit(0)

    def _struck(self, trigger: Callable[[], bool], strike: Callable[[], None]) -> bool:
        try:
            if not trigger():
                return False
        except OSError:
            return False
        self.record.touch()  # before the strike, which may still be at work when the mover ends
        try:
            strike()
        except OSError:
            self.record.unlink()
            return False
        return True

    def stop(self) -> bool:
        """Stop it; whether it struck."""
        os.kill(self.pid, signal.SIGTERM)
        os.waitpid(self.pid, 0)
        return self.record.exists()


def appeared(directory: Path, infix: str) -> bool:
    """Whether `directory` (the team's cold run directory, which the member may list) holds a name with `infix`."""
    return directory.is_dir() and any(infix in name for name in os.listdir(directory))


def replace_with(path: Path, replacement: Callable[[Path], None]) -> None:
    """Move the real thing aside and put something else in its place."""
    os.rename(path, path.with_name(path.name + ".real"))
    replacement(path)


def settings(hot: Path, cold: Path, settle_s: float = 3600.0, max_checkpoint_bytes: int | None = None,
             max_run_bytes: int | None = None) -> TieringSettings:
    return TieringSettings(hot, cold, keep=0, settle_s=settle_s, max_checkpoint_bytes=max_checkpoint_bytes,
                           max_run_bytes=max_run_bytes)


def round_tiers(arena: Path, round_: int) -> tuple[Path, Path, Path]:
    """Fresh hot and cold tiers for a round (the last round's removed, links unfollowed), and where its attacker
    records a strike."""
    for old in arena.glob("[hc]o[tl]*"):
        shutil.rmtree(old)
    hot, cold = arena / f"hot-{round_}", arena / f"cold-{round_}"
    hot.mkdir(mode=0o755)
    cold.mkdir(mode=0o755)
    return hot, cold, arena / "strikes" / str(round_)


@pytest.mark.expected_s(75)
def test_should_never_delete_another_teams_data_through_a_swapped_directory(arena: Path) -> None:
    victim = arena / "team-b-share"
    victim.mkdir()
    succeeded, struck = 0, 0
    for round_ in range(ROUNDS):
        for i in range(4):
            (victim / f"weights-{i}.pt").write_bytes(b"team b's")
        hot, cold, record = round_tiers(arena, round_)
        checkpoint = make_checkpoint(hot)
        originals = contents(checkpoint)
        ranks = [checkpoint / f"sub-{i:02d}" / f"rank-{i}.pt" for i in range(SUBDIRS)]

        def mid_delete(ranks: list[Path] = ranks) -> bool:
            return not all(rank.exists() for rank in ranks)

        def link_the_rest(ranks: list[Path] = ranks) -> None:
            # The delete walks in the directory's order: every directory it has not reached becomes a link.
            for rank in ranks:
                if rank.exists():
                    replace_with(rank.parent, lambda p: os.symlink(victim, p))

        attacker = Attacker(mid_delete, link_the_rest, record)
        try:
            tiering.run_tiering(settings(hot, cold))
        finally:
            struck += attacker.stop()
        succeeded += len(list(victim.iterdir())) < 4
        assert {**contents(cold), **contents(hot)}.items() >= originals.items(), f"round {round_}: data lost"
    FIGURES.append(f"delete through swapped directories: the member struck mid-delete in {struck} of {ROUNDS} "
                   f"rounds, {succeeded} deleted team b's files")
    assert succeeded == 0 and struck > 0


@pytest.mark.expected_s(67)
def test_should_never_copy_a_file_the_member_cannot_read_into_the_archive(arena: Path) -> None:
    secret = arena / "munge.key"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    succeeded, struck = 0, 0
    for round_ in range(ROUNDS):
        hot, cold, record = round_tiers(arena, round_)
        checkpoint = make_checkpoint(hot)
        cold_run, shard = cold / "team-a" / "run", checkpoint / "shard.pt"

        def copy_started(cold_run: Path = cold_run) -> bool:
            return appeared(cold_run, tiering.PARTIAL_INFIX)

        def link_then_put_back(shard: Path = shard, cold_run: Path = cold_run) -> None:
            # The shard becomes a link to a root-only file of the same size; once the member sees it copied (or
            # after 2 s), the real shard goes back, so sizes and times match again.
            replace_with(shard, lambda p: os.symlink(secret, p))
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                try:
                    if any(os.stat(cold_run / n / "shard.pt").st_size == SHARD for n in os.listdir(cold_run)):
                        break
                except OSError:
                    continue
            os.rename(shard.with_name("shard.pt.real"), shard)

        attacker = Attacker(copy_started, link_then_put_back, record)
        try:
            tiering.run_tiering(settings(hot, cold))
        finally:
            struck += attacker.stop()
        succeeded += any(SECRET in data for data in contents(cold).values())
    FIGURES.append(f"copy through a swapped file: the member struck mid-copy in {struck} of {ROUNDS} rounds, "
                   f"{succeeded} put the root-only file in the archive")
    assert succeeded == 0 and struck > 0


def read_as(uid: int, path: Path) -> bool:
    """Whether a process of `uid` (in no group but its own) can read `path`."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with open(path, "rb") as handle:
                handle.read(1)
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_should_keep_owner_group_and_mode_and_close_each_teams_archive(arena: Path) -> None:
    hot, cold, _ = round_tiers(arena, 0)
    checkpoint = make_checkpoint(hot)
    (checkpoint / "shard.pt").chmod(0o600)
    (hot / "team-a").chmod(0o750)
    before = {p.relative_to(hot): p.lstat() for p in (hot / "team-a" / "run").rglob("*")}

    report = tiering.run_tiering(settings(hot, cold))

    assert (report.moved, report.error_count) == (1, 0)
    for relative, info in before.items():
        copy = (cold / relative).lstat()
        assert (copy.st_uid, copy.st_gid, stat.S_IMODE(copy.st_mode)) == (
            info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)), relative
    archive = (cold / "team-a").lstat()
    assert (archive.st_uid, archive.st_gid, stat.S_IMODE(archive.st_mode)) == (0, ATTACKER, 0o2770)
    shard = cold / "team-a" / "run" / "step-000001" / "shard.pt"
    assert read_as(ATTACKER, shard), "the owner reads their own 0600 archive"
    assert not read_as(OTHER_MEMBER, shard) and not read_as(OTHER_MEMBER, shard.with_name("sub-00") / "rank-0.pt")


def test_should_refuse_a_sparse_checkpoint_by_its_apparent_size(arena: Path) -> None:
    hot, cold, _ = round_tiers(arena, 0)
    checkpoint = make_checkpoint(hot)
    with open(checkpoint / "sub-00" / "huge.pt", "wb") as sparse:
        sparse.truncate(1 << 40)  # 1 TiB on a few kB of disk
    owned_tree(hot / "team-a")

    report = tiering.run_tiering(settings(hot, cold, max_checkpoint_bytes=1 << 30))

    assert report.errors[ErrorKind.TOO_LARGE] == 1 and report.moved == 0
    assert contents(cold) == {} and (checkpoint / "sub-00" / "huge.pt").stat().st_size == 1 << 40


def test_should_stop_when_a_run_would_copy_more_than_its_budget(arena: Path) -> None:
    hot, cold, _ = round_tiers(arena, 0)
    make_checkpoint(hot).rename(hot / "team-a" / "run" / "step-000002")
    make_checkpoint(hot)
    size = tiering.checkpoint_bytes(tiering.scan(os.open(hot / "team-a" / "run", os.O_RDONLY), "step-000002"))

    report = tiering.run_tiering(settings(hot, cold, max_run_bytes=size * 3 // 2))

    assert (report.moved, report.errors[ErrorKind.TOO_LARGE]) == (1, 1)


@pytest.mark.parametrize("replacement", [
    pytest.param(os.mkfifo, id="a FIFO that no one writes"),
    pytest.param(lambda p: os.symlink("/dev/zero", p), id="a symlink to an endless device"),
])
@pytest.mark.expected_s(25)
def test_should_end_and_copy_nothing_endless_when_a_shard_is_swapped(arena: Path,
                                                                     replacement: Callable[[Path], None]) -> None:
    runs = max(1, ROUNDS // 4)  # each round starts the mover as its own process, as the CronJob does
    hung, oversized, struck = 0, 0, 0
    for round_ in range(runs):
        hot, cold, record = round_tiers(arena, round_)
        checkpoint = make_checkpoint(hot)
        cold_run = cold / "team-a" / "run"

        def copy_started(cold_run: Path = cold_run) -> bool:
            return appeared(cold_run, tiering.PARTIAL_INFIX)

        def swap_in(shard: Path = checkpoint / "shard.pt") -> None:
            replace_with(shard, replacement)

        attacker = Attacker(copy_started, swap_in, record)
        try:
            subprocess.run([sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold),
                            "--keep", "0"], capture_output=True, timeout=20)
        except subprocess.TimeoutExpired:
            hung += 1
        finally:
            struck += attacker.stop()
        oversized += any(len(data) > SHARD for data in contents(cold).values())
    FIGURES.append(f"endless shard: the member struck mid-copy in {struck} of {runs} mover runs; {hung} hung, "
                   f"{oversized} copied more than the shard")
    assert (hung, oversized) == (0, 0) and struck > 0


@pytest.mark.expected_s(80)
def test_should_never_delete_a_shard_a_slow_rank_writes_late(arena: Path) -> None:
    lost, struck = 0, 0
    for round_ in range(ROUNDS):
        hot, cold, record = round_tiers(arena, round_)
        checkpoint = make_checkpoint(hot, marker=False)
        cold_run = cold / "team-a" / "run"

        def copied(cold_run: Path = cold_run) -> bool:
            return cold_run.is_dir() and "step-000001" in os.listdir(cold_run)

        written = arena / "strikes" / f"written-{round_}"

        def late_shard(checkpoint: Path = checkpoint, written: Path = written) -> None:
            (checkpoint / "late-0.pt").write_bytes(b"late" * 64)
            written.touch()  # the shard is whole: from here on it must not be lost

        # Settled at once, as a checkpoint without a marker counts after --settle-s idle seconds; the slow rank
        # writes its shard just as the copy is renamed into place on cold.
        attacker = Attacker(copied, late_shard, record)
        try:
            tiering.run_tiering(settings(hot, cold, settle_s=0.0))
        finally:
            struck += attacker.stop()
        if written.exists():
            lost += {**contents(cold), **contents(hot)}.get("late-0.pt") != b"late" * 64
    FIGURES.append(f"late shards: written as the copy was renamed into place in {struck} of {ROUNDS} rounds, "
                   f"{lost} lost")
    assert lost == 0 and struck > 0


def hold_shared_locks(root: Path, held: Path) -> None:
    """As the member: a shared lock on every file under `root` it can open, held until stopped; `held` counts them."""
    count = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NONBLOCK)
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                continue
            count += 1  # the descriptor stays open, and the lock with it
    held.write_text(str(count))


def cronjob_mover(hot: Path, cold: Path, metrics: Path) -> list[str]:
    """The mover CronJob's command as the stack renders it, its container paths mapped to the test's tiers."""
    site = parse(prod_values())
    job = mover_cronjob(site, site.storage.nfs_hot.servers[0], 0)
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    here = {"python3": sys.executable, "/mover/checkpoint_tiering.py": str(CHECKPOINT_MOVER), "/hot": str(hot),
            "/cold": str(cold), "/metrics": str(metrics)}
    command = []
    for arg in container["command"]:
        mount = next((m for m in here if arg == m or arg.startswith(f"{m}/")), None)
        command.append(arg if mount is None else here[mount] + arg[len(mount):])
    return command


def old_checkpoint(hot: Path, name: str) -> Path:
    """A complete checkpoint of the member's, older than archive_after_days, so the mover takes it at once."""
    checkpoint = hot / "team-a" / "run" / name
    checkpoint.mkdir(parents=True)
    (checkpoint / "shard.pt").write_bytes(b"w" * SHARD)
    (checkpoint / tiering.COMPLETE_MARKER).touch()
    owned_tree(hot / "team-a")
    stamp = time.time() - 30 * 86_400
    for path in (checkpoint / "shard.pt", checkpoint / tiering.COMPLETE_MARKER, checkpoint):
        os.utime(path, (stamp, stamp))
    return checkpoint


def test_should_move_while_a_member_holds_a_shared_lock_on_every_file_it_can_open(arena: Path) -> None:
    # Issue 41: flock(1) made <export>/.checkpoint-mover.lock readable by all; a member's shared lock on it stopped
    # the CronJob's mover and the epilog's (the same lock) for as long as the member liked.
    hot, cold, _ = round_tiers(arena, 0)
    command = cronjob_mover(hot, cold, arena)
    old_checkpoint(hot, "step-000001")
    first = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert first.returncode == 0, first.stderr
    second = old_checkpoint(hot, "step-000002")
    held = arena / "strikes" / "held"
    attacker = Attacker(lambda: True, lambda: hold_shared_locks(hot, held), arena / "strikes" / "locks")
    try:
        deadline = time.monotonic() + 10
        while not held.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    finally:
        attacker.stop()
    FIGURES.append(f"mover's lock: the member held shared locks on {held.read_text()} files of the hot tier it could "
                   f"open; the CronJob's next run exited {result.returncode}")
    assert (result.returncode, second.exists()) == (0, False), result.stderr
    assert (cold / "team-a" / "run" / "step-000002" / "shard.pt").read_bytes() == b"w" * SHARD
    lock_dir = os.stat(hot / tiering.LOCK_DIR)
    assert (lock_dir.st_uid, stat.S_IMODE(lock_dir.st_mode)) == (0, 0o700)


@pytest.mark.parametrize("plant", [
    pytest.param(lambda folder: folder.symlink_to("/tmp"), id="the lock folder a symlink"),
    pytest.param(lambda folder: (folder.mkdir(mode=0o777), folder.chmod(0o777)), id="the lock folder open to all"),
    pytest.param(lambda folder: (folder.mkdir(mode=0o700), os.chown(folder, ATTACKER, ATTACKER)),
                 id="the lock folder a member's"),
    pytest.param(lambda folder: (folder.mkdir(mode=0o700), os.symlink("/etc/passwd", folder / tiering.LOCK_FILE)),
                 id="the lock file a symlink"),
])
def test_should_refuse_a_lock_not_roots_alone_naming_it_and_move_nothing(arena: Path,
                                                                        plant: Callable[[Path], object]) -> None:
    hot, cold, _ = round_tiers(arena, 0)
    checkpoint = make_checkpoint(hot)
    plant(hot / tiering.LOCK_DIR)
    metrics = arena / "mover.prom"
    result = subprocess.run([sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold),
                             "--keep", "0", "--settle-s", "0", "--metrics-file", str(metrics), "--mover-name", "m"],
                            capture_output=True, text=True, timeout=20)
    assert result.returncode == 1 and f"{hot / tiering.LOCK_DIR}" in result.stderr, result.stderr
    assert checkpoint.exists() and not (cold / "team-a").exists()
    # Counted, so CheckpointMoverFailing fires on it, not only logged.
    assert 'gpucluster_checkpoint_last_run_errors{kind="permission",mover="m"} 1\n' in metrics.read_text()


def test_should_exit_75_and_move_nothing_while_another_mover_holds_the_lock(arena: Path) -> None:
    hot, cold, _ = round_tiers(arena, 0)
    checkpoint = make_checkpoint(hot)
    with tiering.tier_lock(hot) as held:
        assert held
        result = subprocess.run([sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold),
                                 "--keep", "0"], capture_output=True, text=True, timeout=20)
    assert (result.returncode, checkpoint.exists()) == (tiering.LOCK_HELD_EXIT, True), result.stderr
    assert "held by another mover" in result.stderr
