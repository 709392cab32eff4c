"""Where a production campaign's drills land and what its loads hit: the targets file an operator writes beside the
stack file, one entry per drill of the spec, read through that drill's schema (its module under
runbooks/acceptance/drills/, whose docstring shows its entry), and the loads' entry:

    node_failure:      {node: gpu-a800-05, bmc_password_file: /etc/gpucluster/bmc-password}
    network_partition: {node: gpu-a800-06, interface: ens1f0, exporter: "http://gpu-a800-06:9400/metrics"}
    storage_jitter:    {node: gpu-a800-06, interface: ens2f0}
    model_hot_swap:    {model: qwen2-5-72b, new_version: 2,
                        to_new: [kubectl, -n, inference, set, image, deploy/qwen2-5-72b, "vllm=<new image>"],
                        to_old: [kubectl, -n, inference, rollout, undo, deploy/qwen2-5-72b]}
    loads: {gateway_url: "https://llm.example.internal", model: qwen2-5-72b,
            hot_dir: /mnt/hot/nfs-a/platform/acceptance}

Nodes are the spec's (their SSH and BMC addresses, ssh_user, bmc_user). A fault on a node's own network (partition,
storage jitter) arms a systemd timer on the node first (`systemd-run --on-active`), which reverts it even when the node
can no longer be reached to undo it; the BMC power-off is reverted from here, through the BMC, which stays reachable.
Every fault that lands on a node holds it against the node health controller while it is in (faults.held).
The inference load's key is GPUCTL_ACCEPTANCE_KEY's (the platform account's gateway key, in the Secret
llm-gateway-platform of the inference namespace), never in the file.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, field_validator

from components.site.acceptance import Drill
from components.site.site import Node, Site
from runbooks.acceptance.campaign import Target
from runbooks.acceptance.faults import Fault, held
from runbooks.acceptance.registry import DrillTargets, DrillType, Scene

INTERFACE = re.compile(r"^[A-Za-z0-9._-]{1,15}$")
"""A Linux interface name (IFNAMSIZ 16 with its NUL): nothing a remote shell would read as more than a word."""
KEY_ENV = "GPUCTL_ACCEPTANCE_KEY"


class TargetsError(Exception):
    """The targets file is wrong; the message names the key and the rule."""


def _interface_name(value: str) -> str:
    if not INTERFACE.match(value):
        raise ValueError(f"{value!r} is not an interface name (letters, digits, . _ -; 15 at most)")
    return value


Interface = Annotated[str, AfterValidator(_interface_name)]
"""A node's network interface, as its drill's commands name it on the node."""
Command = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
"""A command as a list of words, run with no shell."""


def spec_node(site: Site, name: str) -> Node:
    """The spec's node of that name (a NodeTargets' node is one: validated against the site)."""
    return next(n for g in site.node_groups for n in g.nodes if n.name == name)


class NodeTargets(DrillTargets):
    """The entry of a drill that lands on one node."""

    node: str
    """A node of the spec, by name."""

    @field_validator("node")
    @classmethod
    def _in_spec(cls, name: str, info: ValidationInfo) -> str:
        site = (info.context or {}).get("site")
        if not isinstance(site, Site) or not any(n.name == name for g in site.node_groups for n in g.nodes):
            raise ValueError(f"no node named {name!r} in the spec")
        return name


def ssh_to(site: Site, node: str) -> tuple[str, ...]:
    """The command prefix that runs a command on the spec's node `node` as site.ssh_user, never asking for a
    password."""
    return ("ssh", "-o", "BatchMode=yes", f"{site.ssh_user}@{spec_node(site, node).ssh_host}", "--")


def over_ssh(fault: Fault, site: Site, node: str, drill: Drill) -> Fault:
    """A fault of a node's own network run there (on_node), its timer reverting it at the drill's scaled deadline."""
    ssh = ssh_to(site, node)
    unit = f"gpucluster-drill-{fault.drill.replace('_', '-')}"
    return on_node(fault, ssh, site.acceptance.scaled(drill.revert_after_s), unit)


def on_node(fault: Fault, ssh: Sequence[str], revert_after_s: float, unit: str) -> Fault:
    """The fault's commands run on the node over SSH, a systemd timer armed there first that runs the undo at the
    deadline (systemd-run(1) --on-active), and stopped by the undo."""
    timer = tuple(w for argv in fault.undo for w in argv)
    return Fault(fault.drill, fault.where,
                 ((*ssh, "systemd-run", f"--on-active={max(int(revert_after_s), 1)}s", f"--unit={unit}", *timer),
                  *((*ssh, *argv) for argv in fault.inject)),
                 (*((*ssh, *argv) for argv in fault.undo), (*ssh, "systemctl", "stop", f"{unit}.timer")))


def read_targets(site: Site, drills: Sequence[Drill], entries: Mapping[str, Any],
                 kinds: Mapping[str, DrillType[DrillTargets]]) -> dict[str, DrillTargets]:
    """The entry of each of the spec's `drills` (site.acceptance.drills) in the targets file, read through its drill
    module's schema (`kinds`). TargetsError lists every problem, each naming the key and the rule."""
    problems: list[str] = []
    found: dict[str, DrillTargets] = {}
    for index, drill in enumerate(drills):
        kind = str(drill.kind)
        drill_type = kinds.get(kind)
        entry = entries.get(kind)
        if drill_type is None:
            problems.append(f"acceptance.drills[{index}].kind: no drill module named {kind!r} in "
                            f"runbooks/acceptance/drills/ (there are: {', '.join(sorted(kinds))})")
        elif not isinstance(entry, Mapping):
            problems.append(f"{kind}: missing (every drill of the spec needs its target)")
        else:
            try:
                found[kind] = drill_type.targets.model_validate(entry, context={"site": site})
            except ValidationError as error:
                problems += [f"{kind}.{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                             for e in error.errors()]
    if problems:
        raise TargetsError("; ".join(problems))
    return found


def drill_targets(drills: Sequence[Drill], read: Mapping[str, DrillTargets],
                  kinds: Mapping[str, DrillType[DrillTargets]], scene: Scene) -> dict[str, Target]:
    """Each of `drills` placed where its entry (`read`: read_targets) says, by its drill module: its fault (held
    against the node health controller when it lands on a node, faults.held), its probe, the labels its alert must
    carry."""
    found: dict[str, Target] = {}
    for drill in drills:
        drill_type, targets = kinds[drill.kind], read[drill.kind]
        fault, node = drill_type.fault(targets, drill, scene), drill_type.node(targets)
        if node is not None:
            fault = held(replace(fault, where=node), node)
        found[drill.kind] = Target(fault, drill_type.probe(targets, drill, scene), {"Hostname": node} if node else {})
    return found


def hot_dir(targets: dict[str, Any]) -> Path:
    value = (targets.get("loads") or {}).get("hot_dir")
    if not isinstance(value, str) or not value.startswith("/"):
        raise TargetsError("loads.hot_dir: an absolute directory on the hot tier is required")
    return Path(value)
