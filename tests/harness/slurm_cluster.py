"""A real Slurm 22.05 cluster on 127.0.0.1 from the rendered prod configuration, shared by the tests that need one.

One session cluster: munged, a private MariaDB, slurmdbd, slurmctld and one `slurmd -N <node>` per node in
slurm.conf, all from `render_*(prod site, LoopbackOverlay)`, with the accounting commands applied by sacctmgr.
Every daemon is a child process stopped by its PID in the finalizer; every client call has a timeout; every wait
is bounded. See ../shared/notes/slurm-on-loopback.md. tests/conftest.py makes the fixtures visible everywhere;
a module using them marks itself with `slurm_marks()`.
"""

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.slurm.conf import (
    LoopbackOverlay,
    accounting_script,
    render_cgroup_conf,
    render_epilog,
    render_gres_conf,
    render_prolog,
    render_slurm_conf,
    render_slurmdbd_conf,
    slurm_groups,
    slurm_nodes,
)
from components.spec.site import Site
from hosts import CHECKPOINT_MOVER
from runbooks.flex.lending import flex_nodes
from tests.builders import parse, prod_values
from tests.harness.daemons import free_ports, stop_all, wait_for
from tests.harness.figures import FIGURES

BINARIES = ("munged", "mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "slurmctld", "slurmd",
            "sacctmgr", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
CLIENT_TIMEOUT_S = 15
"""s; a client call to a daemon that is down retries for ~10 s, so every call is bounded."""
START_TIMEOUT_S = 30
"""s a daemon may take to answer after start."""
ACTIVE = "PD,R,CG,CF,S,RQ"
"""squeue states of jobs not yet over (ended jobs stay listed for MinJobAge)."""


def _missing() -> str | None:
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return (f"needs {', '.join(absent)}: apt-get install -y --no-install-recommends "
                "slurmctld slurmd slurm-client slurmdbd munge mariadb-server")
    if os.geteuid() != 0:
        return "slurmd and the cgroup plugins need root"
    return None


@dataclass
class Cluster:
    site: Site
    overlay: LoopbackOverlay
    conf_dir: Path
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf_dir / "slurm.conf")}

    def run(self, *args: str, check: bool = True,
            timeout_s: float = CLIENT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        # Any user's job may hold bytes that are not UTF-8 (issue 41): the harness reads Slurm as the lend does.
        result = subprocess.run(args, env=self.env, capture_output=True, text=True, errors="replace",
                                timeout=timeout_s)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}: {result.stderr or result.stdout}")
        return result

    def start(self, name: str, *args: str) -> None:
        log = (self.overlay.root / "log" / f"{name}.stdout").open("wb")
        self.daemons[name] = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True)

    def reconfigure(self, site: Site) -> None:
        """slurm.conf rendered for `site` on this cluster's overlay, read again by slurmctld and every slurmd (a
        test's own Slurm settings, such as its SlurmdTimeout); the same nodes as the cluster's own site."""
        # Whole or not at all: a slurmd starting meanwhile must never read a half-written file.
        new = self.conf_dir / "slurm.conf.new"
        write(new, render_slurm_conf(site, self.overlay))
        new.replace(self.conf_dir / "slurm.conf")
        self.run("scontrol", "reconfigure")

    def slurmd_pid_file(self, node: str) -> Path:
        """Where `slurmd -N node` writes its PID (the overlay's SlurmdPidFile)."""
        return self.overlay.root / "run" / f"slurmd-{node}.pid"

    def adopt_slurmd(self, node: str) -> None:
        """A node's slurmd that a drill killed and started again on its own (detached): stopped by its PID file and
        started again as one of this cluster's daemons, so the session's teardown stops it."""
        if self.daemons[f"slurmd-{node}"].poll() is None:
            return  # never killed
        pid_file = self.slurmd_pid_file(node)
        pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        if pid is not None and pid != self.daemons[f"slurmd-{node}"].pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            wait_for(f"the detached slurmd of {node} to stop", lambda: not _alive(pid), 15)
        self.start(f"slurmd-{node}", "slurmd", "-D", "-N", node)

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
        """Like wait_for, but fails at once, with the log's tail, when a daemon has exited."""

        def ready() -> bool:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    tail = (self.overlay.root / "log" / f"{name}.stdout").read_text()[-2000:]
                    raise AssertionError(f"{name} exited {process.returncode} while waiting for {what}:\n{tail}")
            return check()

        wait_for(what, ready, timeout_s, interval_s=0.2)

    def stop(self) -> None:
        """Cancel jobs, then stop daemons in reverse start order, each by PID, waiting on each."""
        if "slurmctld" in self.daemons:
            self.run("scancel", "--full", "--user=root", check=False)
            with contextlib.suppress(TimeoutError):
                wait_for("running jobs to end", lambda: not self.jobs(ACTIVE), timeout_s=15)
        stop_all(list(self.daemons.values()))
        for node in slurm_nodes(self.site):
            # cgroup v1 leaves one directory per emulated node behind.
            for leftover in Path("/sys/fs/cgroup").glob(f"*/slurm_{node.name}"):
                _rmdir_tree(leftover)

    def all_idle(self) -> bool:
        """Every node idle and responding (a node just resumed is `idle*` until slurmd registers again)."""
        states = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", check=False).stdout.split("\n")
        idle = {line.split()[0] for line in states if line.endswith(" idle")}
        return len(idle) == len(slurm_nodes(self.site))

    def jobs(self, states: str) -> list[str]:
        out = self.run("squeue", "--noheader", f"--states={states}", "--format=%i", check=False).stdout
        return out.split()

    def sbatch(self, *args: str) -> str:
        # Job output goes to the session directory, never the working tree.
        out = self.run("sbatch", "--parsable", f"--chdir={self.overlay.root}",
                       f"--output={self.overlay.root / 'log' / 'job-%j.out'}", *args).stdout.strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "--oneliner", "show", "job", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_state(self, job_id: str, state: str, timeout_s: float = 20) -> dict[str, str]:
        seen: dict[str, str] = {}

        def reached() -> bool:
            seen.update(self.job(job_id))
            return seen.get("JobState") == state

        try:
            wait_for(f"job {job_id} {state}", reached, timeout_s, interval_s=0.3)
        except TimeoutError as err:
            raise AssertionError(f"job {job_id} is {seen.get('JobState')} ({seen.get('Reason')}), not {state}") from err
        return seen


