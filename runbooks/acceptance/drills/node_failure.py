"""A node's power cut through its BMC under load: Slurm must mark it DOWN and requeue its jobs, none lost.

The power goes off through the BMC (ipmitool, the spec's BMC user, the password from a root-only file, never an
argument) and comes back on from the gpuctl host, since the BMC stays reachable while the node is off. Back on, the
node stays DOWN in Slurm until resumed (docs/sop/slurm-nodes-unavailable.md): the undo resumes it, and drains it again
if someone else had (a lent node stays lent: hosts/drill_node.py).

    node_failure: {node: gpu-a800-05, bmc_password_file: /etc/gpucluster/bmc-password}
"""

import sys
from typing import Annotated, Any

from pydantic import BeforeValidator

from components.site.acceptance import Drill
from components.site.types import AbsolutePath
from hosts import drill_node
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault, bmc_power
from runbooks.acceptance.probes import SlurmNodeProbe, jobs_on
from runbooks.acceptance.registry import DrillType, Scene
from runbooks.acceptance.targets import NodeTargets, spec_node


def _absolute(path: Any) -> Any:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("an absolute path to a root-only file is required (never the password itself)")
    return path


class NodeFailureTargets(NodeTargets):
    bmc_password_file: Annotated[AbsolutePath, BeforeValidator(_absolute)]
    """The root-only file holding the BMC password (ipmitool -f): the password itself is never in the targets file."""


class NodeFailure(DrillType[NodeFailureTargets]):
    name = "node_failure"
    sop = "node-power-loss"
    alert = "SlurmNodesUnavailable"
    targets = NodeFailureTargets

    def fault(self, targets: NodeFailureTargets, drill: Drill, scene: Scene) -> Fault:
        node = spec_node(scene.site, targets.node)
        power = bmc_power(self.name, node.name, node.bmc_host, scene.site.bmc_user, targets.bmc_password_file)
        slurm_side = (sys.executable, drill_node.__file__)
        saved = str(scene.state_dir / f"{node.name}.slurm-state.json")
        return Fault(
            self.name,
            node.name,
            ((*slurm_side, "save", node.name, saved), *power.inject),
            (*power.undo, (*slurm_side, "restore", node.name, saved)),
        )

    def probe(self, targets: NodeFailureTargets, drill: Drill, scene: Scene) -> Probe:
        return SlurmNodeProbe(targets.node, ("squeue",), ("scontrol",), {}, lambda: jobs_on(targets.node))

    def node(self, targets: NodeFailureTargets) -> str:
        return targets.node


DRILL = NodeFailure()
