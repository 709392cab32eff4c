"""The dead-man's switch of an acceptance drill: reverts the drill's fault at its deadline unless the drill disarmed it.

Armed on the machine the fault lands on before the fault is injected (runbooks/acceptance/faults.py), so a drill
whose runbook dies (killed, its host lost, the network cut by the very partition it injected) still ends: at the
deadline this program runs the fault's undo commands itself. Python 3.10+, standard library only, no project
imports: it runs on the nodes.

    drill_revert.py --arm ARMED.json

ARMED.json: {"deadline": <epoch s>, "undo": [[argv...], ...], "env": {...}}, written by root into a directory only
root may write (the program refuses a file or directory others can write: a user who could edit the undo commands
would run them as root). The program detaches (a new session, stdio closed) and polls once a second; removing
ARMED.json disarms it. At the deadline it runs each undo command (no shell, each bounded), writes what happened to
ARMED.json's name with `.fired` in place of `.json`, and removes ARMED.json. Undo commands are idempotent (deleting
a qdisc, setting a link up, starting a daemon), so a drill that reverted first and a switch that fires late agree.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

UNDO_TIMEOUT_S = 30.0
"""s each undo command may run."""
POLL_S = 1.0
"""s between two looks at the deadline and the armed file."""


class UnsafeArmError(Exception):
    pass


def check_owned(path: str) -> None:
    """The file and its directory belong to us and no one else can write them."""
    for each in (path, os.path.dirname(os.path.abspath(path))):
        info = os.lstat(each)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise UnsafeArmError(f"{each} must be ours, not a link, and writable by no one else")


def read_armed(path: str) -> dict[str, Any]:
    check_owned(path)
    with open(path, encoding="utf-8") as handle:
        armed: dict[str, Any] = json.load(handle)
    undo = armed.get("undo")
    if not isinstance(armed.get("deadline"), (int, float)) or not isinstance(undo, list) or not all(
            isinstance(a, list) and a and all(isinstance(w, str) for w in a) for a in undo):
        raise UnsafeArmError(f"{path}: needs a numeric deadline and undo as a list of argument lists")
    return armed


def fire(path: str, armed: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, **{str(k): str(v) for k, v in armed.get("env", {}).items()}}
    results = []
    for argv in armed["undo"]:
        # Output to a file, not a pipe: a daemon the undo starts (setsid -f) would hold a pipe open.
        with tempfile.TemporaryFile() as output:
            try:
                done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                      stderr=subprocess.STDOUT, timeout=UNDO_TIMEOUT_S, check=False)
                output.seek(0)
                results.append({"argv": argv, "rc": done.returncode,
                                "output": output.read()[-500:].decode(errors="replace")})
            except (OSError, subprocess.TimeoutExpired) as error:
                results.append({"argv": argv, "rc": None, "output": f"{error.__class__.__name__}: {error}"[-500:]})
    report = {"fired_at": time.time(), "deadline": armed["deadline"], "results": results}
    fired = path[: -len(".json")] + ".fired" if path.endswith(".json") else path + ".fired"
    with open(fired, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    os.unlink(path)
    return report


def watch(path: str, deadline: float) -> None:
    while os.path.exists(path):
        left = deadline - time.time()
        if left <= 0:
            fire(path, read_armed(path))
            return
        time.sleep(min(POLL_S, left))


def detach() -> bool:
    """Double fork into a new session; True in the detached child, False in the caller."""
    if os.fork() > 0:
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", required=True, help="the armed file (deadline, undo commands)")
    parser.add_argument("--foreground", action="store_true", help="do not detach (for systemd)")
    args = parser.parse_args(argv)
    try:
        armed = read_armed(args.arm)
    except (OSError, ValueError, UnsafeArmError) as error:
        print(f"drill_revert: {error}", file=sys.stderr)
        return 2
    if not args.foreground and not detach():
        return 0
    watch(args.arm, float(armed["deadline"]))
    if not args.foreground:
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
