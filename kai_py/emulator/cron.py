"""CronJob schedules: the standard 5-field cron syntax, as the real API server reads it.

Kubernetes parses ``spec.schedule`` with robfig/cron's ``ParseStandard``;
this module accepts the same language (numbers, ``*`` and ``?``, ranges,
``/step``, lists, month and weekday names, the ``@hourly``... macros and
``@every <duration>``, a ``TZ=``/``CRON_TZ=`` prefix) and refuses the same
schedules with the same messages, so a 422 from the emulator reads like
one from kube-apiserver. Times are seconds since the epoch; a schedule is
read in its time zone (UTC when none is given, as kube-controller-manager
runs in UTC in a cluster).

No dependency: the few pure-Python cron packages either read another
dialect (seconds fields, ``L``/``W``) or do not refuse what Kubernetes
refuses, which is most of what matters here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kai_py.api.durations import parse_duration


class CronError(ValueError):
    """A schedule or time zone the real API server refuses; the text is its message."""


_MONTHS = {
    n: i + 1
    for i, n in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}
_DAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
#: (low, high, names) of minute, hour, day of month, month, day of week.
_FIELDS: tuple[tuple[int, int, dict[str, int] | None], ...] = (
    (0, 59, None),
    (0, 23, None),
    (1, 31, None),
    (1, 12, _MONTHS),
    (0, 6, _DAYS),
)
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: How far ahead ``next`` looks before it calls a schedule impossible (as robfig/cron).
_YEARS_AHEAD = 5


def load_zone(name: str) -> tzinfo:
    """Go's time.LoadLocation: "" and "UTC" are UTC; an unknown name is a CronError."""
    if name in ("", "UTC"):
        return UTC
    try:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {name}") from None


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    #: A day field given as ``*``/``?``: then both day fields must match, else either.
    any_day: bool
    any_weekday: bool
    zone: tzinfo = UTC
    #: ``@every``: a fixed period in whole seconds instead of the fields above.
    every: int = 0

    def next(self, after: float) -> float | None:
        """The first time strictly after ``after`` (None: none in the next five years)."""
        if self.every:
            return float(math.floor(after) + self.every)
        start = datetime.fromtimestamp(math.floor(after) + 1, self.zone).replace(tzinfo=None)
        t = start.replace(second=0)
        if start.second:
            t += timedelta(minutes=1)
        last_year = t.year + _YEARS_AHEAD
        # Walks the wall clock of the schedule's zone, coarse field first.
        while t.year <= last_year:
            if t.month not in self.months:
                t = datetime(t.year + t.month // 12, t.month % 12 + 1, 1)
            elif not self._day_matches(t):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t += timedelta(minutes=1)
            else:
                at = t.replace(tzinfo=self.zone).timestamp()
                if at > after:
                    return at
                t += timedelta(minutes=1)  # a wall time repeated when clocks go back
        return None

    def _day_matches(self, t: datetime) -> bool:
        day = t.day in self.days
        weekday = (t.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday

    def most_recent(self, earliest: float, now: float) -> tuple[float | None, int]:
        """The latest scheduled time in (earliest, now] and about how many were missed.

        As kube-controller-manager counts them: the gap between the next two
        times is taken as the period, and only the last period is walked, so
        a CronJob idle for years costs no more than one idle for a minute.
        """
        t1 = self.next(earliest)
        if t1 is None:
            raise CronError("the schedule has no time in the next five years")
        if now < t1:
            return None, 0
        t2 = self.next(t1)
        if t2 is None or now < t2:
            return t1, 1
        period = round(t2 - t1)
        if period < 1:
            raise CronError("time difference between two schedules is less than 1 second")
        missed = int(now - t1) // period + 1
        recent: float | None = None
        t = self.next(t1 + (missed - 2) * period)
        span = 2 * period
        while (t is None or t > now) and now - span > t1:
            # Gaps wider than the guessed period (a weekend for a weekday schedule): look
            # further back. kube-controller-manager stops at the first guess and so starts
            # nothing for such a miss; the emulator starts the latest, as documented.
            t = self.next(now - span)
            span *= 2
        if t is None or t > now:
            t = t1
        while t is not None and t <= now:
            recent = t
            t = self.next(t)
        return recent, missed


def parse(text: str, time_zone: str | None = None) -> Schedule:
    """A schedule, or CronError with the message kube-apiserver gives for it."""
    spec = text.strip()
    if not spec:
        raise CronError("empty spec string")
    zone = load_zone(time_zone) if time_zone else UTC
    if spec.startswith(("TZ=", "CRON_TZ=")):
        head, _, spec = spec.partition(" ")
        name = head.partition("=")[2]
        try:
            zone = load_zone(name)
        except CronError as exc:
            raise CronError(f"provided bad location {name}: {exc}") from None
        spec = spec.strip()
    if spec.startswith("@"):
        if spec.startswith("@every "):
            return _every(spec.removeprefix("@every ").strip(), zone)
        if spec not in _MACROS:
            raise CronError(f"unrecognized descriptor: {spec}")
        spec = _MACROS[spec]
    fields = spec.split()
    if len(fields) != len(_FIELDS):
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    sets: list[frozenset[int]] = []
    stars: list[bool] = []
    for field, (low, high, names) in zip(fields, _FIELDS, strict=True):
        values: set[int] = set()
        star = False
        for part in field.split(","):
            more, part_star = _range(part, low, high, names)
            values |= more
            star = star or part_star
        sets.append(frozenset(values))
        stars.append(star)
    minutes, hours, days, months, weekdays = sets
    return Schedule(minutes, hours, days, months, weekdays, stars[2], stars[4], zone)


def _range(expr: str, low: int, high: int, names: dict[str, int] | None) -> tuple[set[int], bool]:
    range_and_step = expr.split("/")
    bounds = range_and_step[0].split("-")
    star = False
    if bounds[0] in ("*", "?"):
        start, end, star = low, high, True
    else:
        start = _number(bounds[0], names)
        if len(bounds) == 1:
            end = start
        elif len(bounds) == 2:
            end = _number(bounds[1], names)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _number(range_and_step[1], None)
        if len(bounds) == 1:
            end = high  # "N/step" runs from N to the field's end
        if step > 1:
            star = False  # "*/2" names some days, not any day
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < low:
        raise CronError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise CronError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")
    return set(range(start, end + 1, step)), star


def _number(text: str, names: dict[str, int] | None) -> int:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if not re.fullmatch(r"[+-]?\d+", text):
        raise CronError(
            f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax'
        )
    value = int(text)
    if value < 0:
        raise CronError(f"negative number ({value}) not allowed: {text}")
    return value


def _every(text: str, zone: tzinfo) -> Schedule:
    """``@every 1h30m``: Go's duration syntax, whole seconds, at least one."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise CronError(
            f'failed to parse duration {text}: time: invalid duration "{text}"'
        ) from None
    whole = frozenset[int]()
    return Schedule(whole, whole, whole, whole, whole, True, True, zone, max(1, int(seconds)))


__all__ = ["CronError", "Schedule", "load_zone", "parse"]
