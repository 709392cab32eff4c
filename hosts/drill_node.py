"""A node-failure drill's Slurm side that undoes only what the drill did: a node another actor had drained (the lending
controller's lend, an administrator's drain) is drained again with its own reason once it is back.

    drill_node.py save NODE FILE      before the power loss: the node's State and Reason to FILE
    drill_node.py restore NODE FILE   after power on: `state=resume` (Slurm keeps a node that came back DOWN), then
                                      `state=drain reason=<saved reason>` if it was drained before the drill

Slurm's RESUME clears DRAIN with DOWN, so a plain resume after the drill gave a lent node back to training while it
was still labelled for inference (issue 36). Without FILE (the drill died before it saved), a node that shows DRAIN
now is left as it is: the drain is someone else's, not the power loss's (which makes a node DOWN, not DRAIN).
Python 3.10+, standard library only, no project imports: it runs where the drill's undo and its switch run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

TIMEOUT_S = 30.0
"""s one scontrol call may take."""


def scontrol(*args: str) -> str:
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scontrol {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def node_fields(node: str) -> dict[str, str]:
    """State (`IDLE+DRAIN`) and Reason (without Slurm's ` [user@time]`) of `scontrol --oneliner show node`."""
    out = scontrol("--oneliner", "show", "node", node)
    fields = {"State": next((w.split("=", 1)[1] for w in out.split() if w.startswith("State=")), "")}
    # Reason may hold spaces; it is the last field and runs to the end of the line.
    fields["Reason"] = out.split("Reason=", 1)[1].rsplit(" [", 1)[0].strip() if "Reason=" in out else ""
    return fields


def drained(state: str) -> bool:
    return "DRAIN" in state.split("+")


def save(node: str, path: str) -> None:
    fields = node_fields(node)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(fields, handle)


def restore(node: str, path: str) -> str:
    """What it did, in words."""
    try:
        with open(path, encoding="utf-8") as handle:
            before: dict[str, str] | None = json.load(handle)
    except FileNotFoundError:
        before = None
    if before is None:
        if drained(node_fields(node)["State"]):
            return f"{node} is drained by someone else and no state was saved: left as it is"
        scontrol("update", f"nodename={node}", "state=resume")
        return f"{node} resumed"
    scontrol("update", f"nodename={node}", "state=resume")
    if drained(before.get("State", "")):
        scontrol("update", f"nodename={node}", "state=drain", f"reason={before.get('Reason') or 'drained'}")
        os.unlink(path)
        return f"{node} resumed and drained again: {before.get('Reason')}"
    os.unlink(path)
    return f"{node} resumed"


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("save", "restore"):
        print(__doc__, file=sys.stderr)
        return 2
    action, node, path = argv
    try:
        if action == "save":
            save(node, path)
        else:
            print(restore(node, path))
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
        print(f"drill_node {action} {node}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
