import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runbooks.rollout.audit import KEY_FILE_ENV
from tests.builders import prod_values
from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import (  # noqa: F401 (the real Slurm cluster's fixtures, for every module)
    cluster,
    flex_slurm,
    slurm,
)


@pytest.fixture(scope="session", autouse=True)
def audit_key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """gpuctl's audit key file defaults to /etc/gpucluster/audit.key: every test, and every gpuctl it starts, keeps
    its key in a folder of the session's instead, never the machine's."""
    patch = pytest.MonkeyPatch()
    patch.setenv(KEY_FILE_ENV, str(tmp_path_factory.mktemp("audit-key") / "audit.key"))
    yield
    patch.undo()


@pytest.fixture
def prod() -> dict[str, Any]:
    return prod_values()


@pytest.fixture(scope="session")
def report_figure() -> Callable[[str], None]:
    return FIGURES.append


@pytest.fixture(scope="module")
def module_timer(request: pytest.FixtureRequest, report_figure: Callable[[str], None]) -> Iterator[None]:
    """Use in a module's `pytestmark` (usefixtures) to report how long the whole module took."""
    started = time.monotonic()
    yield
    report_figure(f"{request.module.__name__}: module ran in {time.monotonic() - started:.1f} s")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("measured figures")
        for line in FIGURES:
            terminalreporter.line(line)
