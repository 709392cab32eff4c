import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.builders import prod_values
from tests.harness.figures import FIGURES
from tests.harness.slurm_cluster import (  # noqa: F401 (the real Slurm cluster's fixtures, for every module)
    cluster,
    flex_slurm,
    slurm,
)


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
