"""The report's time windows and resolution, parsed from the command line with errors naming the option and rule."""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MAX_POINTS = 11_000
"""Prometheus refuses a range query of more than 11,000 points per series (promql/engine: "exceeded maximum
resolution of 11,000 points per timeseries")."""
DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


class ReportInputError(ValueError):
    """An option the report cannot use; the message names the option and the rule."""


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    def overlap_s(self, start: float, end: float) -> float:
        """Seconds of [start, end] (epoch seconds) inside this window."""
        return max(0.0, min(end, self.end.timestamp()) - max(start, self.start.timestamp()))

    def holds(self, at: float) -> bool:
        return self.start.timestamp() <= at < self.end.timestamp()

    def __str__(self) -> str:
        return f"{self.start.isoformat()}..{self.end.isoformat()}"


def _instant(text: str, option: str, side: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ReportInputError(f"{option}: {side} {text!r} is not an ISO 8601 time "
                               "(e.g. 2026-11-02T00:00:00Z)") from None
    if at.tzinfo is None:
        raise ReportInputError(f"{option}: {side} {text!r} has no UTC offset; add Z or +HH:MM so the window means "
                               "the same wherever the report runs")
    return at.astimezone(UTC)


def parse_window(text: str, option: str, now: datetime) -> Window:
    """START..END, ISO 8601 times with a UTC offset; the window must be non-empty and over by `now`."""
    start, dots, end = text.partition("..")
    if not dots or not start or not end:
        raise ReportInputError(f"{option}: {text!r} is not START..END (e.g. 2026-11-02T00:00Z..2026-11-09T00:00Z)")
    window = Window(_instant(start, option, "start"), _instant(end, option, "end"))
    if window.end <= window.start:
        raise ReportInputError(f"{option}: ends at {end}, not after its start {start}")
    if window.end > now:
        raise ReportInputError(f"{option}: ends at {end}, after now ({now.isoformat(timespec='seconds')}): "
                               "the report measures what has happened")
    return window


def parse_resolution(text: str, option: str) -> int:
    """A duration such as 30s, 5m, 1h or 1d, in seconds."""
    match = DURATION.match(text)
    if not match or int(match.group(1)) == 0:
        raise ReportInputError(f"{option}: {text!r} is not a positive duration such as 30s, 5m, 1h or 1d")
    return int(match.group(1)) * UNIT_S[match.group(2)]


def check_windows(window: Window, baseline: Window, step_s: int, resolution_option: str) -> None:
    """The baseline comes before the window, and each holds at least one step and at most MAX_POINTS."""
    if baseline.end > window.start:
        raise ReportInputError(f"--baseline: ends at {baseline.end.isoformat()}, after the window starts "
                               f"({window.start.isoformat()}): the baseline is the period before")
    for option, w in (("--window", window), ("--baseline", baseline)):
        if w.seconds < step_s:
            raise ReportInputError(f"{resolution_option}: {step_s} s is longer than {option} ({w.seconds} s)")
        if w.seconds / step_s > MAX_POINTS:
            raise ReportInputError(f"{resolution_option}: {step_s} s makes {w.seconds // step_s} points over {option}"
                                   f", more than Prometheus' {MAX_POINTS:,}: choose at least "
                                   f"{-(-w.seconds // MAX_POINTS)}s")


def steps(window: Window, step_s: int) -> tuple[datetime, datetime]:
    """The first and last evaluation times of a range query whose every step lies inside the window."""
    count = window.seconds // step_s
    return window.start + timedelta(seconds=step_s), window.start + timedelta(seconds=step_s * count)
