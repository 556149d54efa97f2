"""Durations: numbers and Go-style strings to float seconds, and canonical text that parses back."""

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gazette.protocol import ValidationError, parse_duration
from gazette.protocol.durations import format_duration


@pytest.mark.parametrize(
    "given_, seconds",
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("720h", 2_592_000.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("1h0m5s", 3605.0),
        ("2h45m30.5s", 9930.5),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("3ns", 3e-9),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("-1h", -3600.0),
        ("+5m", 300.0),
        (" 1m ", 60.0),
        (30, 30.0),
        (0.25, 0.25),
        (-1, -1.0),
        (datetime.timedelta(minutes=2), 120.0),
    ],
)
def test_parse(given_: object, seconds: float) -> None:
    assert parse_duration(given_) == pytest.approx(seconds, abs=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "abc", "30", "1x", "1h-30m", "h", "1.2.3s", "--1s", "1 h", "1hh", "∞s"])
def test_parse_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValidationError, match=f'duration "{bad}" is not a duration'):
        parse_duration(bad)


@pytest.mark.parametrize("bad", [True, None, [1], float("nan"), float("inf")])
def test_parse_rejects_other_types(bad: object) -> None:
    with pytest.raises(ValidationError, match="duration"):
        parse_duration(bad)  # type: ignore[arg-type]


def test_error_names_the_field() -> None:
    with pytest.raises(ValidationError, match='refresh_interval "soon" is not a duration'):
        parse_duration("soon", what="refresh_interval")


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (30, "30s"),
        (60, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (5400, "1h30m"),
        (3605, "1h5s"),
        (2_592_000, "720h"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (61.25, "1m1.25s"),
        (1e-5, "10us"),
        (1.5e-5, "15us"),
        (2.5e-3, "2.5ms"),
        (1e-9, "1ns"),
        (1.2345e-3, "1.2345ms"),
        (1.5e-8, "15ns"),
        (-3600, "-1h"),
    ],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-12)


@given(st.integers(min_value=-(10**17), max_value=10**17))
def test_round_trip_whole_nanoseconds(ns: int) -> None:
    seconds = ns / 1_000_000_000
    text = format_duration(seconds)
    assert parse_duration(text) == seconds
    assert format_duration(parse_duration(text)) == text
