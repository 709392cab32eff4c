"""tests/harness/sharing.py under the real pytest-xdist: a suite of its own, run on three workers, whose tests say
which worker ran them."""

import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from tests.builders import REPO

pytest.importorskip("xdist", reason="needs pytest-xdist (make test installs it)")

SUITE = {
    "conftest.py": """
        import pytest

        @pytest.fixture(scope="session")
        def daemon():
            return "one per run"
    """,
    # Two modules sharing the session's daemon, one module with a daemon of its own, tests that share nothing.
    "test_first_user.py": """
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_uses_the_daemon(daemon, n, ran):
            ran()
    """,
    "test_second_user.py": """
        def test_uses_the_daemon(daemon, ran):
            ran()
    """,
    "test_own_world.py": """
        import pytest

        @pytest.fixture(scope="module")
        def world():
            return "this module's"

        @pytest.mark.parametrize("n", range(3))
        def test_uses_its_world(world, n, ran):
            ran()
    """,
    "test_alone.py": """
        import time

        import pytest

        @pytest.mark.parametrize("n", range(6))
        def test_needs_nothing(n, ran):
            time.sleep(0.5)
            ran()
    """,
}
RAN = """
    import os

    import pytest

    @pytest.fixture
    def ran(request):
        # Where each test ran: one line per test.
        def record():
            with open(os.environ["SUITE_RAN"], "a") as out:
                out.write(f"{request.node.module.__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
        return record
"""


def workers_by_module(tmp_path: Path, dist: str) -> dict[str, set[str]]:
    suite = tmp_path / dist / "suite"
    suite.mkdir(parents=True)
    for name, text in SUITE.items():
        (suite / name).write_text(textwrap.dedent(text) + (textwrap.dedent(RAN) if name == "conftest.py" else ""))
    ran = tmp_path / dist / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.harness.sharing", "-p", "no:cacheprovider", "-n", "3",
         "--dist", dist, "--rootdir", str(suite), "--basetemp", str(tmp_path / dist / "tmp"), "-q", str(suite)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "SUITE_RAN": str(ran)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found: dict[str, set[str]] = defaultdict(set)
    for line in ran.read_text().splitlines():
        module, worker = line.split()
        found[module].add(worker)
    return found


def test_should_run_the_tests_sharing_a_fixture_instance_on_one_worker_and_spread_the_rest(tmp_path: Path) -> None:
    found = workers_by_module(tmp_path, "loadgroup")
    assert len(found["test_first_user"] | found["test_second_user"]) == 1, found
    assert len(found["test_own_world"]) == 1, found
    assert len(found["test_alone"]) > 1, found


def test_should_spread_the_daemons_users_over_workers_without_the_groups(tmp_path: Path) -> None:
    # The check above has teeth: xdist's plain `load` sends the daemon's four users to more than one worker.
    found = workers_by_module(tmp_path, "load")
    assert len(found["test_first_user"] | found["test_second_user"] | found["test_own_world"]) > 1, found


ORDERED = {
    "conftest.py": """
        import os

        import pytest

        @pytest.fixture(autouse=True)
        def ran(request):
            with open(os.environ["SUITE_RAN"], "a") as out:
                out.write(f"{request.node.name}\\n")
    """,
    "test_a_quick.py": """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_quick(n):
            pass
    """,
    "test_z_long.py": """
        import pytest

        @pytest.mark.expected_s(120)
        def test_long():
            pass
    """,
}


def order_run(tmp_path: Path, suite_files: dict[str, str]) -> list[str]:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in suite_files.items():
        (suite / name).write_text(textwrap.dedent(text))
    ran = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.harness.sharing", "-p", "no:cacheprovider", "-n", "1",
         "--dist", "loadgroup", "--rootdir", str(suite), "--basetemp", str(tmp_path / "tmp"), "-q", str(suite)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "SUITE_RAN": str(ran)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return ran.read_text().split()


def test_should_start_the_unit_expected_longest_first_though_it_comes_last(tmp_path: Path) -> None:
    assert order_run(tmp_path, ORDERED)[0] == "test_long"


def test_should_keep_the_collections_order_without_the_mark(tmp_path: Path) -> None:
    # The check above has teeth: unmarked, the long test is sent last.
    unmarked = ORDERED | {"test_z_long.py": ORDERED["test_z_long.py"].replace("@pytest.mark.expected_s(120)", "")}
    assert order_run(tmp_path, unmarked)[-1] == "test_long"


def test_should_name_the_test_and_the_rule_for_a_bad_expected_seconds(tmp_path: Path) -> None:
    bad = ORDERED | {"test_z_long.py": ORDERED["test_z_long.py"].replace("(120)", "('two minutes')")}
    with pytest.raises(AssertionError, match=r"(?s)ERROR at setup of test_long.*expected_s takes the test's "
                                             r"expected seconds, a positive number; got \('two minutes',\)"):
        order_run(tmp_path, bad)
