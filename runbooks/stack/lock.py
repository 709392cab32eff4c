"""One command at a time changes a stack: an exclusive lock on a file in the state dir, per stack.

`request` (sets the stack's stage, previews), `apply` and `rollback` (run `pulumi up`) hold it for as long as
they run; a second one exits held instead of racing the first (two `up`s, or a preview that changes the config
under an apply). The kernel drops the lock when its holder dies, so a crash never leaves it stuck. The file
says who holds it, for the message the second command prints.
"""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path


class StackLockedError(Exception):
    """Another gpuctl command holds the stack's lock."""


class StackLock:
    def __init__(self, path: Path, program: str = "gpuctl rollout") -> None:
        self.path = path
        self.program = program
        """The command group the holder's message names (`gpuctl acceptance` holds its campaign's lock too)."""

    @contextmanager
    def held(self, command: str) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: the holder's line is written and truncated here, never in a file a link leads to.
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip() or "another gpuctl command"
                raise StackLockedError(f"{holder} holds {self.path}") from None
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"`{self.program} {command}` (pid {os.getpid()}, since "
                                  f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC)\n".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(descriptor, 0)
        finally:
            os.close(descriptor)  # closing releases the lock
