import math

import pytest

from runbooks.waits import Waits, percentile


@pytest.mark.parametrize(("values", "pct", "expected"), [
    ([3.0, 1.0, 2.0, 4.0], 50, 2.0),  # rank ceil(0.5 * 4) = 2
    ([3.0, 1.0, 2.0, 4.0], 95, 4.0),  # rank ceil(0.95 * 4) = 4
    ([float(v) for v in range(1, 21)], 95, 19.0),  # rank 19 of 20
    ([7.0], 50, 7.0),
])
def test_should_take_the_nearest_rank(values: list[float], pct: float, expected: float) -> None:
    assert percentile(values, pct) == expected


def test_should_say_nan_for_no_jobs_and_count_what_it_was_given() -> None:
    empty = Waits.of([], 0)
    assert math.isnan(empty.p50_h) and math.isnan(empty.p95_h) and empty.jobs == 0
    assert Waits.of([0.5, 1.5, 3.0], 1) == Waits(1.5, 3.0, 3, 1)
