"""The report's options: windows as START..END with a UTC offset, a resolution, and errors naming option and rule."""

from datetime import UTC, datetime

import pytest

from runbooks.report.window import ReportInputError, Window, check_windows, parse_resolution, parse_window

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_should_read_a_window_in_any_offset_as_utc() -> None:
    window = parse_window("2026-11-02T08:00+08:00..2026-11-09T00:00Z", "--window", NOW)
    assert window == Window(datetime(2026, 11, 2, 0, 0, tzinfo=UTC), datetime(2026, 11, 9, 0, 0, tzinfo=UTC))
    assert window.seconds == 7 * 86_400
    assert str(window) == "2026-11-02T00:00:00+00:00..2026-11-09T00:00:00+00:00"


@pytest.mark.parametrize(("text", "error"), [
    pytest.param("2026-11-02T00:00Z", "--window: '2026-11-02T00:00Z' is not START..END", id="rejects one time"),
    pytest.param("last week..now", "--window: start 'last week' is not an ISO 8601 time", id="rejects words"),
    pytest.param("2026-11-02T00:00..2026-11-09T00:00Z", "--window: start '2026-11-02T00:00' has no UTC offset",
                 id="rejects a time without offset"),
    pytest.param("2026-11-09T00:00Z..2026-11-02T00:00Z", "--window: ends at 2026-11-02T00:00Z, not after its start",
                 id="rejects a window that ends before it starts"),
    pytest.param("2026-11-30T00:00Z..2026-12-02T00:00Z", "--window: ends at 2026-12-02T00:00Z, after now",
                 id="rejects a window not over yet"),
])
def test_should_reject_a_window(text: str, error: str) -> None:
    with pytest.raises(ReportInputError) as raised:
        parse_window(text, "--window", NOW)
    assert str(raised.value).startswith(error)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h", 3600), ("1d", 86_400)])
def test_should_read_a_resolution(text: str, seconds: int) -> None:
    assert parse_resolution(text, "--resolution") == seconds


@pytest.mark.parametrize("text", ["0s", "5", "5x", "1.5h", "-1m"])
def test_should_reject_a_resolution(text: str) -> None:
    with pytest.raises(ReportInputError, match=rf"^--resolution: '{text}' is not a positive duration"):
        parse_resolution(text, "--resolution")


WEEK = parse_window("2026-11-08T00:00Z..2026-11-15T00:00Z", "--window", NOW)
BEFORE = parse_window("2026-11-01T00:00Z..2026-11-08T00:00Z", "--baseline", NOW)


@pytest.mark.parametrize(("window", "baseline", "step_s", "error"), [
    pytest.param(BEFORE, WEEK, 300, "--baseline: ends at 2026-11-15T00:00:00+00:00, after the window starts",
                 id="rejects a baseline after the window"),
    pytest.param(WEEK, BEFORE, 8 * 86_400, "--resolution: 691200 s is longer than --window (604800 s)",
                 id="rejects a step longer than the window"),
    pytest.param(WEEK, BEFORE, 30, "--resolution: 30 s makes 20160 points over --window, more than Prometheus' "
                                   "11,000: choose at least 55s", id="rejects more points than Prometheus serves"),
])
def test_should_reject_windows_that_do_not_fit(window: Window, baseline: Window, step_s: int, error: str) -> None:
    with pytest.raises(ReportInputError) as raised:
        check_windows(window, baseline, step_s, "--resolution")
    assert str(raised.value) == error or str(raised.value).startswith(error)


def test_should_accept_a_week_against_the_week_before_at_five_minutes() -> None:
    check_windows(WEEK, BEFORE, 300, "--resolution")
