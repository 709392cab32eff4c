"""Maintenance windows as the site spec writes them (`health.diag_windows`): `DAYS HH:MM-HH:MM`, in UTC.

DAYS is `daily`, one day (`Sat`), a range (`Mon-Fri`, `Fri-Mon` wraps past Sunday) or a list of those (`Sat,Sun`).
A window whose end is not after its start runs past midnight and belongs to the day it starts (`Fri 22:00-06:00` is
Friday 22:00 to Saturday 06:00); `24:00` ends a window at midnight. UTC, because the controller compares windows with
time.time() and a zone's daylight-saving shift would move or double a window twice a year.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MINUTES_PER_DAY = 24 * 60
SHAPE = re.compile(r"^(?P<days>\S+) (?P<start>\d\d):(?P<start_min>\d\d)-(?P<end>\d\d):(?P<end_min>\d\d)$")
HOW = "write DAYS HH:MM-HH:MM in UTC, DAYS daily, a day Mon..Sun, a range Mon-Fri or a list Sat,Sun"


@dataclass(frozen=True)
class Window:
    days: frozenset[int]
    """Days the window starts on, 0 Monday .. 6 Sunday (datetime.weekday())."""
    start_min: int
    """Minute of the day it opens, 0..1439."""
    end_min: int
    """Minute of the day it closes, 1..1440; not after start_min: on the next day."""

    def holds(self, at: float) -> bool:
        """Whether `at` (s since the epoch) is inside the window."""
        moment = datetime.fromtimestamp(at, UTC)
        day, minute = moment.weekday(), moment.hour * 60 + moment.minute
        if self.start_min < self.end_min:
            return day in self.days and self.start_min <= minute < self.end_min
        return (day in self.days and minute >= self.start_min) or ((day - 1) % 7 in self.days
                                                                     and minute < self.end_min)


def _days(text: str) -> frozenset[int]:
    if text == "daily":
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"{part!r} is not a day or a range of days")
        start, end = DAYS.index(first), DAYS.index(last or first)
        days.update((start + i) % 7 for i in range((end - start) % 7 + 1))
    return frozenset(days)


def _minute(hours: str, minutes: str, what: str, latest: int) -> int:
    value = int(hours) * 60 + int(minutes)
    if int(minutes) > 59 or value > latest:
        last = "24:00" if latest == MINUTES_PER_DAY else "23:59"
        raise ValueError(f"{what} {hours}:{minutes} is not a time of day (00:00..{last})")
    return value


@lru_cache(maxsize=256)
def parse_window(text: str) -> Window:
    """The window `text` writes; ValueError saying what is wrong and how to write one."""
    shape = SHAPE.match(text)
    try:
        if shape is None:
            raise ValueError("not of the form DAYS HH:MM-HH:MM")
        days = _days(shape["days"])
        start = _minute(shape["start"], shape["start_min"], "start", MINUTES_PER_DAY - 1)
        end = _minute(shape["end"], shape["end_min"], "end", MINUTES_PER_DAY)
        if start == end % MINUTES_PER_DAY and end != MINUTES_PER_DAY:
            raise ValueError("it opens and closes at the same minute: write 00:00-24:00 for a whole day")
    except ValueError as error:
        raise ValueError(f"{text!r} is not a maintenance window: {error} ({HOW})") from None
    return Window(days, start, end)


def within(windows: tuple[str, ...], at: float) -> bool:
    """Whether `at` is inside one of the windows; no window at all means any time."""
    return not windows or any(parse_window(w).holds(at) for w in windows)
