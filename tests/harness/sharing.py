"""Which tests run on one pytest-xdist worker: those that share an instance of a fixture wider than a test.

`make test` spreads the suite over workers (`-n`, `--dist loadgroup`). A fixture scoped to a module, a package or the
session holds something started once for the tests using it: a daemon (the Slurm cluster, a Prometheus world), a
rendered plan. Spread over workers, each worker would start its own: for the Slurm cluster a conflict (every loopback
cluster names its nodes alike, so a second one waits on a machine-wide lock until the first session ends), for the
others the same start paid once per worker. So every test is grouped with every test it shares such an instance
with, transitively, and with the tests carrying its `xdist_group` mark; a test in no group is scheduled on its own,
wherever a worker is free. The grouping follows the fixtures the tests request: a new module with a module-scoped
daemon is kept together without a mark.

pytest-xdist 3.8's own loadgroup passes groups from the workers to the scheduler inside node ids, which pytest 9.2's
structured node ids no longer allow: the groups are lost and every test is scheduled alone
(https://github.com/pytest-dev/pytest-xdist/issues/1386). So each worker writes the groups it collected to a file
the controller named, and the controller's scheduler reads them from there.

Units go out longest first, so that no long one starts when the others are nearly done and the run waits on it
alone. How long a unit takes is the sum of its tests' `expected_s` marks (seconds on this 2-core machine with the
suite's other workers beside it), a test without one counting DEFAULT_S; xdist's own order (by test count) would
send a one-test unit of two minutes last.
"""

import contextlib
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

CHEAP = frozenset({"report_figure", "module_timer"})
"""Wider-than-a-test fixtures that hold nothing worth starting once: a list to append to, a module's start time."""
GROUPS_FILE = "fixture_groups"
"""The key of workerinput naming the file each worker writes its groups and expected durations to."""
EXPECTED = "expected_s"
"""The mark giving a test's expected seconds: `@pytest.mark.expected_s(90)`."""
DEFAULT_S = 0.3
"""s a test without the mark is expected to take (the suite's median is under 0.1 s; a little more for setup)."""
_GROUPS_DIR = pytest.StashKey[Path]()


def _shared(item: pytest.Item) -> Iterable[str]:
    """What the test shares with others: each wide fixture instance it uses, each xdist_group it is marked with."""
    for mark in item.iter_markers("xdist_group"):
        yield f"mark {mark.args[0] if mark.args else mark.kwargs.get('name', 'default')}"
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    module = item.nodeid.split("::", 1)[0]
    for name in info.names_closure:
        definitions = info.name2fixturedefs.get(name)
        if not definitions:
            continue
        fixture = definitions[-1]  # the one this test gets (a closer definition overrides)
        if name in CHEAP or fixture.scope == "function" or getattr(fixture, "_autouse", False) or _plugins(fixture):
            # One the test gets for itself, one every test gets (autouse: holding its users together would hold them
            # all on one worker; each worker makes its own), or a plugin's (pytest's tmp_path_factory).
            continue
        shared_across = {
            "session": "session",
            "package": module.rsplit("/", 1)[0],
            "module": module,
            "class": item.nodeid.rsplit("::", 1)[0],
        }[fixture.scope]
        yield f"{name}@{shared_across}"


def _plugins(fixture: Any) -> bool:
    """Whether a fixture comes from outside the tests (a plugin, pytest itself), not from a conftest or test module."""
    source = inspect.getsourcefile(fixture.func) or ""
    return "site-packages" in Path(source).parts or "dist-packages" in Path(source).parts


