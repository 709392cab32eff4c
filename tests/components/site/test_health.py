"""The health section: defaults from their sources, and every XID the site names held to NVIDIA's catalogue."""

from typing import Any

import pytest

from components.site.xid import XID_CATALOGUE
from tests.builders import parse, problems, with_changes


def test_should_drain_for_catalogued_hardware_xids_by_default(prod: dict[str, Any]) -> None:
    health = parse(prod).health
    assert set(health.drain_xids) <= set(XID_CATALOGUE) and 79 in health.drain_xids and 13 not in health.drain_xids
    assert (health.diag_level, health.max_drained_pct, health.requeue_after_s) == (3, 10.0, None)


@pytest.mark.parametrize(("changes", "path"), [
    pytest.param({"health": {"drain_xids": [79, 999, 7]}}, "health.drain_xids", id="rejects a drain XID not in the "
                                                                                   "catalogue"),
    pytest.param({"alerting__xid_hardware": [48, 999, 7]}, "alerting.xid_hardware",
                 id="rejects a hardware alert XID not in the catalogue"),
])
def test_should_reject_an_xid_not_in_the_catalogue(prod: dict[str, Any], changes: dict[str, Any], path: str) -> None:
    (problem,) = problems(with_changes(prod, **changes))
    assert problem.startswith(f"{path}: ") and "XID 999, 7 is not in NVIDIA's Xid catalogue" in problem


def test_should_reject_a_malformed_maintenance_window_naming_it(prod: dict[str, Any]) -> None:
    health = {**prod["health"], "diag_windows": ["Sat,Sun 00:00-24:00", "Mon-Fry 22:00-06:00"]}
    (problem,) = problems(with_changes(prod, health=health))
    assert problem.startswith("health.diag_windows[1]: ") and "'Mon-Fry' is not a day or a range of days" in problem
    assert parse(with_changes(prod, health={**prod["health"], "diag_windows": ["Sat,Sun 00:00-24:00"]})).health \
        .diag_windows == ("Sat,Sun 00:00-24:00",)
