"""The drill registry: one module per drill kind, found by walking its package; a module without its SOP, or a targets
entry its schema refuses, is refused with the module or key and the field named."""

import shutil
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from components.site.acceptance import DEFAULT_DRILLS, Acceptance, Drill, DrillKind
from runbooks.acceptance.campaign import Target
from runbooks.acceptance.faults import Fault
from runbooks.acceptance.load import Checkpoints, NodeTier, RateLoad
from runbooks.acceptance.registry import DrillTargets, DrillType, RegistryError, Scene, discover, registered, shipped
from runbooks.acceptance.store import FAILED, PASSED
from runbooks.acceptance.targets import TargetsError, drill_targets, read_targets
from tests.builders import REPO, parse, prod_values
from tests.harness.switches import disarmed
from tests.runbooks.acceptance import fixture_drills
from tests.runbooks.acceptance.fixture_drills import marker_flap
from tests.runbooks.acceptance.test_campaign import DRILL, SPEC, World, failing

SOP_DIR = REPO / "docs" / "sop"
SITE = parse(prod_values())
FIXTURE_SOP = Path(fixture_drills.__file__).parent / "marker-flap.md"
TARGETS: dict[str, Any] = {
    "node_failure": {"node": "gpu-a800-05", "bmc_password_file": "/etc/gpucluster/bmc-password"},
    "network_partition": {"node": "gpu-a800-06", "interface": "ens1f0", "exporter": "http://gpu-a800-06:9400/metrics"},
    "storage_jitter": {"node": "gpu-a800-06", "interface": "ens2f0"},
    "model_hot_swap": {
        "model": "qwen2-5-72b",
        "new_version": 2,
        "to_new": ["kubectl", "-n", "inference", "set", "image", "deploy/qwen2-5-72b", "vllm=new"],
        "to_old": ["kubectl", "-n", "inference", "rollout", "undo", "deploy/qwen2-5-72b"],
    },
    "loads": {"gateway_url": "https://llm.example.internal", "model": "qwen2-5-72b", "hot_dir": "/mnt/hot/acceptance"},
}
"""A production targets file for the prod stack (runbooks/acceptance/targets.py)."""


def sops(tmp_path: Path, *extra: Path) -> Path:
    """docs/sop as shipped, plus `extra` SOP files."""
    directory = tmp_path / "sop"
    shutil.copytree(SOP_DIR, directory)
    for sop in extra:
        shutil.copy(sop, directory / sop.name)
    return directory


def scene(state_dir: Path) -> Scene:
    """The prod site with loads that are never run: what placing a drill reads."""

    def answered(number: int) -> tuple[bool, dict[str, float]]:
        return True, {}

    return Scene(
        SITE,
        state_dir,
        RateLoad("inference", 1, 1, answered),
        RateLoad("storage", 1, 1, answered),
        NodeTier.shell(("false",), state_dir / "hot"),
        Checkpoints(),
    )


def placed(
    drills: Sequence[Drill], entries: dict[str, Any], kinds: Mapping[str, DrillType[DrillTargets]], state_dir: Path
) -> dict[str, Target]:
    """The drills placed as gpuctl acceptance places them (runbooks.acceptance.cli.build): entries read, then placed."""
    return drill_targets(drills, read_targets(SITE, drills, entries, kinds), kinds, scene(state_dir))


def production_faults(state_dir: Path) -> dict[str, Fault]:
    """The prod stack's drills' faults where TARGETS puts them, as gpuctl acceptance places them."""
    return {kind: t.fault for kind, t in placed(SITE.acceptance.drills, TARGETS, shipped(SOP_DIR), state_dir).items()}


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
    targets = placed(SITE.acceptance.drills, TARGETS, shipped(SOP_DIR), tmp_path / "switches")
    assert sorted(targets) == sorted(DrillKind)
    assert targets["storage_jitter"].alert_labels == {"Hostname": "gpu-a800-06"}
    assert targets["model_hot_swap"].alert_labels == {} and targets["model_hot_swap"].fault.stays


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


@pytest.mark.parametrize(
    ("marker", "verdict"),
    [
        pytest.param("flap.fault", PASSED, id="should pass a drill added as one module when its fault shows and goes"),
        pytest.param(
            "absent/flap.fault", FAILED, id="should fail a drill added as one module whose fault cannot be injected"
        ),
    ],
)
def test_should_run_a_drill_added_as_one_module_through_the_campaign(tmp_path: Path, marker: str, verdict: str) -> None:
    sop_dir = sops(tmp_path, FIXTURE_SOP)
    spec = Acceptance.model_validate(
        {
            **SPEC.model_dump(),
            "drills": [*SPEC.model_dump()["drills"], {"kind": "marker_flap", "sop": "marker-flap", **DRILL}],
        }
    )
    # The fixture drill placed as gpuctl acceptance places every drill: its module found by walking its package, its
    # entry read through its schema; the mission's four drills are the campaign test's marker faults.
    fixture = placed(
        spec.drills[-1:],
        {"marker_flap": {"marker": str(tmp_path / marker)}},
        discover(fixture_drills, sop_dir),
        tmp_path / "switches",
    )
    world = World(tmp_path)
    runner, store = world.runner(sop_dir=sop_dir, spec=spec)
    runner.targets.update(fixture)
    try:
        campaign = runner.run("sha256:deployed", "canary")
    finally:
        disarmed(tmp_path / "state" / "sw", timeout_s=0)  # a switch a failed test left must not fire after it
    assert campaign.verdict == verdict, campaign.reason
    detail = store.steps(campaign.id)["drill:marker_flap"][2]
    assert (detail["verdict"], detail["sop"]) == (verdict, "marker-flap")
    assert not (tmp_path / marker).exists(), "the fixture drill's fault is still in place"
    if verdict == FAILED:
        assert failing(store, campaign.id) == ["soak drill:marker_flap"]
        assert detail["error"].startswith("the fault could not be injected: `touch ")
