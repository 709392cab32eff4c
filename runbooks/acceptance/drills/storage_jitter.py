"""Delay on the storage path a GPU node's checkpoint writes take: netem delay of the spec's delay_ms (varying by half
of it) on the node's storage interface, under the storage load. Writes must slow past the delay while it holds and
speed up after, and every checkpoint must read back with its sha256.

    storage_jitter: {node: gpu-a800-06, interface: ens2f0}
"""

from components.site.acceptance import Drill
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault, netem_delay, storage_delay
from runbooks.acceptance.probes import StorageJitterProbe
from runbooks.acceptance.registry import DrillType, Scene
from runbooks.acceptance.targets import Interface, NodeTargets, over_ssh


class StorageJitterTargets(NodeTargets):
    interface: Interface
    """The node's interface on the storage network."""


class StorageJitter(DrillType[StorageJitterTargets]):
    name = "storage_jitter"
    sop = "storage-jitter"
    alert = "StorageJitter"
    targets = StorageJitterTargets

    def fault(self, targets: StorageJitterTargets, drill: Drill, scene: Scene) -> Fault:
        delayed = storage_delay(self.name, targets.interface, netem_delay(drill.delay_ms or 1))
        return over_ssh(delayed, scene.site, targets.node, drill)

    def probe(self, targets: StorageJitterTargets, drill: Drill, scene: Scene) -> Probe:
        return StorageJitterProbe(scene.storage, (drill.delay_ms or 1) / 1000, scene.tier, scene.checkpoints)

    def node(self, targets: StorageJitterTargets) -> str:
        return targets.node


DRILL = StorageJitter()
