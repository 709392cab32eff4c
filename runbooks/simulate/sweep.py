"""A sweep (`gpuctl simulate --seeds N --training-load L ...`): the comparison replayed for each training load and
each seed of the thinning and copying, and each figure's spread over the seeds: mean, lowest and highest."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from components.site.site import Site
from runbooks.simulate.compare import Comparison, compare
from runbooks.simulate.site_model import StaticSplit
from runbooks.simulate.workload import Mapping


@dataclass(frozen=True)
class Spread:
    mean: float
    low: float
    high: float
    """NaN, all three, when the figure applies to none of the runs (a share of nothing lent)."""

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        """Over the runs where the figure applies (not NaN)."""
        applies = [v for v in values if not math.isnan(v)]
        if not applies:
            return cls(math.nan, math.nan, math.nan)
        return cls(sum(applies) / len(applies), min(applies), max(applies))


def sweep(
    site: Site,
    traces: Path,
    mapping: Mapping,
    loads: Sequence[float],
    seeds: int,
    checkpoint_minutes: float | None = None,
    split: StaticSplit = StaticSplit.FAIRSHARE,
) -> dict[float, list[Comparison]]:
    """Training load -> one comparison per seed, mapping.seed to mapping.seed + seeds - 1."""
    return {
        load: [
            compare(
                site, traces, replace(mapping, training_load=load, seed=mapping.seed + i), checkpoint_minutes, split
            )
            for i in range(seeds)
        ]
        for load in loads
    }
