"""A real Slurm 22.05 cluster on 127.0.0.1 that runs the files `gpuctl plan --out` wrote, shared by the tests that need
one.

The loopback test stack is prod with what a site names for a cluster whose daemons all run on this machine (a
`LoopbackStack`: addresses, ports, the daemons' user and folders, one slurmd port per node); the real `gpuctl plan`
renders it, and the daemons read the plan's slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf unchanged (copied
with the modes the deploy gives them) and run the prolog and epilog the plan's node command installs. What is not a
file of the plan is runtime setup: the folders, the GPU device files, munged, a private MariaDB on a socket.

One session cluster: munged, MariaDB, slurmdbd, slurmctld and one `slurmd -N <node>` per node in slurm.conf, with the
accounting script applied by the real sacctmgr. Every daemon is a child process stopped by its PID in the finalizer;
every client call has a timeout; every wait is bounded. See ../shared/notes/slurm-on-loopback.md. tests/conftest.py
makes the fixtures visible everywhere; a module using them marks itself with `slurm_marks()`.
"""

import contextlib
import copy
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.site.site import Pool, Site
from components.site.wellknown import PLATFORM_ACCOUNT
from components.slurm.conf import slurm_groups, slurm_nodes
from components.slurm.install import installed_files
from components.slurm.scripts import epilog_path, mover_path, prolog_path
from hosts import CHECKPOINT_MOVER
from runbooks.cli import app
from runbooks.flex.lending import flex_nodes
from tests.builders import copy_project, parse, prod_values, set_path, with_changes
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
CONFIG_FILES = {"slurm.conf": 0o644, "gres.conf": 0o644, "cgroup.conf": 0o644, "slurmdbd.conf": 0o600}
"""The plan's slurm/ files the daemons read, with the modes the deploy installs them with
(components.slurm.install.controller_files): slurmdbd refuses a slurmdbd.conf others may read."""


def _missing() -> str | None:
    absent = [b for b in BINARIES if shutil.which(b) is None]
    if absent:
        return (f"needs {', '.join(absent)}: apt-get install -y --no-install-recommends "
                "slurmctld slurmd slurm-client slurmdbd munge mariadb-server")
    if os.geteuid() != 0:
        return "slurmd and the cgroup plugins need root"
    return None


@dataclass(frozen=True)
class LoopbackStack:
    """What the loopback test stack names, as a site names its own hosts, ports and folders: every daemon on 127.0.0.1,
    run by this test's user (root), every file under one folder, each node's slurmd on a port of its own."""

    root: Path
    slurmctld_port: int
    slurmdbd_port: int
    slurmd_ports: dict[str, int]
    """slurm.conf's NodeName Port= of each node: every node is a `slurmd -N <node>` on 127.0.0.1."""

    @property
    def dev_dir(self) -> Path:
        """Holds the GPU device files gres.conf binds (slurm.gpu_device_prefix)."""
        return self.root / "dev"

    @property
    def mapping_dir(self) -> Path:
        """gpu_operator.hpc_job_mapping_dir: the prolog's GPU-to-job files."""
        return self.root / "dcgm-hpc-jobs"

    @property
    def hot_root(self) -> Path:
        """storage.nfs_hot.mount_root: one folder per NFS server."""
        return self.root / "hot"

    @property
    def cold_root(self) -> Path:
        """storage.ceph_cold.mount_path."""
        return self.root / "cold"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def values(self, values: dict[str, Any]) -> dict[str, Any]:
        """A stack's config values (tests.builders.prod_values's form) made the loopback test stack's."""
        loopback = copy.deepcopy(values)
        root = self.root
        for path, value in {
            "slurm.controller_host": "localhost", "slurm.slurmctld_port": self.slurmctld_port,
            "slurm.slurmdbd_port": self.slurmdbd_port, "slurm.slurm_user": "root",
            "slurm.munge_socket": str(self.munge_socket), "slurm.state_save_dir": str(root / "state"),
            "slurm.slurmd_spool_dir": str(root / "spool"), "slurm.log_dir": str(self.log_dir),
            "slurm.run_dir": str(root / "run"), "slurm.scripts_dir": str(root / "etc"),
            "slurm.programs_dir": str(root / "lib"), "slurm.gpu_device_prefix": str(self.dev_dir / "nvidia"),
            # Every node claims its production CPUs, memory and GPUs on this small machine.
            "slurm.config_overrides": True,
            "storage.nfs_hot.mount_root": str(self.hot_root), "storage.ceph_cold.mount_path": str(self.cold_root),
        }.items():
            set_path(loopback, path, value)
        loopback.setdefault("gpu_operator", {})["hpc_job_mapping_dir"] = str(self.mapping_dir)
        for group in loopback["node_groups"]:
            if group["pool"] in (Pool.SLURM, Pool.FLEX):
                for node in group["nodes"]:
                    node.update(ssh_host="127.0.0.1", slurmd_port=self.slurmd_ports[node["name"]])
        return loopback


