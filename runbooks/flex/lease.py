"""One lending controller acts at a time: an exclusive flock on a file in its state dir.

The unit runs on the one Slurm controller, so a lock on its local disk is the lease. A second instance (started by
hand, or a unit restarted while the old process still exits) waits for it, polling, and says who holds it; the
kernel drops the lock when its holder dies, so a crash never leaves it stuck.
"""

import fcntl
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path


class Lease:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.descriptor: int | None = None

    def acquire(self, waiting: Callable[[str], None], poll_s: float = 1.0,
                sleep: Callable[[float], None] = time.sleep) -> None:
        """Blocks until this process holds the lease; tells `waiting` who holds it, once per holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        told = ""
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip() or "another controller"
                if holder != told:
                    waiting(f"waiting: {holder} holds {self.path}")
                    told = holder
                sleep(poll_s)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"the lending controller (pid {os.getpid()}, since "
                              f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC)\n".encode(), 0)
        self.descriptor = descriptor

    def release(self) -> None:
        if self.descriptor is not None:
            os.ftruncate(self.descriptor, 0)
            os.close(self.descriptor)  # closing releases the lock
            self.descriptor = None
