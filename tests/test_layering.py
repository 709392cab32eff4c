"""Layering: components never import runbooks or policy; pure modules never import pulumi."""

import ast
import sys
from pathlib import Path

import pytest

from tests.builders import REPO

# Planning and rendering modules: pure functions of the spec, testable without the Pulumi runtime.
PURE = [
    "alert_rules", "alertmanager_config", "catalog", "charts", "dashboards", "dcgm_counters", "defaults",
    "kueue_config", "node_validation", "onboarding",
    "power", "preemption", "problems", "rules", "site", "site_config", "slurm_config",
]


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted((REPO / "components").glob("*.py")), ids=lambda p: p.name)
def test_should_deny_components_importing_runbooks_or_policy(path: Path) -> None:
    assert not imports(path) & {"runbooks", "policy"}


@pytest.mark.parametrize("module", PURE)
def test_should_deny_pulumi_in_pure_modules(module: str) -> None:
    assert "pulumi" not in imports(REPO / "components" / f"{module}.py")


def test_should_list_every_pure_module_that_exists() -> None:
    assert all((REPO / "components" / f"{m}.py").exists() for m in PURE)


# Programs copied to hosts and run by their own python3: nothing of the project or its virtualenv is there.
HOST_PROGRAMS = ["components/node_check.py", "components/slurm_exporter.py", "runbooks/checkpoint_tiering.py"]


@pytest.mark.parametrize("program", HOST_PROGRAMS)
def test_should_keep_host_programs_to_the_standard_library(program: str) -> None:
    assert imports(REPO / program) <= set(sys.stdlib_module_names) | {"__future__"}