def _alive(pid: int) -> bool:
    """A process that has not exited (a zombie nobody reaped has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _rmdir_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            _remove_cgroup(child)
    _remove_cgroup(path)


def _remove_cgroup(path: Path, timeout_s: float = 10) -> None:
    """rmdir a cgroup directory. A job step killed a moment ago may still be exiting inside it (EBUSY): kill what
    is left in it and retry, for at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    freezer = path / "freezer.state"
    while True:
        if freezer.exists() and freezer.read_text().strip() != "THAWED":
            freezer.write_text("THAWED")  # a frozen process cannot die
        for pid in (path / "cgroup.procs").read_text().split() if (path / "cgroup.procs").exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def bring_up(cluster: Cluster) -> dict[str, float]:
    """Starts everything; returns when each phase ended (time.monotonic())."""
    overlay, root = cluster.overlay, cluster.overlay.root
    for sub in ("state", "spool", "run", "log", "dev", "munge", "mysql", "hot", "cold"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o755)
    for group in slurm_groups(cluster.site):
        for index in range(group.gpus_per_node):
            device = overlay.dev_dir / f"nvidia{index}"
            if not device.exists():
                os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(195, index))
    write(cluster.conf_dir / "slurm.conf", render_slurm_conf(cluster.site, overlay))
    write(cluster.conf_dir / "gres.conf", render_gres_conf(cluster.site, overlay))
    write(cluster.conf_dir / "cgroup.conf", render_cgroup_conf())
    write(cluster.conf_dir / "slurmdbd.conf", render_slurmdbd_conf(cluster.site, overlay), 0o600)
    write(overlay.prolog, render_prolog(str(overlay.mapping_dir)), 0o755)
    write(overlay.epilog, render_epilog(cluster.site, str(overlay.mapping_dir), overlay), 0o755)
    write(overlay.mover, CHECKPOINT_MOVER.read_text())

    phases = {"configs": time.monotonic()}
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    cluster.start("munged", "munged", "--foreground", "--force", f"--socket={overlay.munge_socket}",
                  f"--key-file={key}", f"--pid-file={root / 'run' / 'munged.pid'}",
                  f"--log-file={root / 'log' / 'munged.log'}", f"--seed-file={root / 'munge' / 'seed'}")

    phases["munged"] = time.monotonic()
    datadir, mysql_socket = root / "mysql" / "data", root / "mysql" / "mysqld.sock"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                    "--auth-root-authentication-method=socket", "--skip-test-db"],
                   check=True, capture_output=True, timeout=60)
    cluster.start("mariadbd", "mariadbd", "--no-defaults", f"--datadir={datadir}", "--user=root",
                  "--bind-address=127.0.0.1", f"--port={overlay.storage_port}", f"--socket={mysql_socket}",
                  f"--pid-file={root / 'run' / 'mariadbd.pid'}", "--skip-log-bin", "--innodb-buffer-pool-size=64M")
    sql = (f"CREATE USER '{overlay.storage_user}'@'127.0.0.1' IDENTIFIED BY '{overlay.storage_pass}';"
           f"GRANT ALL ON *.* TO '{overlay.storage_user}'@'127.0.0.1';")
    cluster.wait("MariaDB", lambda: subprocess.run(
        ["mariadb", "--no-defaults", f"--socket={mysql_socket}", "-uroot", "-e", sql],
        capture_output=True, timeout=CLIENT_TIMEOUT_S).returncode == 0)

    phases["mariadb"] = time.monotonic()
    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (it has no -f).
    cluster.start("slurmdbd", "slurmdbd", "-D")
    cluster.wait("slurmdbd", lambda: cluster.run("sacctmgr", "--noheader", "list", "qos", check=False).returncode == 0)
    phases["slurmdbd"] = time.monotonic()
    # The script the controller runs in production, against the real sacctmgr and slurmdbd.
    cluster.run("bash", "-c", accounting_script(cluster.site))
    # Test users: root submits for the onboarded teams (real users come with team onboarding).
    teams = ",".join(t.name for t in cluster.site.teams_onboarded())
    cluster.run("sacctmgr", "--immediate", "add", "user", "root", f"account={teams}")

    phases["accounting"] = time.monotonic()
    cluster.start("slurmctld", "slurmctld", "-D", "-i")
    for node in slurm_nodes(cluster.site):
        cluster.start(f"slurmd-{node.name}", "slurmd", "-D", "-N", node.name)

    cluster.wait("every node idle", cluster.all_idle)
    phases["slurmctld + slurmd idle"] = time.monotonic()
    return phases


