"""The pack's shape: every module's policies in it, named and described by the conventions, importing no program."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pack
import pytest
from pulumi_policy import Policy

from tests.builders import REPO

PACK_MODULES = sorted((REPO / "policy").glob("*.py"))
POLICIES = pack.all_policies()


def test_should_serve_every_policy_each_module_declares_and_no_other() -> None:
    declared = [p for path in PACK_MODULES if path.stem != "__main__"
                for p in getattr(importlib.import_module(path.stem), "POLICIES", [])]
    assert declared and declared == POLICIES
    # __main__ serves pack.all_policies(), not a list of its own.
    main = ast.parse((REPO / "policy" / "__main__.py").read_text())
    assert [ast.unparse(k.value) for node in ast.walk(main) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "policies"] == ["pack.all_policies()"]


def test_should_name_every_policy_once_in_kebab_case() -> None:
    names = [p.name for p in POLICIES]
    assert len(names) == len(set(names))
    assert [n for n in names if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", n)] == []


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_should_describe_each_policy_in_one_sentence(policy: Policy) -> None:
    assert re.fullmatch(r"[A-Z][^.]*(\.\d[^.]*)*\.", policy.description), policy.description


# The pack runs in the policy engine's own virtualenv (policy/requirements.txt), beside nothing of the program.
REQUIREMENT_MODULES = {"pulumi-policy": "pulumi_policy", "common-expression-language": "cel"}
"""What each requirement of the pack is imported as."""


def test_should_know_what_each_requirement_of_the_pack_is_imported_as() -> None:
    lines = (REPO / "policy" / "requirements.txt").read_text().split()
    assert {line.split("==")[0] for line in lines} == set(REQUIREMENT_MODULES)


@pytest.mark.parametrize("path", PACK_MODULES, ids=lambda p: p.name)
def test_should_import_only_the_packs_own_modules_and_its_sdk(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported <= set(sys.stdlib_module_names) | {p.stem for p in PACK_MODULES} | set(REQUIREMENT_MODULES.values())




def test_should_load_every_policy_without_the_cel_packages_repl() -> None:
    # The pack's process as the policy engine starts it (its modules top-level, from policy/): the CEL engine without
    # its package's REPL (typer, prompt_toolkit: most of the process's import time), and a later `import cel` gets the
    # same compiled module, which may be initialized once per process.
    probe = ("import sys, analyzer, pack, isolation as i; pack.all_policies(); repl = 'prompt_toolkit' in sys.modules; "
             "import cel; print(repl, cel.evaluate is i.cel.evaluate, i.admitted(['1 + 2 == 3'], {}, {}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO / "policy",
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
