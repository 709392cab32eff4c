"""How a child process that gpuctl starts (the policy pack, a consumer check) failed, said in one line.

A child that dies is the program failing (exit 1), never invalid input: the line names its exit status, and a
Python child's missing module as what it is, so `No module named 'pulumi_policy'` reads as an install problem.
"""

import re
import signal
import sys

TAIL_LINES = 8
"""Lines of a child's stderr shown under its one-line cause."""
_MISSING_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'", re.MULTILINE)
_EXCEPTION = re.compile(r"^(?:[\w.]+(?:Error|Exception|Exit)|error): .*$", re.MULTILINE)


def exit_status(returncode: int) -> str:
    """`exited with status 1`, or `was killed by SIGKILL` for a negative return code (subprocess's convention)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def missing_module(name: str) -> str:
    return f"module {name!r} is not installed in {sys.prefix} (`make plan` installs what gpuctl needs)"


def cause(stderr: str) -> str | None:
    """The cause a child printed last: a missing module by name, else its last exception line, else nothing."""
    missing = _MISSING_MODULE.findall(stderr)
    if missing:
        return missing_module(missing[-1])
    exceptions = _EXCEPTION.findall(stderr)
    return exceptions[-1].strip() if exceptions else None


def tail(stderr: str, lines: int = TAIL_LINES) -> list[str]:
    return [line for line in stderr.strip().splitlines() if line.strip()][-lines:]
