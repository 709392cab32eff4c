"""The drill registry: one module per drill kind, found by walking its package; a module without its SOP, or a targets
entry its schema refuses, is refused with the module or key and the field named."""

import shutil
import types
from pathlib import Path
from typing import Any

import pytest

from components.site.acceptance import DEFAULT_DRILLS, DrillKind
from runbooks.acceptance.load import Checkpoints, NodeTier, RateLoad
from runbooks.acceptance.registry import RegistryError, Scene, discover, registered, shipped
from runbooks.acceptance.targets import TargetsError, drill_targets, read_targets
from tests.builders import REPO, parse, prod_values
from tests.runbooks.acceptance import fixture_drills
from tests.runbooks.acceptance.fixture_drills import marker_flap
from tests.runbooks.acceptance.test_cli import TARGETS as CLI_TARGETS

SOP_DIR = REPO / "docs" / "sop"
SITE = parse(prod_values())
FIXTURE_SOP = Path(fixture_drills.__file__).parent / "marker-flap.md"
TARGETS = {**CLI_TARGETS, "node_failure": {k: v for k, v in CLI_TARGETS["node_failure"].items() if k != "exporter"}}


def sops(tmp_path: Path, *extra: Path) -> Path:
    """docs/sop as shipped, plus `extra` SOP files."""
    directory = tmp_path / "sop"
    shutil.copytree(SOP_DIR, directory)
    for sop in extra:
        shutil.copy(sop, directory / sop.name)
    return directory


def scene(tmp_path: Path) -> Scene:
    def answered(number: int) -> tuple[bool, dict[str, float]]:
        return True, {}

    return Scene(
        SITE,
        tmp_path / "switches",
        RateLoad("inference", 1, 1, answered),
        RateLoad("storage", 1, 1, answered),
        NodeTier.shell(("sh", "-c"), tmp_path / "hot"),
        Checkpoints(),
    )


def test_should_ship_a_drill_module_for_every_failure_mode_the_spec_requires() -> None:
    drills = shipped(SOP_DIR)
    assert not (lacking := {str(k) for k in DrillKind} - set(drills)), f"no drill module for {lacking}"
    assert all(name == drill.name for name, drill in drills.items())


@pytest.mark.parametrize(
    "default", DEFAULT_DRILLS, ids=lambda d: f"should default {d.kind} to its module's SOP and alert"
)
def test_should_default_each_drill_to_the_sop_and_alert_its_module_names(default: Any) -> None:
    drill = shipped(SOP_DIR)[default.kind]
    assert (default.sop, default.alert) == (drill.sop, drill.alert)


def test_should_register_a_drill_added_as_one_module_with_its_sop(tmp_path: Path) -> None:
    drills = discover(fixture_drills, sops(tmp_path, FIXTURE_SOP))
    assert drills == {"marker_flap": marker_flap.DRILL}


@pytest.mark.parametrize(
    ("sop", "expected"),
    [
        pytest.param(
            None,
            "tests.runbooks.acceptance.fixture_drills.marker_flap.DRILL.sop: docs/sop/marker-flap.md does "
            "not exist: a drill is one module plus its SOP",
            id="should refuse a drill without its SOP",
        ),
        pytest.param(
            "# Marker flap\n\n## Detection\n\nThe marker.\n\n## Impact\n\n## Recovery\n\nRemove it.\n",
            "marker_flap.DRILL.sop: docs/sop/marker-flap.md lacks the sections Impact, Immediate action, Escalation",
            id="should refuse a drill whose SOP lacks sections",
        ),
    ],
)
def test_should_refuse_a_drill_module_without_its_sop(tmp_path: Path, sop: str | None, expected: str) -> None:
    directory = sops(tmp_path)
    if sop is not None:
        (directory / "marker-flap.md").write_text(sop)
    with pytest.raises(RegistryError) as refused:
        discover(fixture_drills, directory)
    assert expected in str(refused.value)


@pytest.mark.parametrize(
    ("drill", "expected"),
    [
        pytest.param(
            None, "scratch.flap.DRILL: a drill module defines DRILL", id="should refuse a module without DRILL"
        ),
        pytest.param(
            marker_flap.DRILL,
            "scratch.flap.DRILL.name: 'marker_flap' must be its module's name",
            id="should refuse a drill named otherwise than its module",
        ),
    ],
)
def test_should_refuse_a_module_that_is_not_one_drill(drill: Any, expected: str) -> None:
    module = types.ModuleType("scratch.flap")
    if drill is not None:
        module.DRILL = drill  # type: ignore[attr-defined]
    with pytest.raises(RegistryError, match=expected):
        registered(module, SOP_DIR)


def test_should_place_every_drill_of_the_spec_from_its_targets_entry(tmp_path: Path) -> None:
    drills, kinds = SITE.acceptance.drills, shipped(SOP_DIR)
    placed = drill_targets(drills, read_targets(SITE, drills, TARGETS, kinds), kinds, scene(tmp_path))
    assert sorted(placed) == sorted(DrillKind)
    assert placed["storage_jitter"].alert_labels == {"Hostname": "gpu-a800-06"}
    assert placed["model_hot_swap"].alert_labels == {} and placed["model_hot_swap"].fault.stays


def test_should_refuse_malformed_targets_naming_every_key_and_field() -> None:
    broken = {
        **TARGETS,
        "network_partition": {"node": "gpu-a800-06", "interface": "eth0; reboot", "exporter": "gpu-a800-06"},
        "node_failure": {"node": "nowhere", "bmc_password_file": "hunter2", "bmc_password": "hunter2"},
        "storage_jitter": {"node": "gpu-a800-06"},
        "model_hot_swap": {**TARGETS["model_hot_swap"], "new_version": 0, "to_old": []},
    }
    with pytest.raises(TargetsError) as refused:
        read_targets(SITE, SITE.acceptance.drills, broken, shipped(SOP_DIR))
    # In the spec's order of drills, each entry's problems in its schema's order of fields.
    assert str(refused.value) == "; ".join(
        [
            "node_failure.node: no node named 'nowhere' in the spec",
            "node_failure.bmc_password_file: an absolute path to a root-only file is required (never the password "
            "itself)",
            "node_failure.bmc_password: Extra inputs are not permitted",
            "network_partition.interface: 'eth0; reboot' is not an interface name (letters, digits, . _ -; 15 at most)",
            "network_partition.exporter: String should match pattern '^https?://\\S+$'",
            "storage_jitter.interface: Field required",
            "model_hot_swap.new_version: Input should be greater than or equal to 1",
            "model_hot_swap.to_old: List should have at least 1 item after validation, not 0",
        ]
    )


def test_should_refuse_a_spec_drill_no_module_implements() -> None:
    drills = {name: drill for name, drill in shipped(SOP_DIR).items() if name != "storage_jitter"}
    with pytest.raises(
        TargetsError,
        match=r"acceptance.drills\[2\].kind: no drill module named 'storage_jitter' in "
        r"runbooks/acceptance/drills/ \(there are: model_hot_swap, ",
    ):
        read_targets(SITE, SITE.acceptance.drills, TARGETS, drills)
