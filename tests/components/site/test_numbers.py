"""Every number of the spec is a finite number within what its consumer accepts, never a boolean (issue 21, case 13):
checked on every numeric value of the whole prod site, defaults included, so a field added without bounds fails."""

from typing import Any

import pytest

from tests.builders import parse, problems, prod_values


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, child in value.items() for leaf in _leaves(child, f"{path}.{key}" if path else key)]
    if isinstance(value, list):
        return [leaf for i, child in enumerate(value) for leaf in _leaves(child, f"{path}[{i}]")]
    return [(path, value)]


WHOLE_SITE = parse(prod_values()).model_dump(mode="json")
NUMBERS = [path for path, value in _leaves(WHOLE_SITE) if type(value) in (int, float)]
UNSET = [path for path, value in _leaves(WHOLE_SITE) if value is None]
"""Optional numbers left out (a node group's platform_w, a stage's max_teams, a class's priorities)."""


def _set(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed: dict[str, Any] = _copy(values)
    target: Any = changed
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    target[int(last) if isinstance(target, list) else last] = value
    return changed


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def test_should_find_the_numbers_of_every_section() -> None:
    assert len(NUMBERS) > 100 and {p.split(".")[0].split("[")[0] for p in NUMBERS} >= {
        "gpu_catalog", "racks", "node_groups", "storage", "monitoring", "alerting", "scheduling", "teams", "stages",
        "rollout", "slack", "slurm", "node_check"}


@pytest.mark.parametrize("value", [1e300, -1e300], ids=["huge", "hugely negative"])
def test_should_bound_every_number_above_and_below(value: float) -> None:
    unbounded = [path for path in NUMBERS + UNSET
                 if not any(p.startswith(f"{path}: ") for p in problems(_set(WHOLE_SITE, path, value)))]
    assert unbounded == []


def test_should_refuse_a_boolean_for_every_number() -> None:
    # YAML 1.1 reads yes and on as true, which int() takes for 1.
    accepted = [path for path in NUMBERS
                if f"{path}: Value error, a boolean is not a number (got true)" not in problems(
                    _set(WHOLE_SITE, path, True))]
    assert accepted == []
