"""hosts/drill_node.py against an scontrol double that keeps a node's State and Reason as Slurm 22.05 changes them
(`state=resume` clears DOWN and DRAIN; `state=drain` sets DRAIN and the reason) and prints `show node` as
`--oneliner` does, Reason last."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hosts import drill_node

NODE = "gpu-a800-05"
SCONTROL = '''#!/usr/bin/env python3
import json, os, sys
path = os.environ["NODE_STATE"]
node = json.load(open(path))
args = sys.argv[1:]
if args[:3] == ["--oneliner", "show", "node"]:
    reason = f" Reason={node['reason']} [root@2026-12-03T10:00:00]" if node["reason"] else ""
    print(f"NodeName={args[3]} Arch=x86_64 CPUAlloc=0 State={'+'.join(node['state'])} Partitions=a800-train{reason}")
elif args[0] == "update":
    change = dict(a.split("=", 1) for a in args[1:])
    if change["state"] == "resume":
        node["state"] = [s for s in node["state"] if s not in ("DOWN", "DRAIN", "NOT_RESPONDING")] or ["IDLE"]
        node["state"] = ["IDLE" if s == "DOWN" else s for s in node["state"]]
        node["reason"] = ""
    elif change["state"] == "drain":
        node["state"] = [*node["state"], "DRAIN"]
        node["reason"] = change["reason"]
    json.dump(node, open(path, "w"))
    open(path + ".log", "a").write(" ".join(args) + "\\n")
'''


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "scontrol"
    fake.write_text(SCONTROL.replace("/usr/bin/env python3", sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("NODE_STATE", str(tmp_path / "node.json"))
    return tmp_path / "node.json"


def set_node(path: Path, state: list[str], reason: str) -> None:
    path.write_text(json.dumps({"state": state, "reason": reason}))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, drill_node.__file__, *args], capture_output=True, text=True, check=False,
                          timeout=30)


def test_should_give_a_lent_node_its_drain_back_after_the_power_returns(slurm: Path, tmp_path: Path) -> None:
    saved = str(tmp_path / "saved.json")
    set_node(slurm, ["IDLE", "DRAIN"], "gpuctl-lend: lent to inference")
    assert run("save", NODE, saved).returncode == 0
    set_node(slurm, ["DOWN", "DRAIN", "NOT_RESPONDING"], "Not responding")  # the power loss
    done = run("restore", NODE, saved)
    assert done.returncode == 0, done.stderr
    assert json.loads(slurm.read_text()) == {"state": ["IDLE", "DRAIN"], "reason": "gpuctl-lend: lent to inference"}
    assert "drained again: gpuctl-lend: lent to inference" in done.stdout
    # The switch firing late runs the undo again: the node stays drained.
    assert run("restore", NODE, saved).returncode == 0
    assert json.loads(slurm.read_text())["state"] == ["IDLE", "DRAIN"]


def test_should_resume_a_node_only_the_drill_took_down(slurm: Path, tmp_path: Path) -> None:
    saved = str(tmp_path / "saved.json")
    set_node(slurm, ["MIXED"], "")
    assert run("save", NODE, saved).returncode == 0
    set_node(slurm, ["DOWN", "NOT_RESPONDING"], "Not responding")
    assert run("restore", NODE, saved).returncode == 0
    assert json.loads(slurm.read_text()) == {"state": ["IDLE"], "reason": ""}
