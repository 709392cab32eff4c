"""Dead-man's switches a test armed must not outlive it: a switch that fires after its test cluster is gone starts
daemons against a deleted configuration (issue 36 saw a stray slurmd). `disarmed` removes every armed file under a
directory (hosts/drill_revert.py's watcher exits at its next look) and waits until no watcher of the directory runs."""

import time
from pathlib import Path

from runbooks.acceptance.faults import Switches


def watchers(directory: Path) -> list[int]:
    """Pids of the drill_revert processes watching a file under `directory` (their command line names it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if any(w.endswith(b"drill_revert.py") for w in words) and any(w.startswith(str(directory).encode() + b"/")
                                                                          for w in words):
            found.append(int(cmdline.parent.name))
    return found


def disarmed(directory: Path, timeout_s: float = 5.0) -> list[int]:
    """Disarms every switch under `directory`; the pids still watching after timeout_s (none when it worked)."""
    for armed in directory.glob("*.json"):
        Switches.disarm(str(armed))
    deadline = time.monotonic() + timeout_s
    while (left := watchers(directory)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left
