"""The production diagnosis path: `ssh_command` as the unit runs it, through a fake `ssh` on PATH that reads its argv
as OpenSSH's getopt does and runs the remote line with `sh -c` as the node's login shell would, where a fake `crictl`
answers `ps` with the DCGM container and `exec ... dcgmi diag` with a recorded document; the real timeout(1) bounds
it. Both fakes record their argv."""

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components.scheduling.health_decision import Diagnosis, DiagStatus
from components.site.derived import nodes_by_name
from components.site.site import Site
from components.site.wellknown import CRI_ENDPOINT, DCGM_CONTAINER
from runbooks.health.diagnose import SSH_CONNECT_TIMEOUT_S, Diagnoser, ssh_command
from tests.builders import parse, prod_values
from tests.harness.fake_tools import put_on_path

RECORDS = Path(__file__).parents[2] / "hosts" / "records"
CONTAINER = "3f2a9c1b7d4e"

# OpenSSH's option letters (ssh.c, the getopt() of main; those followed by ':' take a value): a destination or user
# that reads as an option to these reads so to ssh.
FAKE_SSH = f"""#!{sys.executable}
import getopt, json, os, sys
options, rest = getopt.getopt(sys.argv[1:], "1246ab:c:e:fgi:kl:m:no:p:qstvxAB:CD:E:F:GI:J:KL:MNO:P:Q:R:S:TVw:W:XYy")
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"ssh": sys.argv[1:], "options": options, "destination": rest[:1], "remote": rest[1:]}})
              + "\\n")
if not rest:
    sys.exit(255)
os.execvp("sh", ["sh", "-c", " ".join(rest[1:])])
"""

FAKE_CRICTL = f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"crictl": args, "pid": os.getpid()}}) + "\\n")
if args[2:3] == ["ps"]:
    print("{CONTAINER}")
    sys.exit(0)
if args[2:4] == ["exec", "{CONTAINER}"] and args[4:7] == ["dcgmi", "diag", "-r"] and args[8:] == ["-j"]:
    if os.environ.get("FAKE_DCGMI_HANG"):
        time.sleep(600)
    sys.stdout.write(open(os.environ["FAKE_DCGMI_OUTPUT"]).read())
    sys.exit(int(os.environ["FAKE_DCGMI_EXIT"]))
