"""Idle TCP connections held against a listener, the way anyone on its network can (issue 41).

A child process opens them, so they take none of the listener's descriptors when it runs in the test's process; it
raises its own RLIMIT_NOFILE soft limit to the hard one to hold them all. `service_limit` gives a listener the
descriptor limit it has in production: systemd starts every service with a soft RLIMIT_NOFILE of 1024 (systemd.exec(5)
LimitNOFILE= default), and about a thousand idle connections exhausted it.
"""

import contextlib
import resource
import subprocess
import sys
from collections.abc import Iterator

SERVICE_NOFILE = 1024
"""The soft RLIMIT_NOFILE systemd gives a service (and most shells a login)."""
CONNECT_WAIT_S = 5.0
"""s the holder waits for its connections' handshakes; a listener that stops accepting leaves the rest pending."""

_HOLDER = r"""
import resource, selectors, socket, sys, time
host, port, count, wait_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 64)), hard))
held, connected, deadline = [], 0, time.monotonic() + wait_s
while len(held) < count:
    # A few at a time, each batch's handshakes awaited: an attacker paces them so that the listener accepts every
    # one (a burst overflows its accept queue, and the kernel drops the rest unaccepted).
    batch, pending = [], selectors.DefaultSelector()
    for _ in range(min(4, count - len(held))):
        connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        connection.setblocking(False)
        connection.connect_ex((host, port))
        batch.append(connection)
        pending.register(connection, selectors.EVENT_WRITE)
    held += batch
    while pending.get_map() and time.monotonic() < deadline:
        for key, _ in pending.select(timeout=0.05):
            pending.unregister(key.fileobj)
            connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    pending.close()
    time.sleep(0.002)
print(connected, flush=True)
sys.stdin.read()  # hold them, sending nothing, until the test closes our stdin
"""


@contextlib.contextmanager
def idle_connections(host: str, port: int, count: int) -> Iterator[int]:
    """Opens `count` TCP connections to host:port that never send a byte, and holds them while the block runs;
    yields how many completed their handshake within CONNECT_WAIT_S."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, host, str(port), str(count), str(CONNECT_WAIT_S)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        yield int(holder.stdout.readline() or 0)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


@contextlib.contextmanager
def service_limit() -> Iterator[None]:
    """This process with a service's soft descriptor limit while the block runs (the hard limit stays)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SERVICE_NOFILE, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def as_a_service() -> None:
    """preexec_fn for a listener started as a child: a service's soft descriptor limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SERVICE_NOFILE, hard), hard))
