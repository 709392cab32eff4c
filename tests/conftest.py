import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runbooks.stack.audit import KEY_FILE_ENV
from tests.builders import prod_values
from tests.harness.figures import FIGURES
from tests.harness.sharing import (  # noqa: F401 (hooks: tests sharing a daemon share a pytest-xdist worker)
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_runtest_setup,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker hands its figures to the controller, which prints them.
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["figures"] = FIGURES


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    FIGURES.extend(getattr(node, "workeroutput", {}).get("figures", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("measured figures")
        for line in FIGURES:
            terminalreporter.line(line)