def groups(items: list[pytest.Item]) -> dict[str, str]:
    """nodeid -> group name for every test that shares something with another (union-find over what they share)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    shared: dict[str, list[str]] = {}
    for item in items:
        keys = shared[item.nodeid] = list(_shared(item))
        for key in keys:
            parent.setdefault(key, key)
        for key in keys[1:]:
            first, other = root(keys[0]), root(key)
            if first != other:
                # The smaller name is the group's: every worker collects alike, so every worker names it alike.
                parent[max(first, other)] = min(first, other)
    return {nodeid: root(keys[0]) for nodeid, keys in shared.items() if keys}


def expected_s(item: pytest.Item) -> float | None:
    """The seconds the test's closest `expected_s` mark gives (a test's own before its module's), DEFAULT_S without
    one, None for a mark that gives no positive number (the test then fails at its setup, saying so)."""
    mark = item.get_closest_marker(EXPECTED)
    if mark is None:
        return DEFAULT_S
    seconds = mark.args[0] if mark.args else mark.kwargs.get("seconds")
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def record_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: write the groups and each test's expected seconds where the controller's scheduler reads them
    (whole, or not at all)."""
    target = getattr(config, "workerinput", {}).get(GROUPS_FILE)
    if target is None:
        return  # not a pytest-xdist worker, or not scheduled by fixture groups
    written = Path(f"{target}.{config.workerinput['workerid']}")
    seconds = {item.nodeid: expected_s(item) or DEFAULT_S for item in items}
    written.write_text(json.dumps({"groups": groups(items), "expected_s": seconds}))
    os.replace(written, target)  # every worker collects the same tests: any worker's file serves


def name_groups_file(config: pytest.Config, workerinput: dict[str, Any]) -> None:
    """On the controller: the file a worker writes its groups to (one folder per run, removed at its end)."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    if _GROUPS_DIR not in config.stash:
        config.stash[_GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="pytest-fixture-groups-"))
    workerinput[GROUPS_FILE] = str(config.stash[_GROUPS_DIR] / "groups.json")


def remove_groups_file(config: pytest.Config) -> None:
    with contextlib.suppress(KeyError):
        shutil.rmtree(config.stash[_GROUPS_DIR], ignore_errors=True)


def scheduler(config: pytest.Config, log: Any) -> Any:
    """For `--dist loadgroup`: xdist's scope scheduler, its scopes being the groups the workers recorded; None
    otherwise (xdist's own choice)."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # only where pytest-xdist runs the suite

    class FixtureGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Each group one unit of work, sent whole to one worker; a test in no group a unit of its own. Units
        go out longest first (by their tests' expected seconds)."""

        _recorded: dict[str, dict[str, Any]] | None = None
        _ordered = False

        def _read(self) -> dict[str, dict[str, Any]]:
            if self._recorded is None:
                # Written before the worker reported its collection; the scheduler splits only after every worker did.
                self._recorded = json.loads((config.stash[_GROUPS_DIR] / "groups.json").read_text())
            return self._recorded

        def _split_scope(self, nodeid: str) -> str:
            return str(self._read()["groups"].get(nodeid, nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:
                # The first assignment comes once the whole queue is made (xdist's schedule): order it once.
                self._ordered = True
                units = by_expected_seconds(self.workqueue, self._read()["expected_s"])
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return FixtureGroupScheduling(config, log)


def by_expected_seconds(units: dict[str, dict[str, bool]], seconds: dict[str, float]) -> list[tuple[str, Any]]:
    """xdist's units of work (unit -> its test ids), the longest first (a unit's seconds: the sum of its tests');
    equal ones keep their order."""
    return sorted(units.items(), key=lambda unit: -sum(seconds.get(nodeid, DEFAULT_S) for nodeid in unit[1]))


# The hooks, for tests/conftest.py to import (or `-p tests.harness.sharing`).
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    record_groups(config, items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if expected_s(item) is None:
        mark = item.get_closest_marker(EXPECTED)
        given = (mark.args or tuple(mark.kwargs.values())) if mark else ()
        pytest.fail(f"{EXPECTED} takes the test's expected seconds, a positive number; got {given!r}", pytrace=False)


# pytest-xdist's hooks: known only where the plugin is installed.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    name_groups_file(node.config, node.workerinput)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    remove_groups_file(config)
