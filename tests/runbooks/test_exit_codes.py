"""One table of exit codes: every gpuctl command exits through runbooks.exit_codes.ExitCode, never a bare number."""

import ast
from pathlib import Path

import pytest

from runbooks.exit_codes import ExitCode
from tests.builders import REPO


def exits(path: Path) -> list[tuple[ast.expr, set[str]]]:
    """The argument of every `typer.Exit(...)` and `SystemExit(...)` in a module, with the parameters of its function
    that are annotated `ExitCode` (a helper that prints and exits passes its typed code on)."""
    found: list[tuple[ast.expr, set[str]]] = []

    def visit(node: ast.AST, typed: set[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            typed = {a.arg for a in node.args.args
                     if a.annotation is not None and ast.unparse(a.annotation) == "ExitCode"}
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("Exit", "SystemExit"):
                found.append((node.args[0], typed))
        for child in ast.iter_child_nodes(node):
            visit(child, typed)

    visit(ast.parse(path.read_text()), set())
    return found


def from_the_table(code: ast.expr, typed: set[str]) -> bool:
    return ast.unparse(code).startswith("ExitCode.") or (isinstance(code, ast.Name) and code.id in typed)


@pytest.mark.parametrize("module", sorted((REPO / "runbooks").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_should_exit_only_with_a_code_from_the_table(module: Path) -> None:
    bare = [ast.unparse(code) for code, typed in exits(module) if not from_the_table(code, typed)]
    assert bare == []


def test_should_refuse_an_untyped_code_passed_through_a_helper(tmp_path: Path) -> None:
    module = tmp_path / "cli.py"
    module.write_text("def fail(code: int):\n    return typer.Exit(code)\n"
                      "def ok(code: ExitCode):\n    return typer.Exit(code)\n"
                      "def main():\n    raise SystemExit(3)\n")
    assert [ast.unparse(c) for c, typed in exits(module) if not from_the_table(c, typed)] == ["code", "3"]


def test_should_keep_the_codes_the_readme_documents() -> None:
    readme = (REPO / "README.md").read_text()
    assert {code.name: code.value for code in ExitCode} == {"DONE": 0, "FAILED": 1, "INVALID": 2, "HELD": 3,
                                                             "ENDED": 4}
    for code in ExitCode:
        assert f"| `{code.value}` |" in readme
