"""What every real-daemon test needs: free loopback ports and bounded waits."""

import signal
import socket
import subprocess
import time
from collections.abc import Callable


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (held open together so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> None:
    """Poll `check` until it holds; past the deadline, fail naming what never happened."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)


def stop_all(processes: "list[subprocess.Popen[bytes]] | list[subprocess.Popen[str]]") -> None:
    """Each still-running daemon by its PID, in reverse start order, waiting for each (SIGKILL after 10 s)."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
