"""Maintenance windows: known answers at their edges, and over generated windows and times the same answer as a
minute-of-week reading of what the spec wrote."""

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.site.maintenance_window import DAYS, parse_window, within

MONDAY = datetime(2026, 11, 30, tzinfo=UTC).timestamp()
"""Monday 30 November 2026, 00:00 UTC."""
WEEK_MIN = 7 * 24 * 60


def at(day: str, hhmm: str) -> float:
    hours, minutes = hhmm.split(":")
    return MONDAY + DAYS.index(day) * 86_400 + int(hours) * 3600 + int(minutes) * 60


@pytest.mark.parametrize(("window", "moment", "inside"), [
    pytest.param("Sat 02:00-06:00", ("Sat", "02:00"), True, id="opens at its start"),
    pytest.param("Sat 02:00-06:00", ("Sat", "06:00"), False, id="is closed at its end"),
    pytest.param("Sat 02:00-06:00", ("Sun", "03:00"), False, id="holds only on its day"),
    pytest.param("Fri 22:00-06:00", ("Sat", "05:59"), True, id="runs past midnight into the next day"),
    pytest.param("Fri 22:00-06:00", ("Fri", "05:00"), False, id="belongs to the day it starts"),
    pytest.param("Fri-Mon 01:00-02:00", ("Sun", "01:30"), True, id="a range wraps past Sunday"),
    pytest.param("Fri-Mon 01:00-02:00", ("Wed", "01:30"), False, id="a wrapped range leaves the other days out"),
    pytest.param("Sun 23:00-01:00", ("Mon", "00:30"), True, id="Sunday's night ends on Monday"),
    pytest.param("Sat,Sun 00:00-24:00", ("Sun", "23:59"), True, id="24:00 closes a whole day at midnight"),
    pytest.param("daily 12:00-13:00", ("Wed", "12:59"), True, id="daily holds every day"),
])
def test_should_hold_a_moment_inside_the_window(window: str, moment: tuple[str, str], inside: bool) -> None:
    assert parse_window(window).holds(at(*moment)) is inside


def test_should_allow_any_time_when_no_window_is_named() -> None:
    assert within((), at("Wed", "12:00")) and not within(("Sat 02:00-06:00",), at("Wed", "12:00"))


@pytest.mark.parametrize(("window", "says"), [
    pytest.param("weekends 02:00-06:00", "'weekends' is not a day", id="rejects an unknown day"),
    pytest.param("Sat 2:00-06:00", "not of the form DAYS HH:MM-HH:MM", id="rejects a time without two digits"),
    pytest.param("Sat 24:00-06:00", "start 24:00 is not a time of day (00:00..23:59)", id="rejects a start at 24:00"),
    pytest.param("Sat 02:00-24:30", "end 24:30 is not a time of day (00:00..24:00)", id="rejects an end past 24:00"),
    pytest.param("Sat 02:60-03:00", "start 02:60 is not a time of day", id="rejects minute 60"),
    pytest.param("Sat 03:00-03:00", "opens and closes at the same minute", id="rejects an empty window"),
])
def test_should_reject_a_malformed_window_saying_how_to_write_one(window: str, says: str) -> None:
    with pytest.raises(ValueError, match="DAYS HH:MM-HH:MM in UTC") as raised:
        parse_window(window)
    assert says in str(raised.value) and repr(window) in str(raised.value)


def minute_of_week_inside(day_set: set[int], start: int, end: int, moment: float) -> bool:
    """The oracle: the window as minutes of the week, each day's span laid from its start, wrapping past Sunday."""
    minute = int((moment - MONDAY) // 60) % WEEK_MIN
    length = (end - start) % (24 * 60) or 24 * 60
    return any((minute - (day * 24 * 60 + start)) % WEEK_MIN < length for day in day_set)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 6), min_size=1), st.integers(0, 23 * 60 + 59), st.integers(1, 24 * 60),
       st.integers(0, 8 * WEEK_MIN * 60))
def test_should_agree_with_the_minute_of_week_reading(day_set: set[int], start: int, end: int, offset: int) -> None:
    if start == end % (24 * 60) and end != 24 * 60:
        return
    days = ",".join(DAYS[d] for d in sorted(day_set))
    text = f"{days} {start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"
    moment = MONDAY + offset
    assert parse_window(text).holds(moment) is minute_of_week_inside(day_set, start, end, moment), text
