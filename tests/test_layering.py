"""Layering: the import-linter contracts in .importlinter (run by `make test`) fail on a wrong-way import, and the
host programs import nothing but the standard library (the pack's own rule is in tests/policy/test_pack.py)."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--config", str(tree / ".importlinter"), "--no-cache"], cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layering")
    for name in ("components", "runbooks", "hosts", ".importlinter"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, copy / name)
    return copy


def test_should_keep_every_contract_on_the_tree_as_it_is(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "wrong_way", "contract"), [
    pytest.param("components/site/site.py", "import components.facility.power", "the site model at the bottom",
                 id="should fail when the spec imports a planner"),
    pytest.param("components/scheduling/kueue.py", "import components.teams.plan", "the site model at the bottom",
                 id="should fail when a concern imports one above it"),
    pytest.param("components/monitoring/alerts.py", "import pulumi", "planners stay pure",
                 id="should fail when a planner imports pulumi"),
    pytest.param("components/storage/component.py", "import runbooks.console", "host programs import nothing",
                 id="should fail when the program imports a runbook"),
    pytest.param("hosts/node_check.py", "import components.site.site", "host programs import nothing",
                 id="should fail when a host program imports the program"),
])
def test_should_fail_a_wrong_way_import(tree: Path, module: str, wrong_way: str, contract: str) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(original + f"\n{wrong_way}  # a deliberate wrong-way import\n")
    try:
        result = lint_imports(tree)
    finally:
        path.write_text(original)
    assert result.returncode == 1, result.stdout
    summary = " ".join(result.stdout.split())  # the report wraps long contract names
    assert re.search(f"{re.escape(contract)}(?:(?!KEPT).)*? BROKEN", summary), result.stdout


@pytest.mark.parametrize(("package", "upward", "contract"), [
    pytest.param("components", "import components.cluster", "the site model at the bottom",
                 id="should refuse a new package of the program that imports the cluster"),
    pytest.param("runbooks", "import runbooks.gpuctl", "shared parts at the bottom",
                 id="should refuse a new package of gpuctl that imports its entry"),
])
def test_should_refuse_a_new_package_the_contracts_do_not_list(tree: Path, package: str, upward: str,
                                                              contract: str) -> None:
    # Without `exhaustive = true` a package no layer names is judged by no layer, and its upward import passes.
    scratch = tree / package / "scratch"
    scratch.mkdir()
    (scratch / "__init__.py").write_text(f"{upward}  # a new package importing upward\n")
    try:
        result = lint_imports(tree)
    finally:
        shutil.rmtree(scratch)
    assert result.returncode == 1, result.stdout
    summary = " ".join(result.stdout.split())
    assert re.search(f"{re.escape(contract)}(?:(?!KEPT).)*? BROKEN", summary), result.stdout
    assert f"{package}.scratch" in summary and "exhaustive" in summary, result.stdout


# Programs copied to hosts and run by their own python3: nothing of the project or its virtualenv is there.
@pytest.mark.parametrize("program", sorted((REPO / "hosts").glob("[!_]*.py")), ids=lambda p: p.name)
def test_should_keep_host_programs_to_the_standard_library(program: Path) -> None:
    assert imports(program) <= set(sys.stdlib_module_names) | {"__future__"}


def where_things_go(doc: str) -> list[str]:
    """What docs/architecture.md's "Where things go" table names that is missing: each path it gives (placeholders
    like <command> aside) must exist, and a NAME given right after a file must be defined in that file."""
    table = doc.split("## Where things go", 1)[1].split("\n## ", 1)[0]
    missing = []
    for path, name in re.findall(r"`([\w./-]+/[\w.-]*)`(?: `([A-Z_]+)`)?", table):
        where = REPO / path
        if not where.exists():
            missing.append(path)
        elif name and not re.search(rf"^{name}\b", where.read_text(), re.M):
            missing.append(f"{path}: {name}")
    return missing


def test_should_find_every_file_and_name_the_where_things_go_table_gives() -> None:
    assert where_things_go((REPO / "docs" / "architecture.md").read_text()) == []


def test_should_report_a_file_or_name_the_table_gives_wrongly() -> None:
    doc = ("## Where things go\n| a | `components/site/catalog.py` `GPU_CATALOGUE` | `components/nowhere.py` |\n"
           "## Next\n`components/gone.py`")
    assert where_things_go(doc) == ["components/site/catalog.py: GPU_CATALOGUE", "components/nowhere.py"]
