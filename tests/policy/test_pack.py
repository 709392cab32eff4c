"""The pack's shape: every module's policies in it, named and described by the conventions, importing no program."""

import ast
import re
from pathlib import Path

import cooling
import hygiene
import observability
import preemption
import pytest
import storage
import wiring
from pulumi_policy import Policy

from tests.builders import REPO

MODULES = [cooling, hygiene, observability, preemption, storage, wiring]
POLICIES = [p for m in MODULES for p in m.POLICIES]


def test_should_name_every_policy_once_in_kebab_case() -> None:
    names = [p.name for p in POLICIES]
    assert len(names) == len(set(names))
    assert [n for n in names if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", n)] == []


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_should_describe_each_policy_in_one_sentence(policy: Policy) -> None:
    assert re.fullmatch(r"[A-Z][^.]*(\.\d[^.]*)*\.", policy.description), policy.description


@pytest.mark.parametrize("path", sorted((REPO / "policy").glob("*.py")), ids=lambda p: p.name)
def test_should_deny_policy_modules_importing_the_program(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert not imported & {"components", "runbooks", "pulumi"}
