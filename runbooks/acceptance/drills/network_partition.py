"""A node cut off from the controllers and the storage: its link down, on the node, under load. Its exporter must
vanish (DcgmExporterDown for that node) and answer again once the link is back.

A timer armed on the node first (systemd-run --on-active) brings the link back at the revert deadline even when the
node can no longer be reached to undo it (targets.on_node).

    network_partition: {node: gpu-a800-06, interface: ens1f0, exporter: "http://gpu-a800-06:9400/metrics"}
"""

from typing import Annotated

from pydantic import Field

from components.site.acceptance import Drill
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault, link_down
from runbooks.acceptance.probes import NodeDaemonProbe
from runbooks.acceptance.registry import DrillType, Scene
from runbooks.acceptance.targets import Interface, NodeTargets, over_ssh


class NetworkPartitionTargets(NodeTargets):
    interface: Interface
    """The node's uplink, taken down."""
    exporter: Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2048)]
    """The node's exporter /metrics: gone while the link is down, answering again after."""


class NetworkPartition(DrillType[NetworkPartitionTargets]):
    name = "network_partition"
    sop = "network-partition"
    alert = "DcgmExporterDown"
    targets = NetworkPartitionTargets

    def fault(self, targets: NetworkPartitionTargets, drill: Drill, scene: Scene) -> Fault:
        return over_ssh(link_down(self.name, targets.interface), scene.site, targets.node, drill)

    def probe(self, targets: NetworkPartitionTargets, drill: Drill, scene: Scene) -> Probe:
        return NodeDaemonProbe(targets.exporter)

    def node(self, targets: NetworkPartitionTargets) -> str:
        return targets.node


DRILL = NetworkPartition()
