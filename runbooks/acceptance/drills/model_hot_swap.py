"""A served model replaced by a new version while inference runs at the peak: every answer must come from the new
version within the hold, at no more errors than the spec's budget. The new version stays; the rollback runs only when
the drill dies before its end (the switch, or the resumed campaign). A good swap raises no alert; one that fails
requests raises ModelRequestsFailing (docs/sop/model-requests-failing.md).

    model_hot_swap: {model: qwen2-5-72b, new_version: 2,
                     to_new: [kubectl, -n, inference, set, image, deploy/qwen2-5-72b, "vllm=<new image>"],
                     to_old: [kubectl, -n, inference, rollout, undo, deploy/qwen2-5-72b]}
"""

from typing import Annotated

from pydantic import Field

from components.site.acceptance import Drill
from components.site.types import Name
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault, version_swap
from runbooks.acceptance.probes import HotSwapProbe
from runbooks.acceptance.registry import DrillTargets, DrillType, Scene
from runbooks.acceptance.targets import Command


class ModelHotSwapTargets(DrillTargets):
    model: Name
    """The served model swapped, as the gateway names it."""
    new_version: Annotated[int, Field(ge=1)]
    """The version the new deployment answers with (the load reads it from each answer)."""
    to_new: Command
    """The rollout of the new version (kubectl set image ...)."""
    to_old: Command
    """The rollback to the old one, run only when the drill dies before its end."""


class ModelHotSwap(DrillType[ModelHotSwapTargets]):
    name = "model_hot_swap"
    sop = "model-hot-swap"
    alert = None
    targets = ModelHotSwapTargets

    def fault(self, targets: ModelHotSwapTargets, drill: Drill, scene: Scene) -> Fault:
        return version_swap(self.name, targets.model, targets.to_new, targets.to_old)

    def probe(self, targets: ModelHotSwapTargets, drill: Drill, scene: Scene) -> Probe:
        return HotSwapProbe(scene.inference, targets.new_version, scene.site.acceptance.inference_error_pct)


DRILL = ModelHotSwap()
