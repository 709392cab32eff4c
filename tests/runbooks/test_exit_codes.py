"""One table of exit codes: every gpuctl command exits through runbooks.exit_codes.ExitCode, never a bare number."""

import ast
from pathlib import Path

import pytest

from runbooks.exit_codes import ExitCode
from tests.builders import REPO


def exits(path: Path) -> list[ast.expr]:
    """The argument of every `typer.Exit(...)` and `SystemExit(...)` in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("Exit", "SystemExit"):
                found.append(node.args[0])
    return found


@pytest.mark.parametrize("module", sorted((REPO / "runbooks").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_should_exit_only_with_a_code_from_the_table(module: Path) -> None:
    bare = [ast.unparse(code) for code in exits(module) if not ast.unparse(code).startswith("ExitCode.")]
    assert bare == []


def test_should_keep_the_codes_the_readme_documents() -> None:
    readme = (REPO / "README.md").read_text()
    assert {code.name: code.value for code in ExitCode} == {"DONE": 0, "FAILED": 1, "INVALID": 2, "HELD": 3,
                                                             "ENDED": 4}
    for code in ExitCode:
        assert f"| `{code.value}` |" in readme
