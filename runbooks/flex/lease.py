"""Exclusive flocks on files in the controller's state dir: who may run, and who may move flex nodes.

Two locks (runbooks.flex.controller names their files). LOCK is the controller's own, held for its lifetime: one
instance acts at a time. The unit runs on the one Slurm controller, so a lock on its local disk is the lease. A second
instance (started by hand, or a unit restarted while the old process still exits) waits for it, polling, and says who
holds it; the kernel drops the lock when its holder dies, so a crash never leaves it stuck. MOVES_LOCK is held by
whoever moves flex nodes, for the move: the controller for each live step's lend, reclaim or requeue, and a manual
`gpuctl flex lend` or `reclaim` for its run. A manual move while the controller moves is refused (exit 3, naming the
holder), and the controller holds (audited) while a manual move runs, so the two never interleave drains and labels.
"""

import fcntl
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

HOLDER_BYTES = 200
"""The most of a lock file read as its holder's description (its holder writes one short line)."""


def holder_line(who: str) -> str:
    """What a lock file says of its holder: who, which process, since when."""
    return f"{who} (pid {os.getpid()}, since {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC)"


class Lease:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.descriptor: int | None = None

    def try_acquire(self, holder: str) -> str | None:
        """Takes the lock if it is free and writes `holder` (holder_line) in it: None. Else leaves it and returns
        who holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: the state dir is root's, but a lock file never leads elsewhere.
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            said = os.pread(descriptor, HOLDER_BYTES, 0).decode(errors="replace").strip()
            os.close(descriptor)
            # The holder's own line, kept to what a terminal shows safely.
            return "".join(c for c in said.splitlines()[0] if c.isprintable()) if said else "another process"
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{holder}\n".encode(), 0)
        self.descriptor = descriptor
        return None

    def acquire(self, waiting: Callable[[str], None], poll_s: float = 1.0,
                sleep: Callable[[float], None] = time.sleep) -> None:
        """Blocks until this process holds the lease as the lending controller; tells `waiting` who holds it, once
        per holder."""
        told = ""
        while (holder := self.try_acquire(holder_line("the lending controller"))) is not None:
            if holder != told:
                waiting(f"waiting: {holder} holds {self.path}")
                told = holder
            sleep(poll_s)

    def release(self) -> None:
        if self.descriptor is not None:
            os.ftruncate(self.descriptor, 0)
            os.close(self.descriptor)  # closing releases the lock
            self.descriptor = None