def plan(values: dict[str, Any], out: Path) -> Path:
    """`gpuctl plan --out out` of a copy of the project whose stack holds `values`; returns out."""
    project = out.with_name(f"{out.name}-project")
    project.mkdir()
    copy_project(project, lambda config: config.update({f"gpu-cluster:{k}": v for k, v in values.items()}))
    result = CliRunner().invoke(app, ["plan", "--project-dir", str(project), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def node_scripts(plan_dir: Path, site: Site) -> dict[str, str]:
    """The prolog and epilog, by path, as the plan's command for the first Slurm node installs them."""
    node = slurm_nodes(site)[0].name
    (command,) = (plan_dir / "resources").glob(f"command-remote-Command--*{node}-config.json")
    files, _ = installed_files(json.loads(command.read_text())["inputs"]["create"])
    return {path: files[path] for path in (prolog_path(site), epilog_path(site))}


@dataclass
class Cluster:
    site: Site
    stack: LoopbackStack
    plan_dir: Path
    """What `gpuctl plan --out` wrote for the loopback test stack."""
    conf_dir: Path
    """The plan's config files as the daemons read them: SLURM_CONF is conf_dir/slurm.conf."""
    values: dict[str, Any] = field(default_factory=dict)
    """The loopback test stack's config values (tests.builders.prod_values's form)."""
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

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        log = (self.stack.log_dir / f"{name}.stdout").open("wb")
        self.daemons[name] = subprocess.Popen(args, env={**self.env, **(env or {})}, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True)

    def install_config(self, plan_dir: Path, names: tuple[str, ...] = tuple(CONFIG_FILES)) -> None:
        """The plan's config files into conf_dir, byte for byte, each replaced whole: a slurmd starting meanwhile must
        never read a half-written file."""
        for name in names:
            new = self.conf_dir / f"{name}.new"
            shutil.copyfile(plan_dir / "slurm" / name, new)
            new.chmod(CONFIG_FILES[name])
            new.replace(self.conf_dir / name)

    def reconfigure(self, **changes: Any) -> None:
        """slurm.conf of the loopback test stack with `changes` (tests.builders.with_changes paths, such as
        slurm__slurmd_timeout_s=5), planned by `gpuctl plan` and read again by slurmctld and every slurmd; with no
        changes, the cluster's own slurm.conf again. The nodes stay the cluster's."""
        plan_dir = self.plan_dir
        if changes:
            plan_dir = plan(with_changes(self.values, **changes), self.stack.root / f"plan-{time.monotonic_ns()}")
        self.install_config(plan_dir, ("slurm.conf",))
        self.run("scontrol", "reconfigure")

    def slurmd_pid_file(self, node: str) -> Path:
        """Where `slurmd -N node` writes its PID (SlurmdPidFile, per node: several slurmd share this host)."""
        return Path(self.site.slurm.run_dir) / f"slurmd-{node}.pid"

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
            try:
                wait_for(f"the detached slurmd of {node} to stop", lambda: not _alive(pid), 15)
            except TimeoutError:
                # As stop_all does: on a busy machine slurmd has taken longer than 15 s to end on SIGTERM, and a
                # cluster without this node's slurmd fails every later test of the session.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                wait_for(f"the detached slurmd of {node} to end on SIGKILL", lambda: not _alive(pid), 15)
        self.start(f"slurmd-{node}", "slurmd", "-D", "-N", node)

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
        """Like wait_for, but fails at once, with the log's tail, when a daemon has exited."""

        def ready() -> bool:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    tail = (self.stack.log_dir / f"{name}.stdout").read_text()[-2000:]
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
        out = self.run("sbatch", "--parsable", f"--chdir={self.stack.root}",
                       f"--output={self.stack.log_dir / 'job-%j.out'}", *args).stdout.strip()
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
    site, stack, root = cluster.site, cluster.stack, cluster.stack.root
    plan(cluster.values, cluster.plan_dir)
    phases: dict[str, float] = {}
    phases["gpuctl plan"] = time.monotonic()
    for folder in (site.slurm.state_save_dir, site.slurm.slurmd_spool_dir, site.slurm.run_dir, site.slurm.log_dir,
                   site.slurm.scripts_dir, site.slurm.programs_dir, stack.dev_dir, stack.munge_socket.parent,
                   root / "mysql", stack.hot_root, stack.cold_root, cluster.conf_dir):
        Path(folder).mkdir(parents=True, exist_ok=True)
    stack.munge_socket.parent.chmod(0o755)
    for group in slurm_groups(site):
        for index in range(group.gpus_per_node):
            device = Path(f"{site.slurm.gpu_device_prefix}{index}")
            if not device.exists():
                os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(195, index))
    cluster.install_config(cluster.plan_dir)
    # What the node command installs: the plan's job scripts, and the mover from its copy.
    for path, content in node_scripts(cluster.plan_dir, site).items():
        write(Path(path), content, 0o755)
    write(Path(mover_path(site)), CHECKPOINT_MOVER.read_text())

    phases["files"] = time.monotonic()
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    cluster.start("munged", "munged", "--foreground", "--force", f"--socket={site.slurm.munge_socket}",
                  f"--key-file={key}", f"--pid-file={root / 'run' / 'munged.pid'}",
                  f"--log-file={stack.log_dir / 'munged.log'}", f"--seed-file={root / 'munge' / 'seed'}")

    phases["munged"] = time.monotonic()
    # No TCP listener: slurmdbd logs in as root over the socket (unix_socket authentication), as production's
    # slurmdbd does as its SlurmUser; the client library finds the socket in MYSQL_UNIX_PORT.
    datadir, mysql_socket = root / "mysql" / "data", root / "mysql" / "mysqld.sock"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                    "--auth-root-authentication-method=socket", "--skip-test-db"],
                   check=True, capture_output=True, timeout=60)
    cluster.start("mariadbd", "mariadbd", "--no-defaults", f"--datadir={datadir}", "--user=root", "--skip-networking",
                  f"--socket={mysql_socket}", f"--pid-file={root / 'run' / 'mariadbd.pid'}", "--skip-log-bin",
                  "--innodb-buffer-pool-size=64M")
    cluster.wait("MariaDB", lambda: subprocess.run(
        ["mariadb", "--no-defaults", f"--socket={mysql_socket}", "-uroot", "-e", "SELECT 1"],
        capture_output=True, timeout=CLIENT_TIMEOUT_S).returncode == 0)

    phases["mariadb"] = time.monotonic()
    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (it has no -f).
    cluster.start("slurmdbd", "slurmdbd", "-D", env={"MYSQL_UNIX_PORT": str(mysql_socket)})
    cluster.wait("slurmdbd", lambda: cluster.run("sacctmgr", "--noheader", "list", "qos", check=False).returncode == 0)
    phases["slurmdbd"] = time.monotonic()
    # The script the controller runs in production, as the plan wrote it, against the real sacctmgr and slurmdbd.
    cluster.run("bash", "-c", (cluster.plan_dir / "slurm" / "accounting.sh").read_text())
    # Test users: root submits for the platform and the onboarded teams (real users come with team onboarding).
    accounts = ",".join([PLATFORM_ACCOUNT, *(t.name for t in cluster.site.teams_onboarded())])
    cluster.run("sacctmgr", "--immediate", "add", "user", "root", f"account={accounts}")

    phases["accounting"] = time.monotonic()
    cluster.start("slurmctld", "slurmctld", "-D", "-i")
    for node in slurm_nodes(cluster.site):
        cluster.start(f"slurmd-{node.name}", "slurmd", "-D", "-N", node.name)

    cluster.wait("every node idle", cluster.all_idle)
    phases["slurmctld + slurmd idle"] = time.monotonic()
    return phases


