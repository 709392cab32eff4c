"""A drill added as one module (and its SOP, marker-flap.md beside it): a marker file stands for the fault, touched to
inject it and removed to revert it, and the probe reads the file, as tests/runbooks/acceptance/test_campaign.py's
marker faults do.

    marker_flap: {marker: /var/lib/gpuctl/marker}
"""

from pathlib import Path

from components.site.acceptance import Drill
from components.site.types import AbsolutePath
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault
from runbooks.acceptance.registry import DrillTargets, DrillType, Scene
from tests.runbooks.acceptance.test_campaign import MarkerProbe


class MarkerFlapTargets(DrillTargets):
    marker: AbsolutePath
    """The file whose presence is the fault."""


class MarkerFlap(DrillType[MarkerFlapTargets]):
    name = "marker_flap"
    sop = "marker-flap"
    alert = None
    targets = MarkerFlapTargets

    def fault(self, targets: MarkerFlapTargets, drill: Drill, scene: Scene) -> Fault:
        return Fault(
            self.name, f"marker {targets.marker}", (("touch", targets.marker),), (("rm", "-f", targets.marker),)
        )

    def probe(self, targets: MarkerFlapTargets, drill: Drill, scene: Scene) -> Probe:
        return MarkerProbe(Path(targets.marker))


DRILL = MarkerFlap()
