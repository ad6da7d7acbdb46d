"""The CronJob schedule parser: the times it gives and the schedules it refuses.

The refusals' texts are what kube-apiserver 1.37 answered for the same
schedules (spec.schedule's 422 message), so the emulator's 422 reads alike.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kai_py.emulator import cron


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def iso(at: float | None, zone: str = "UTC") -> str:
    assert at is not None
    return datetime.fromtimestamp(at, cron.load_zone(zone)).isoformat()


@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        ("* * * * *", "2026-12-05T03:00:00+00:00", "2026-12-05T03:01:00+00:00"),
        ("* * * * *", "2026-12-05T03:00:59.5+00:00", "2026-12-05T03:01:00+00:00"),
        ("*/15 * * * *", "2026-12-05T03:01:00+00:00", "2026-12-05T03:15:00+00:00"),
        ("5/20 * * * *", "2026-12-05T03:30:00+00:00", "2026-12-05T03:45:00+00:00"),
        ("0 9-17/4 * * *", "2026-12-05T13:00:00+00:00", "2026-12-05T17:00:00+00:00"),
        ("0,30 1 * * *", "2026-12-05T01:00:00+00:00", "2026-12-05T01:30:00+00:00"),
        ("0 0 * JAN-mar SUN", "2026-12-05T00:00:00+00:00", "2027-01-03T00:00:00+00:00"),
        # Both day fields given: either matches (the 1st, or a Monday).
        ("0 0 1 * mon", "2026-12-01T00:00:00+00:00", "2026-12-07T00:00:00+00:00"),
        # A day field given as "*/2" names days: still either (odd days, or a Sunday).
        ("0 0 */2 * 0", "2026-12-05T00:00:00+00:00", "2026-12-06T00:00:00+00:00"),
        ("? * * * *", "2026-12-05T03:00:00+00:00", "2026-12-05T03:01:00+00:00"),
        ("@hourly", "2026-12-05T03:00:00+00:00", "2026-12-05T04:00:00+00:00"),
        ("@daily", "2026-12-05T03:00:00+00:00", "2026-12-06T00:00:00+00:00"),
        ("@weekly", "2026-12-05T03:00:00+00:00", "2026-12-06T00:00:00+00:00"),
        ("@monthly", "2026-12-05T03:00:00+00:00", "2027-01-01T00:00:00+00:00"),
        ("@yearly", "2026-12-05T03:00:00+00:00", "2027-01-01T00:00:00+00:00"),
        ("@every 1h30m", "2026-12-05T03:00:00.7+00:00", "2026-12-05T04:30:00+00:00"),
        ("0 0 29 2 *", "2026-12-05T03:00:00+00:00", "2028-02-29T00:00:00+00:00"),
    ],
)
def test_next_time(schedule: str, after: str, expected: str) -> None:
    assert iso(cron.parse(schedule).next(ts(after))) == expected


def test_a_time_zone_reads_the_fields_on_its_wall_clock() -> None:
    paris = cron.parse("30 2 * * *", "Europe/Paris")
    # Winter: 02:30 in Paris is 01:30 UTC.
    assert iso(paris.next(ts("2026-12-05T00:00:00+00:00"))) == "2026-12-05T01:30:00+00:00"
    # The spring-forward night has no 02:30: the run is an hour later on the clock.
    got = paris.next(ts("2027-03-28T00:00:00+00:00"))
    assert iso(got, "Europe/Paris") == "2027-03-28T03:30:00+02:00"
    assert cron.parse("TZ=Asia/Tokyo 0 9 * * *").next(ts("2026-12-05T00:00:00+00:00")) == ts(
        "2026-12-06T00:00:00+00:00"
    )


def test_an_impossible_date_has_no_next_time() -> None:
    # Accepted by the API server (it parses), never due.
    assert cron.parse("59 23 31 2 *").next(ts("2026-12-05T00:00:00+00:00")) is None


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("bad", "expected exactly 5 fields, found 1: [bad]"),
        ("61 * * * *", "end of range (61) above maximum (59): 61"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        (
            "a-b * * * *",
            'failed to parse int from a: strconv.Atoi: parsing "a": invalid syntax',
        ),
        ("@foo", "unrecognized descriptor: @foo"),
        ("TZ=UTC * * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("5/2/1 * * * *", "too many slashes: 5/2/1"),
        ("-1 * * * *", 'failed to parse int from : strconv.Atoi: parsing "": invalid syntax'),
        ("3-1 * * * *", "beginning of range (3) beyond end of range (1): 3-1"),
        ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
    ],
)
def test_refused_schedules_say_what_the_api_server_says(schedule: str, message: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.parse(schedule)
    assert str(caught.value) == message


def test_unknown_time_zone() -> None:
    with pytest.raises(cron.CronError, match="unknown time zone Foo/Bar"):
        cron.parse("* * * * *", "Foo/Bar")
    with pytest.raises(cron.CronError, match=r"unknown time zone \.\./x"):
        cron.load_zone("../x")


def test_most_recent_takes_only_the_latest_missed_time() -> None:
    every_minute = cron.parse("* * * * *")
    created = ts("2026-12-05T03:00:30+00:00")
    assert every_minute.most_recent(created, created + 20) == (None, 0)
    assert every_minute.most_recent(created, ts("2026-12-05T03:01:10+00:00")) == (
        ts("2026-12-05T03:01:00+00:00"),
        1,
    )
    # Two days idle: one time (the last), and the count that makes the warning.
    recent, missed = every_minute.most_recent(created, ts("2026-12-07T03:00:45+00:00"))
    assert recent == ts("2026-12-07T03:00:00+00:00")
    assert missed == 2 * 24 * 60
    # Irregular gaps (weekdays only): still the true latest time.
    weekdays = cron.parse("30 6-16/4 * * 1-5")
    recent, _ = weekdays.most_recent(
        ts("2026-12-01T00:00:00+00:00"), ts("2026-12-07T00:00:00+00:00")
    )
    assert datetime.fromtimestamp(recent or 0, UTC).isoformat() == "2026-12-04T14:30:00+00:00"
