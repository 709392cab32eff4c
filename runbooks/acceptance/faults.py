"""Fault injectors: each fault is the commands that inject it and the commands that undo it, run on the machine it
lands on, and a dead-man's switch (hosts/drill_revert.py) armed there first, which runs the undo at the drill's
deadline if nothing else has.

Undo commands are idempotent in effect (a link set up, a qdisc deleted, a daemon started: a second run fails harmlessly
and its exit status is recorded, not obeyed), so the drill's own revert, the switch firing late and a resumed campaign
reverting what a dead run left all agree. No command goes through a shell.

Where each fault is injected, and the lowest layer reached on the test machine (docs/acceptance.md):
- node_failure: the node's power off through its BMC (ipmitool, the spec's BMC user, the password from a root-only
  file, never an argument); on the loopback Slurm cluster, the node's daemons and jobs killed, its daemons started
  again.
- network_partition: the node's link down inside its network namespace (production: the node's uplink interface).
- storage_jitter: a qdisc on the storage path's interface: netem delay in production; this test kernel has no
  sch_netem, so a tbf rate limit delays every write in proportion to its size there.
- model_hot_swap: the new version's commands (a rollout of the serving deployment) and the old one's as undo.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from components.site.wellknown import HOLD_LABEL
from hosts import drill_revert

COMMAND_TIMEOUT_S = 30.0
"""s one inject or undo command may run."""
SWITCH = Path(drill_revert.__file__)


class FaultError(Exception):
    """A command of a fault failed; the message names the command and what it said."""


@dataclass(frozen=True)
class Fault:
    drill: str
    where: str
    """The node, link or service the fault lands on."""
    inject: tuple[tuple[str, ...], ...]
    undo: tuple[tuple[str, ...], ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables the commands need (SLURM_CONF); never a secret."""
    stays: bool = False
    """A change meant to stay once the drill ends (a new model version): the drill keeps it; its undo runs only when
    the drill dies before its end (the switch, or the resumed campaign)."""

    def as_record(self) -> dict[str, Any]:
        return {"drill": self.drill, "where": self.where, "inject": [list(a) for a in self.inject],
                "undo": [list(a) for a in self.undo], "env": dict(self.env), "stays": self.stays}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Fault":
        return cls(record["drill"], record["where"], tuple(tuple(a) for a in record["inject"]),
                   tuple(tuple(a) for a in record["undo"]), dict(record["env"]), bool(record["stays"]))


def run_commands(commands: Sequence[Sequence[str]], env: Mapping[str, str], check: bool = True) -> list[int]:
    codes = []
    for argv in commands:
        # Output to a file, not a pipe: a daemon a command starts (setsid -f) keeps a pipe open and the wait alive.
        with tempfile.TemporaryFile() as output:
            try:
                done = subprocess.run(list(argv), env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=output,
                                      stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired) as error:
                raise FaultError(f"`{' '.join(argv)}`: {error.__class__.__name__}: {error}") from None
            output.seek(0)
            said = output.read()[-300:].decode(errors="replace")
        if check and done.returncode != 0:
            raise FaultError(f"`{' '.join(argv)}` exited {done.returncode}: {said}")
        codes.append(done.returncode)
    return codes


class Switches:
    """Dead-man's switches on this machine: the armed files in a directory only root may write, each watched by a
    detached drill_revert process (production arms the same program on the node over SSH, or as a systemd timer)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)

    def arm(self, fault: Fault, name: str, deadline: float) -> str:
        armed = self.directory / f"{name}.json"
        descriptor = os.open(armed, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"deadline": deadline, "undo": [list(a) for a in fault.undo], "env": dict(fault.env)}, handle)
        started = subprocess.run([sys.executable, str(SWITCH), "--arm", str(armed)], capture_output=True, text=True,
                                 timeout=COMMAND_TIMEOUT_S, check=False)
        if started.returncode != 0:
            armed.unlink(missing_ok=True)
            raise FaultError(f"the dead-man's switch did not arm: {started.stderr.strip()[-300:]}")
        return str(armed)

    @staticmethod
    def disarm(armed: str) -> bool:
        """True when the switch was still armed (it had not fired)."""
        try:
            Path(armed).unlink()
            return True
        except FileNotFoundError:
            return False

    @staticmethod
    def fired(armed: str) -> dict[str, Any] | None:
        report = Path(armed).with_suffix(".fired")
        return json.loads(report.read_text()) if report.exists() else None

    @staticmethod
    def wait_gone(armed: str, timeout_s: float) -> bool:
        """Waits (bounded) until the switch has fired; True when it did."""
        deadline = time.monotonic() + timeout_s
        while Path(armed).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not Path(armed).exists()


# --- the faults of each drill -------------------------------------------------------------------


def netns(namespace: str | None, argv: Sequence[str]) -> tuple[str, ...]:
    return ("ip", "netns", "exec", namespace, *argv) if namespace else tuple(argv)


def link_down(drill: str, interface: str, namespace: str | None = None) -> Fault:
    """The node cut off: its link down (inside `namespace` when it has one)."""
    return Fault(drill, f"{namespace + ':' if namespace else ''}{interface}",
                 (netns(namespace, ("ip", "link", "set", "dev", interface, "down")),),
                 (netns(namespace, ("ip", "link", "set", "dev", interface, "up")),))


def storage_delay(drill: str, interface: str, qdisc: Sequence[str], namespace: str | None = None) -> Fault:
    """A qdisc on the storage path: `netem delay <ms>ms <jitter>ms` in production, `tbf rate ...` where the kernel
    has no netem. The undo deletes the root qdisc (the default returns)."""
    where = f"{namespace + ':' if namespace else ''}{interface}"
    return Fault(drill, where, (netns(namespace, ("tc", "qdisc", "replace", "dev", interface, "root", *qdisc)),),
                 (netns(namespace, ("tc", "qdisc", "del", "dev", interface, "root")),))


def netem_delay(delay_ms: int) -> tuple[str, ...]:
    """Production's jitter: delay_ms, varying by half of it (tc-netem(8))."""
    return ("netem", "delay", f"{delay_ms}ms", f"{max(delay_ms // 2, 1)}ms")


def bmc_power(drill: str, node: str, bmc_host: str, bmc_user: str, password_file: str) -> Fault:
    """Power off through the BMC; `-f` reads the password from a root-only file (ipmitool(1)), never an argument."""
    base = ("ipmitool", "-I", "lanplus", "-H", bmc_host, "-U", bmc_user, "-f", password_file, "chassis", "power")
    return Fault(drill, node, ((*base, "off"),), ((*base, "on"),))


def held(fault: Fault, node: str) -> Fault:
    """The fault with its node held against the node health controller while it is in: HOLD_LABEL (naming the drill)
    set before the first inject command and removed after the last undo one, so every revert (the drill's, an
    interrupt's, the dead-man's switch's, a resumed campaign's) hands the node back only once the fault is gone
    (docs/health.md: the controller leaves a held node as it is)."""
    hold = ("kubectl", "label", "--overwrite", "node", node, f"{HOLD_LABEL}=drill-{fault.drill}")
    return replace(fault, inject=(hold, *fault.inject),
                   undo=(*fault.undo, ("kubectl", "label", "node", node, f"{HOLD_LABEL}-")))


def version_swap(drill: str, where: str, to_new: Sequence[str], to_old: Sequence[str]) -> Fault:
    """A new model version rolled out under load; rolling back to the old one is the undo a dead drill gets."""
    return Fault(drill, where, (tuple(to_new),), (tuple(to_old),), stays=True)
