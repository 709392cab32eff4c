"""A drill holds the node it faults against the node health controller: the production faults (drill_targets) set
gpucluster.io/hold before their first command and remove it after their last undo, and the health controller, reading
kubectl as it does in production, leaves the drilled node alone while the label is there, however bad its GPUs look,
and drains it once the drill's revert (or its dead-man's switch, for a campaign killed mid-drill) has taken it off.

kubectl and ssh are fakes on PATH: kubectl keeps each node's labels, cordon and annotations in a JSON file as the API
server would; ssh records its argv and succeeds (the node's own commands are not what this tests). Slurm is read
through a stand-in scontrol answer: every node idle."""

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.scheduling.health_decision import Action, Reason
from components.site.acceptance import DrillKind
from components.site.site import Site
from components.site.wellknown import HOLD_LABEL
from runbooks.acceptance.faults import Switches, run_commands
from runbooks.flex.lending import run_command
from runbooks.health.controller import Controller, Store
from runbooks.health.diagnose import Diagnoser
from runbooks.health.nodes import Nodes
from tests.builders import parse, prod_values
from tests.harness.fake_tools import put_on_path
from tests.runbooks.acceptance.test_registry import TARGETS, production_faults

FAKE_KUBECTL = f"""#!{sys.executable}
import json, os, sys
state_path = os.environ["FAKE_KUBE_STATE"]
nodes = json.load(open(state_path))
args = [a for a in sys.argv[1:] if a != "--overwrite"]
with open(os.environ["FAKE_KUBE_STATE"] + ".calls", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
def save():
    with open(state_path, "w") as out:
        json.dump(nodes, out)
if args[:2] == ["get", "nodes"]:
    print(json.dumps({{"items": [{{"metadata": {{"name": n, "labels": v["labels"], "annotations": v["annotations"]}},
                                  "spec": {{"unschedulable": True}} if v["cordoned"] else {{}}}}
                                 for n, v in nodes.items()]}}))
elif args[:2] == ["get", "pods"]:
    print(json.dumps({{"items": []}}))
elif args[0] in ("label", "annotate") and args[1] == "node" and args[2] in nodes:
    where = nodes[args[2]]["labels" if args[0] == "label" else "annotations"]
    key, _, value = args[3].partition("=")
    if args[3].endswith("-") and "=" not in args[3]:
        where.pop(args[3][:-1], None)
    else:
        where[key] = value
    save()
elif args[0] in ("cordon", "uncordon") and args[1] in nodes:
    nodes[args[1]]["cordoned"] = args[0] == "cordon"
    save()
else:
    sys.exit(1)
"""

FAKE_SSH = f"""#!{sys.executable}
import sys
sys.exit(0)
"""

XID79 = ("GPU 3: XID 79 (GPU has fallen off the bus)",)


class Kube:
    def __init__(self, state: Path) -> None:
        self.state = state

    def labels(self, node: str) -> dict[str, str]:
        return dict(json.loads(self.state.read_text())[node]["labels"])

    def touched(self, node: str) -> list[list[str]]:
        calls = [json.loads(line) for line in Path(f"{self.state}.calls").read_text().splitlines()]
        return [c for c in calls if c[0] in ("cordon", "annotate") and node in c]


@pytest.fixture
def site() -> Site:
    return parse(prod_values())


@pytest.fixture
def kube(tmp_path: Path, site: Site, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kube]:
    put_on_path(tmp_path / "bin", monkeypatch, {"kubectl": FAKE_KUBECTL, "ssh": FAKE_SSH})
    state = tmp_path / "kube.json"
    state.write_text(json.dumps({n.name: {"labels": {}, "annotations": {}, "cordoned": False}
                                 for g in site.node_groups for n in g.nodes}))
    monkeypatch.setenv("FAKE_KUBE_STATE", str(state))
    yield Kube(state)


def controller(site: Site, tmp_path: Path, sick: str) -> Controller:
    names = [n.name for g in site.node_groups for n in g.nodes]
    scontrol = "\n".join(f"NodeName={n} State=IDLE Partitions=x" for n in names)

    def findings() -> dict[str, tuple[str, ...] | None]:
        return {n: XID79 if n == sick else () for n in names}

    nodes = Nodes(site, lambda args, timeout_s=30: scontrol, run_command, lambda line: None)
    return Controller(site, nodes, findings, Diagnoser(site, tmp_path / "state", lambda n: ["true"]),
                      Store(tmp_path / "state"), say=lambda line: None)


def verdict(c: Controller, node: str) -> tuple[Action, Reason, str]:
    made = next(d for d in c.step().nodes if d.node == node)
    return made.action, made.reason, made.detail


@pytest.mark.parametrize("kind", [DrillKind.NODE_FAILURE, DrillKind.NETWORK_PARTITION, DrillKind.STORAGE_JITTER])
def test_should_hold_the_node_before_the_fault_and_release_it_after_the_undo(kind: DrillKind) -> None:
    fault = production_faults(Path("/var/lib/gpuctl/switches"))[kind]
    node = TARGETS[kind]["node"]
    assert fault.inject[0] == ("kubectl", "label", "--overwrite", "node", node, f"{HOLD_LABEL}=drill-{kind}")
    assert fault.undo[-1] == ("kubectl", "label", "node", node, f"{HOLD_LABEL}-")


def test_should_leave_a_drilled_node_to_the_drill_and_drain_it_once_the_drill_reverts(
        site: Site, kube: Kube, tmp_path: Path) -> None:
    fault = production_faults(tmp_path / "switches")[DrillKind.NETWORK_PARTITION]
    node = fault.where
    run_commands(fault.inject, fault.env)
    assert kube.labels(node) == {HOLD_LABEL: "drill-network_partition"}
    c = controller(site, tmp_path, node)
    for _ in range(2):  # every step, not just the first
        assert verdict(c, node) == (Action.WAIT, Reason.HELD, "held by drill-network_partition")
    assert kube.touched(node) == []
    assert run_commands(fault.undo, fault.env, check=False) == [0] * len(fault.undo)
    assert kube.labels(node) == {}
    assert verdict(c, node)[:2] == (Action.DRAIN, Reason.SUSPECT)
    assert ["cordon", node] in kube.touched(node)


def test_should_release_the_hold_when_the_dead_mans_switch_reverts_a_drill_left_behind(
        site: Site, kube: Kube, tmp_path: Path) -> None:
    """A campaign killed mid-drill (SIGKILL, power): nothing runs its revert but the switch, at the deadline."""
    fault = production_faults(tmp_path / "switches")[DrillKind.STORAGE_JITTER]
    switches = Switches(tmp_path / "switches")
    armed = switches.arm(fault, "killed-run", time.time() + 8)
    run_commands(fault.inject, fault.env)
    c = controller(site, tmp_path, fault.where)
    assert verdict(c, fault.where)[:2] == (Action.WAIT, Reason.HELD)
    assert switches.wait_gone(armed, timeout_s=60), "the switch did not fire"
    fired: dict[str, Any] | None = switches.fired(armed)
    assert fired is not None and kube.labels(fault.where) == {}
    assert verdict(c, fault.where)[:2] == (Action.DRAIN, Reason.SUSPECT)
