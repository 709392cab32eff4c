"""Layering: components never import runbooks or policy; pure modules never import pulumi."""

import ast
import sys
from pathlib import Path

import pytest

from tests.builders import REPO

# Planning and rendering modules: pure functions of the spec, testable without the Pulumi runtime. Only each
# concern's component.py, the cluster and the manifest helper turn plans into resources.
RESOURCE_MODULES = {"component.py", "cluster.py", "k8s.py"}
PURE = sorted(p for p in (REPO / "components").rglob("*.py") if p.name not in RESOURCE_MODULES)


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted((REPO / "components").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_should_deny_components_importing_runbooks_or_policy(path: Path) -> None:
    assert not imports(path) & {"runbooks", "policy"}


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(REPO)))
def test_should_deny_pulumi_in_pure_modules(path: Path) -> None:
    assert "pulumi" not in imports(path)


# Programs copied to hosts and run by their own python3: nothing of the project or its virtualenv is there.
HOST_PROGRAMS = ["hosts/node_check.py", "hosts/slurm_exporter.py", "hosts/checkpoint_mover.py"]


@pytest.mark.parametrize("program", HOST_PROGRAMS)
def test_should_keep_host_programs_to_the_standard_library(program: str) -> None:
    assert imports(REPO / program) <= set(sys.stdlib_module_names) | {"__future__"}