LOOPBACK_LOCK = Path("/tmp/gpucluster-loopback-slurm.lock")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    site = parse(prod_values())
    root = tmp_path_factory.mktemp("slurm")
    nodes = slurm_nodes(site)
    ports = free_ports(len(nodes) + 3)
    overlay = LoopbackOverlay(
        root=root,
        slurmctld_port=ports[0],
        slurmdbd_port=ports[1],
        storage_port=ports[2],
        slurmd_ports={n.name: port for n, port in zip(nodes, ports[3:], strict=True)},
        munge_socket=root / "munge" / "munge.socket",
        storage_user="slurm",
        storage_pass=secrets.token_hex(16),
    )
    conf_dir = root / "etc"
    conf_dir.mkdir()
    cluster = Cluster(site, overlay, conf_dir)
    # Every loopback cluster names its nodes alike, and slurmd names its cgroups after the node: two test runs on
    # one machine take turns.
    with open(LOOPBACK_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        try:
            phases = bring_up(cluster)
            steps, last = [], started
            for phase, ended in phases.items():
                steps.append(f"{phase} {ended - last:.1f} s")
                last = ended
            FIGURES.append(f"slurm cluster up in {last - started:.1f} s with {len(nodes)} slurmd: {', '.join(steps)}")
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def slurm(cluster: Cluster) -> Iterator[Cluster]:
    """The session cluster, emptied of jobs and with every node idle again after the test, whatever its outcome
    (a test that drains a node resumes it)."""
    yield cluster
    cluster.run("scancel", "--full", "--user=root", check=False)
    cluster.wait("the queue to empty", lambda: not cluster.jobs(ACTIVE))
    cluster.wait("every node idle again", cluster.all_idle)


def slurm_marks() -> list[pytest.MarkDecorator]:
    """A module's pytestmark: the slurm marker, its duration reported, skipped with the install command where the
    daemons are missing."""
    reason = _missing()
    return [pytest.mark.slurm, pytest.mark.usefixtures("module_timer"),
            *([pytest.mark.skip(reason=reason)] if reason else [])]


@pytest.fixture
def flex_slurm(slurm: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The session cluster as an operator's shell sees it; the flex nodes are resumed afterwards (and the slurm
    fixture then waits for every node to be idle)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf_dir / "slurm.conf"))
    yield slurm
    slurm.run("scancel", "--full", "--user=root", check=False)
    for name in flex_nodes(slurm.site):
        slurm.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
