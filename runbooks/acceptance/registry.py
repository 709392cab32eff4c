"""The drill kinds: one module each under runbooks/acceptance/drills/, found by walking that package, so adding a
drill is adding its module and its SOP (docs/architecture.md, "where things go"), never a list kept by hand.

A drill module defines `DRILL`, a DrillType: its name (the module's), the SOP that says what an on-call does when
the failure happens, the alert the production rules raise for it, the typed schema of its entry in the targets file,
and how it injects, detects and reverts its fault there. The campaign (runbooks.acceptance.campaign) drives every
kind alike: it records the fault, arms the dead-man's switch, injects, watches the probe and the alert, reverts.
"""

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

from components.site.acceptance import Drill
from components.site.site import Site
from components.site.types import Spec
from runbooks.acceptance.alerts import sop_missing
from runbooks.acceptance.campaign import Probe
from runbooks.acceptance.faults import Fault
from runbooks.acceptance.load import Checkpoints, RateLoad, Tier


class RegistryError(Exception):
    """A drill module cannot be registered; the message names the module, the field and the rule."""


class DrillTargets(Spec):
    """A drill's entry in the targets file (`<drill name>: {...}`): its fields and their rules, and nothing else (a
    key the drill does not read is refused, as a misspelled one would be)."""


@dataclass(frozen=True)
class Scene:
    """What a drill is placed in besides its targets entry: the site (its nodes, SSH and BMC users), where the campaign
    keeps state a fault must give back (root-only: the switches' directory), and the loads a probe measures."""

    site: Site
    state_dir: Path
    inference: RateLoad
    storage: RateLoad
    tier: Tier
    checkpoints: Checkpoints


TargetsT = TypeVar("TargetsT", bound=DrillTargets)


class DrillType(ABC, Generic[TargetsT]):
    """One failure mode the campaign drills."""

    name: str
    """The drill's kind as the spec (acceptance.drills[].kind) and the targets file name it: its module's name."""
    sop: str
    """docs/sop/<sop>.md: the procedure a failure of this kind is logged under; it must exist with every section."""
    alert: str | None
    """The alert the production rules raise while the fault holds (None: the drill's own measurement detects it)."""
    targets: type[TargetsT]
    """The schema of its entry in the targets file."""

    @abstractmethod
    def fault(self, targets: TargetsT, drill: Drill, scene: Scene) -> Fault:
        """The commands that inject the fault and those that revert it (the drill's, an interrupt's, the switch's)."""

    @abstractmethod
    def probe(self, targets: TargetsT, drill: Drill, scene: Scene) -> Probe:
        """What detects the fault besides its alert, sees service back, and measures the reactions."""

    def node(self, targets: TargetsT) -> str | None:
        """The spec node the fault lands on: held against the health controller while the fault is in, and the
        Hostname its alert must carry. None: the fault lands on no one node (a service)."""
        return None


def discover(package: ModuleType, sop_dir: Path) -> dict[str, DrillType[DrillTargets]]:
    """Every drill module of `package` by its name; RegistryError naming the first module that breaks a rule (no DRILL,
    a name not its module's, a missing or hollow SOP)."""
    found: dict[str, DrillType[DrillTargets]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found[info.name] = registered(module, sop_dir)
    return found


def registered(module: ModuleType, sop_dir: Path) -> DrillType[DrillTargets]:
    """The module's DRILL, checked: named as its module, with its SOP and a targets schema."""
    where = module.__name__
    drill = getattr(module, "DRILL", None)
    if not isinstance(drill, DrillType):
        raise RegistryError(f"{where}.DRILL: a drill module defines DRILL, a DrillType (runbooks.acceptance.registry)")
    if drill.name != where.rsplit(".", 1)[-1]:
        raise RegistryError(f"{where}.DRILL.name: {drill.name!r} must be its module's name, the kind the spec names")
    if not (isinstance(drill.targets, type) and issubclass(drill.targets, DrillTargets)):
        raise RegistryError(f"{where}.DRILL.targets: must be a DrillTargets model (its entry in the targets file)")
    lacks = sop_missing(drill.sop, sop_dir)
    if lacks is not None:
        raise RegistryError(f"{where}.DRILL.sop: {lacks}: a drill is one module plus its SOP")
    return drill


def shipped(sop_dir: Path) -> Mapping[str, DrillType[DrillTargets]]:
    """The drills this project ships (runbooks/acceptance/drills/), each with its SOP under `sop_dir`."""
    from runbooks.acceptance import drills  # the drill modules import this one: walked on demand, not at import

    return discover(drills, sop_dir)
