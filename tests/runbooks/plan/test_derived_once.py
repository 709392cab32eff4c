"""`gpuctl plan` derives each fact once: the site is parsed once though both the plan and the program it runs read
it, and the rack plan, the Kueue flavors and the rendered rules and dashboards are computed once and shared."""

import cProfile
import pstats
from pathlib import Path

from typer.testing import CliRunner

from components import validate
from components.facility import power
from components.monitoring import alerts, dashboards
from components.scheduling import kueue
from runbooks.cli import app
from tests.builders import REPO

DERIVED = {
    "the site (parsed and checked)": validate._parse,
    "the rack plan": power.plan_racks,
    "the Kueue flavors": kueue.flavors,
    "the rule file": alerts.render_rule_groups,
    "the dashboards": dashboards.render_dashboards,
}


def runs(stats: pstats.Stats, function: object) -> int:
    """How often the function's own body ran: the code object under its cache wrapper."""
    code = getattr(function, "__wrapped__", function).__code__  # type: ignore[attr-defined]
    key = (code.co_filename, code.co_firstlineno, code.co_name)
    return int(stats.stats.get(key, (0,))[0])  # type: ignore[attr-defined]


def test_should_derive_each_fact_once_per_plan(tmp_path: Path) -> None:
    validate._parse.cache_clear()  # a site parsed by an earlier test would make every count 0
    profiler = cProfile.Profile()
    result = profiler.runcall(CliRunner().invoke, app, ["plan", "--project-dir", str(REPO), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    stats = pstats.Stats(profiler)
    assert {fact: runs(stats, function) for fact, function in DERIVED.items()} == dict.fromkeys(DERIVED, 1)
