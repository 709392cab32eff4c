"""A network namespace the test makes and always removes: one veth pair, the host side 10.251.<n>.1/30 in the root
namespace and the node side 10.251.<n>.2/30 inside, and daemons started in it with `ip netns exec`. Deleting the
namespace deletes the pair, the node side's qdiscs with it. Needs root and iproute2.

Names given to `namespace` resolve inside it to the host side's address: `ip netns exec` bind-mounts
/etc/netns/<name>/hosts over /etc/hosts (ip-netns(8)), so a daemon inside reaches a Kubernetes Service by the name
the render gave it, served by a double on the host side."""

import contextlib
import ctypes
import fcntl
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.daemons import stop_all

TIMEOUT_S = 10


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=TIMEOUT_S)


def missing() -> str | None:
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


@dataclass
class Namespace:
    name: str
    node_link: str
    """The node side of the veth pair, inside the namespace: what a partition takes down."""
    node_address: str
    host_address: str
    daemons: "list[subprocess.Popen[bytes]]" = field(default_factory=list)

    def start(self, *argv: str, log: str) -> "subprocess.Popen[bytes]":
        with open(log, "wb") as out:
            process = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], stdout=out, stderr=subprocess.STDOUT)
        self.daemons.append(process)
        return process

    def link_state(self) -> str:
        done = subprocess.run(
            ["ip", "netns", "exec", self.name, "cat", f"/sys/class/net/{self.node_link}/operstate"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=True,
        )
        return done.stdout.strip()

    def qdisc(self) -> str:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, "tc", "qdisc", "show", "dev", self.node_link],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=True,
        ).stdout


CLONE_NEWNET = 0x40000000
"""setns(2)'s nstype for a network namespace (<sched.h>)."""
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(descriptor: int) -> None:
    if _libc.setns(descriptor, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """The calling thread inside the namespace `name` (setns(2) on a network namespace moves that thread alone), back
    in its own after: a socket made meanwhile stays in `name`, so its traffic leaves by the node's link, as a daemon's
    on the node does, without a process per connection."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


ETC_NETNS = Path("/etc/netns")
SETUP_LOCK = Path("/run/lock/gpucluster-netns.lock")
"""Held while a namespace takes its subnet and its /etc/netns folder: tests on other pytest-xdist workers (or other
runs) make namespaces at the same time, and two host sides with one /30 would route each other's packets."""


def _free_subnet() -> int:
    """A third octet no host side of ours holds now (10.251.<n>.1 on some link of the root namespace)."""
    held = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True
    ).stdout
    free = [n for n in range(1, 251) if f" 10.251.{n}.1/" not in held]
    assert free, "every 10.251.<n>.0/30 is held: namespaces of earlier runs were left behind (ip netns list)"
    return free[secrets.randbelow(len(free))]


@contextlib.contextmanager
def namespace(host_names: Sequence[str] = ()) -> Iterator[Namespace]:
    """host_names: resolve, inside, to the host side's address."""
    tag = secrets.token_hex(3)
    host_link = f"gah{tag}"
    SETUP_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(SETUP_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subnet = _free_subnet()
        ns = Namespace(f"gpuc-acc-{tag}", f"gan{tag}", f"10.251.{subnet}.2", f"10.251.{subnet}.1")
        etc = ETC_NETNS / ns.name
        ip("netns", "add", ns.name)
        try:
            if host_names:
                etc.mkdir(parents=True)
                (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ns.host_address} {' '.join(host_names)}\n")
            ip("link", "add", host_link, "type", "veth", "peer", "name", ns.node_link, "netns", ns.name)
            ip("addr", "add", f"{ns.host_address}/30", "dev", host_link)
        except BaseException:
            _remove_links(ns, host_link)
            _remove_hosts_file(etc)
            raise
    try:
        ip("link", "set", host_link, "up")
        for args in (
            ("addr", "add", f"{ns.node_address}/30", "dev", ns.node_link),
            ("link", "set", ns.node_link, "up"),
            ("link", "set", "lo", "up"),
        ):
            ip("netns", "exec", ns.name, "ip", *args)
        yield ns
    finally:
        stop_all(ns.daemons)
        _remove_links(ns, host_link)
        with open(SETUP_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # not while another namespace makes its folder under /etc/netns
            _remove_hosts_file(etc)


def _remove_links(ns: Namespace, host_link: str) -> None:
    with contextlib.suppress(subprocess.CalledProcessError):
        ip("link", "del", host_link)
    ip("netns", "del", ns.name)


def _remove_hosts_file(etc: Path) -> None:
    shutil.rmtree(etc, ignore_errors=True)
    with contextlib.suppress(OSError):
        ETC_NETNS.rmdir()  # only when no other namespace of ours still holds files there
