import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.builders import prod_values

FIGURES: list[str] = []
"""Measured figures (bring-up times, delivery latencies), printed at the end of every run, captured or not."""


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


# The real Slurm cluster's fixtures, for every module that marks itself with slurm_marks(); imported last, as
# the module imports FIGURES from here.
from tests.harness.slurm_cluster import cluster, slurm  # noqa: E402, F401
