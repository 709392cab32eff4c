"""Diagnoses for the health controller: `dcgmi diag -r <level> -j` on a drained node, run in the background so one
step never waits the ~15 minutes a level-3 run takes, judged by the node check's own reading of dcgmi's JSON
(hosts/node_check.py check_diag: every test must pass or be skipped, and one at least must pass).

In production the command reaches the node over SSH as the site's ssh_user with health.ssh_key, as the node check's
deploy does, and runs dcgmi in the GPU Operator's DCGM container (DCGM_CONTAINER) through crictl. Its output goes to
files in <state_dir>/diagnoses, opened without following links (the state dir is root's; nothing a user writes is
trusted to be a plain file), read back at most DIAG_OUTPUT_MAX bytes. A diagnosis whose process this controller did
not start (the controller restarted mid-run) reads as none, and the decision starts it again.
"""

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from components.scheduling.health_decision import Diagnosis, DiagStatus, diag_level
from components.site.derived import nodes_by_name
from components.site.site import Site
from components.site.wellknown import CRI_ENDPOINT, DCGM_CONTAINER
from hosts.node_check import DIAG_OUTPUT_MAX, check_diag

SSH_CONNECT_TIMEOUT_S = 10
DIRECTORY = "diagnoses"
REMOTE_KILL_AFTER_S = 10
"""s the node's `timeout` waits after its TERM before it KILLs a diagnosis past node_check.diag_timeout_s."""
REMOTE_TIMED_OUT = 124
"""timeout(1)'s exit status when it stopped the command (GNU coreutils manual, "timeout invocation"): read as the
diagnosis stopped at its deadline, as the node check reads one it stopped itself."""


def ssh_command(site: Site) -> Callable[[str], list[str]]:
    """node -> the command that runs its diagnosis from the Slurm controller.

    The user goes as `-l`'s value and the host after `--`, so neither is read as an option however it is spelt (the
    spec checks the host's spelling, not the user's); the remote line is one shell word list whose every value is
    quoted, bounded on the node by timeout(1) at node_check.diag_timeout_s: killing the local ssh would leave dcgmi
    running there."""
    def command(node: str) -> list[str]:
        crictl = f"crictl --runtime-endpoint {shlex.quote(CRI_ENDPOINT)}"
        find = f"{crictl} ps --name {shlex.quote(f'^{DCGM_CONTAINER}$')} --state Running --quiet | head -n 1"
        bound = f"timeout --kill-after={REMOTE_KILL_AFTER_S} {site.node_check.diag_timeout_s}"
        remote = f"{bound} {crictl} exec \"$({find})\" dcgmi diag -r {diag_level(site, node)} -j"
        host = nodes_by_name(site)[node].ssh_host
        return ["ssh", "-i", site.health.ssh_key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}", "-l", site.ssh_user, "--", host, remote]
    return command


def _open(directory: int, name: str) -> int:
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                   dir_fd=directory)


def _read(directory: int, name: str, limit: int) -> str:
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return ""
    try:
        return os.read(descriptor, limit).decode(errors="replace")
    finally:
        os.close(descriptor)


@dataclass
class Diagnoser:
    site: Site
    state_dir: Path
    command: Callable[[str], Sequence[str]]
    clock: Callable[[], float] = time.time
    running: dict[str, tuple[subprocess.Popen[bytes], float]] = field(default_factory=dict)

    def _directory(self) -> int:
        path = self.state_dir / DIRECTORY
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def start(self, node: str) -> float:
        """Starts a diagnosis of the node (stopping one still running); returns when it started."""
        self.stop(node)
        directory = self._directory()
        try:
            out, err = _open(directory, f"{node}.out"), _open(directory, f"{node}.err")
            try:
                process = subprocess.Popen(list(self.command(node)), stdout=out, stderr=err,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            finally:
                os.close(out)
                os.close(err)
            started = self.clock()
            self._record(directory, node, Diagnosis(DiagStatus.RUNNING, started))
        finally:
            os.close(directory)
        self.running[node] = (process, started)
        return started

    def stop(self, node: str) -> None:
        process, _ = self.running.pop(node, (None, 0.0))
        if process is not None and process.poll() is None:
            # Its own session (start): the group holds what the command forked too (hosts/node_check.py stop).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def forget(self, node: str) -> None:
        """Drops the node's diagnosis (it returned): the next suspicion starts from none."""
        self.stop(node)
        directory = self._directory()
        try:
            os.unlink(f"{node}.json", dir_fd=directory)
        except FileNotFoundError:
            pass
        finally:
            os.close(directory)

    def status(self, node: str) -> Diagnosis | None:
        """The node's last diagnosis: running, or its verdict once dcgmi ended."""
        directory = self._directory()
        try:
            if node in self.running:
                process, started = self.running[node]
                code = process.poll()
                if code is None:
                    return Diagnosis(DiagStatus.RUNNING, started)
                del self.running[node]
                verdict = check_diag(argparse.Namespace(diag_level=diag_level(self.site, node),
                                                        diag_timeout_s=self.site.node_check.diag_timeout_s),
                                     None if code == REMOTE_TIMED_OUT else code,
                                     _read(directory, f"{node}.out", DIAG_OUTPUT_MAX),
                                     _read(directory, f"{node}.err", DIAG_OUTPUT_MAX))
                diagnosis = Diagnosis(DiagStatus.PASSED if verdict.ok else DiagStatus.FAILED, started,
                                      verdict.detail[:500])
                self._record(directory, node, diagnosis)
                return diagnosis
            return self._recorded(directory, node)
        finally:
            os.close(directory)

    def _record(self, directory: int, node: str, diagnosis: Diagnosis) -> None:
        descriptor = _open(directory, f"{node}.json.new")
        with os.fdopen(descriptor, "w") as file:
            json.dump({"status": diagnosis.status.value, "started_at": diagnosis.started_at,
                       "detail": diagnosis.detail}, file)
        os.replace(f"{node}.json.new", f"{node}.json", src_dir_fd=directory, dst_dir_fd=directory)

    def _recorded(self, directory: int, node: str) -> Diagnosis | None:
        try:
            record = json.loads(_read(directory, f"{node}.json", 64 << 10) or "null")
            if record is None:
                return None
            status = DiagStatus(record["status"])
            if status == DiagStatus.RUNNING:
                return None  # started by a controller that is gone: its process is not ours to wait for
            return Diagnosis(status, float(record["started_at"]), str(record.get("detail", ""))[:500])
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: diagnosed again