sys.exit(2)
"""


@dataclass
class Node:
    log: Path
    monkeypatch: pytest.MonkeyPatch

    def answers(self, record: str, code: int) -> None:
        body = self.log.parent / "dcgmi.out"
        body.write_text((RECORDS / record).read_text().split("# ---\n", 1)[1])
        self.monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(body))
        self.monkeypatch.setenv("FAKE_DCGMI_EXIT", str(code))

    def calls(self, tool: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []
        return [line for line in lines if tool in line]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    put_on_path(tmp_path / "bin", monkeypatch, {"ssh": FAKE_SSH, "crictl": FAKE_CRICTL})
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    yield Node(log, monkeypatch)


def site(**changes: object) -> Site:
    prod = parse(prod_values())
    check = changes.pop("diag_timeout_s", None)
    if check is not None:
        changes["node_check"] = prod.node_check.model_copy(update={"diag_timeout_s": check})
    return prod.model_copy(update=changes)


def verdict(diagnoser: Diagnoser, name: str, timeout_s: float = 20) -> Diagnosis:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = diagnoser.status(name)
        if found is not None and found.status != DiagStatus.RUNNING:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no verdict on {name} within {timeout_s} s")


def test_should_run_dcgmi_diag_in_the_dcgm_container_over_ssh_and_pass_the_node_on_a_passing_document(
        node: Node, tmp_path: Path) -> None:
    prod = site()
    node.answers("dcgmi-diag-r3-pass-dcgm4.json", 0)
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    diagnoser.start("gpu-a800-01")
    found = verdict(diagnoser, "gpu-a800-01")
    assert found.status == DiagStatus.PASSED and found.detail.startswith("dcgmi diag -r 3: ")
    (ssh,) = node.calls("ssh")
    assert ssh["destination"] == [nodes_by_name(prod)["gpu-a800-01"].ssh_host]
    assert ["-i", prod.health.ssh_key] in ssh["options"] and ["-l", prod.ssh_user] in ssh["options"]
    assert ["-o", "BatchMode=yes"] in ssh["options"] and ["-o", "StrictHostKeyChecking=yes"] in ssh["options"]
    assert ["-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"] in ssh["options"]
    ps, run = (c["crictl"] for c in node.calls("crictl"))
    # The remote shell hands crictl each value as one word: the anchored name, the endpoint, the container found.
    assert ps == ["--runtime-endpoint", CRI_ENDPOINT, "ps", "--name", f"^{DCGM_CONTAINER}$", "--state", "Running",
                  "--quiet"]
    assert run == ["--runtime-endpoint", CRI_ENDPOINT, "exec", CONTAINER, "dcgmi", "diag", "-r", "3", "-j"]


def test_should_fail_the_node_on_a_failing_document_naming_the_gpu(node: Node, tmp_path: Path) -> None:
    prod = site()
    node.answers("dcgmi-diag-r3-fail-dcgm4.json", 226)
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    diagnoser.start("gpu-a800-02")
    found = verdict(diagnoser, "gpu-a800-02")
    assert found.status == DiagStatus.FAILED and "GPU 3" in found.detail, found


def test_should_run_level_1_on_a_consumer_gpu(node: Node, tmp_path: Path) -> None:
    prod = site()
    node.answers("dcgmi-diag-r3-pass-dcgm4.json", 0)
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    diagnoser.start("gpu-4090-01")
    verdict(diagnoser, "gpu-4090-01")
    assert node.calls("crictl")[-1]["crictl"][-3:] == ["-r", "1", "-j"]


def test_should_never_let_a_user_spelt_as_an_option_reach_ssh_as_one(node: Node, tmp_path: Path) -> None:
    user = "-oProxyCommand=sh -c 'touch pwned'"
    prod = site(ssh_user=user)
    node.answers("dcgmi-diag-r3-pass-dcgm4.json", 0)
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    diagnoser.start("gpu-a800-01")
    assert verdict(diagnoser, "gpu-a800-01").status == DiagStatus.PASSED
    (ssh,) = node.calls("ssh")
    assert ["-l", user] in ssh["options"]
    assert not any(value.startswith("ProxyCommand") for _, value in ssh["options"])
    assert ssh["destination"] == [nodes_by_name(prod)["gpu-a800-01"].ssh_host]


def test_should_stop_a_diagnosis_on_the_node_at_diag_timeout_s_and_read_it_as_stopped(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prod = site(diag_timeout_s=1)
    node.answers("dcgmi-diag-r3-pass-dcgm4.json", 0)
    monkeypatch.setenv("FAKE_DCGMI_HANG", "1")
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    started = time.monotonic()
    diagnoser.start("gpu-a800-01")
    found = verdict(diagnoser, "gpu-a800-01")
    assert found.status == DiagStatus.FAILED and "did not finish within 1 s and was stopped" in found.detail
    assert time.monotonic() - started < 10  # timeout(1)'s 1 s, not the hang's 600


def test_should_leave_nothing_running_past_diag_timeout_s_when_it_stops_a_diagnosis(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopping ends the local ssh at once; what ran on the node (here: beside it) is ended by the node's timeout(1),
    as a real ssh killed without a terminal leaves its remote command running."""
    prod = site(diag_timeout_s=2)
    node.answers("dcgmi-diag-r3-pass-dcgm4.json", 0)
    monkeypatch.setenv("FAKE_DCGMI_HANG", "1")
    diagnoser = Diagnoser(prod, tmp_path / "state", ssh_command(prod))
    diagnoser.start("gpu-a800-01")
    started = time.monotonic()
    ssh = diagnoser.running["gpu-a800-01"][0]
    while len(node.calls("crictl")) < 2 and time.monotonic() < started + 10:
        time.sleep(0.05)
    hung = int(node.calls("crictl")[-1]["pid"])
    diagnoser.stop("gpu-a800-01")
    assert ssh.poll() is not None
    while alive(hung) and time.monotonic() < started + 15:
        time.sleep(0.05)
    assert not alive(hung), "the hung dcgmi outlived diag_timeout_s"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
