"""A network namespace the test makes and always removes: one veth pair, the host side 10.251.<n>.1/30 in the root
namespace and the node side 10.251.<n>.2/30 inside, and daemons started in it with `ip netns exec`. Deleting the
namespace deletes the pair, the node side's qdiscs with it. Needs root and iproute2.

Names given to `namespace` resolve inside it to the host side's address: `ip netns exec` bind-mounts
/etc/netns/<name>/hosts over /etc/hosts (ip-netns(8)), so a daemon inside reaches a Kubernetes Service by the name
the render gave it, served by a double on the host side."""

import contextlib
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
            process = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], stdout=out,
                                       stderr=subprocess.STDOUT)
        self.daemons.append(process)
        return process

    def link_state(self) -> str:
        done = subprocess.run(["ip", "netns", "exec", self.name, "cat", f"/sys/class/net/{self.node_link}/operstate"],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
        return done.stdout.strip()

    def qdisc(self) -> str:
        return subprocess.run(["ip", "netns", "exec", self.name, "tc", "qdisc", "show", "dev", self.node_link],
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=True).stdout


ETC_NETNS = Path("/etc/netns")


@contextlib.contextmanager
def namespace(host_names: Sequence[str] = ()) -> Iterator[Namespace]:
    """host_names: resolve, inside, to the host side's address."""
    tag = secrets.token_hex(3)
    subnet = 1 + secrets.randbelow(250)
    ns = Namespace(f"gpuc-acc-{tag}", f"gan{tag}", f"10.251.{subnet}.2", f"10.251.{subnet}.1")
    host_link = f"gah{tag}"
    etc = ETC_NETNS / ns.name
    ip("netns", "add", ns.name)
    try:
        if host_names:
            etc.mkdir(parents=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ns.host_address} {' '.join(host_names)}\n")
        ip("link", "add", host_link, "type", "veth", "peer", "name", ns.node_link, "netns", ns.name)
        ip("addr", "add", f"{ns.host_address}/30", "dev", host_link)
        ip("link", "set", host_link, "up")
        for args in (("addr", "add", f"{ns.node_address}/30", "dev", ns.node_link),
                     ("link", "set", ns.node_link, "up"), ("link", "set", "lo", "up")):
            ip("netns", "exec", ns.name, "ip", *args)
        yield ns
    finally:
        stop_all(ns.daemons)
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", host_link)
        ip("netns", "del", ns.name)
        shutil.rmtree(etc, ignore_errors=True)
        with contextlib.suppress(OSError):
            ETC_NETNS.rmdir()  # only when no other namespace of ours still holds files there
