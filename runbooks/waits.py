"""Training queue waits as `gpuctl simulate` predicts them and `gpuctl report` measures them: one definition, so a
platform team can set the prediction beside the measurement."""

import math
from dataclasses import dataclass


def percentile(values: list[float], pct: float) -> float:
    """Nearest rank: the smallest value with at least pct % of the values at or below it; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Waits:
    p50_h: float
    p95_h: float
    """NaN when no job was submitted."""
    jobs: int
    """Jobs submitted in the period."""
    never_started: int
    """Of those, the ones not started by the period's end: their wait counts up to the end, a lower bound."""

    @classmethod
    def of(cls, waits_h: list[float], never_started: int) -> "Waits":
        return cls(percentile(waits_h, 50), percentile(waits_h, 95), len(waits_h), never_started)
