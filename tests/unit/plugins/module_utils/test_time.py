"""The one time helper: Kubernetes' Time (seconds) and MicroTime (microseconds) both read, Time written."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time, utc_now

UTC = datetime.UTC
MOMENT = datetime.datetime(2026, 11, 22, 8, 25, 11, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # metav1.Time: creationTimestamp, conditions, core/v1 Events' lastTimestamp.
        ("2026-11-22T08:25:11Z", MOMENT),
        # metav1.MicroTime (RFC3339Micro): Leases' renewTime, Events' eventTime.
        ("2026-11-22T08:25:11.123456Z", MOMENT.replace(microsecond=123456)),
        # Go's RFC 3339 parser takes any fraction; past microseconds the digits are dropped.
        ("2026-11-22T08:25:11.5Z", MOMENT.replace(microsecond=500000)),
        ("2026-11-22T08:25:11.123456789Z", MOMENT.replace(microsecond=123456)),
        # An offset is converted to UTC.
        ("2026-11-22T10:25:11+02:00", MOMENT),
        ("2026-11-22T03:55:11.000001-04:30", MOMENT.replace(microsecond=1)),
        ("2026-11-22t08:25:11z", MOMENT),
    ],
)
def test_parse_time_reads_time_and_microtime_into_aware_utc(text, expected):
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed is not None and parsed.utcoffset() == datetime.timedelta(0)


@pytest.mark.parametrize(
    "value",
    [None, "", 0, "2026-11-22", "2026-11-22T08:25:11", "2026-11-22T08:25Z", "2026-13-22T08:25:11Z", "soon"],
)
def test_parse_time_returns_none_for_what_is_not_a_point_in_time(value):
    assert parse_time(value) is None


def test_iso_writes_time_to_the_second_in_utc_and_microtime_on_request():
    eastern = MOMENT.replace(microsecond=654321).astimezone(datetime.timezone(datetime.timedelta(hours=-5)))
    assert iso(eastern) == "2026-11-22T08:25:11Z"
    assert iso(eastern, micro=True) == "2026-11-22T08:25:11.654321Z"
    assert parse_time(iso(eastern, micro=True)) == eastern


def test_utc_now_is_aware_utc():
    assert utc_now().utcoffset() == datetime.timedelta(0)