def loopback_cluster(root: Path, values: dict[str, Any], cluster_type: type[Cluster] = Cluster) -> Cluster:
    """A cluster of the loopback test stack made from `values` (prod's form), with free ports, under root."""
    nodes = slurm_nodes(parse(values))
    ports = free_ports(len(nodes) + 2)
    stack = LoopbackStack(root=root, slurmctld_port=ports[0], slurmdbd_port=ports[1],
                          slurmd_ports={n.name: port for n, port in zip(nodes, ports[2:], strict=True)})
    loopback = stack.values(values)
    return cluster_type(parse(loopback), stack, root / "plan", root / "conf", loopback)


LOOPBACK_LOCK = Path("/tmp/gpucluster-loopback-slurm.lock")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # At the canary stage, whose teams' accounts the tests submit under (prod's first stage onboards none).
    cluster = loopback_cluster(tmp_path_factory.mktemp("slurm"), with_changes(prod_values(), stage="canary"))
    nodes = slurm_nodes(cluster.site)
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


SLURM_TEST_S = 8
"""s a test on a real Slurm cluster takes in `make test`, on average (the session cluster's ~60 tests took ~500 s)."""


def slurm_marks() -> list[pytest.MarkDecorator]:
    """A module's pytestmark: the slurm marker, its duration reported and expected (a test's own `expected_s` wins),
    skipped with the install command where the daemons are missing."""
    reason = _missing()
    return [pytest.mark.slurm, pytest.mark.usefixtures("module_timer"), pytest.mark.expected_s(SLURM_TEST_S),
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
