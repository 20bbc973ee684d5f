"""Cron schedules (``spec.schedule`` of cleanup and deleting policies) and the next time they fire.

Five fields (minute hour day-of-month month day-of-week) with ``*``, ``a-b``, ``/step``, lists, month and weekday
names, and the ``@yearly``/``@monthly``/``@weekly``/``@daily``/``@hourly`` shorthands, as the cron parser Kyverno
uses reads them.  When both day fields are restricted a day matches either (classic cron).  Times are UTC.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from stockade.errors import StockadeError

_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {name: index + 1 for index, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {name: index for index, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_SEARCH_DAYS = 366 * 8  # covers every valid schedule (Feb 29 on a weekday recurs within 28 years only with OR days)


class ScheduleError(StockadeError, ValueError):
    """A schedule that cannot be parsed; the message names the field and the reason."""


@dataclass(frozen=True)
class Schedule:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool
    weekdays_restricted: bool

    def _day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first firing strictly after ``moment`` (to the minute)."""
        moment = moment.astimezone(dt.timezone.utc) if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
        start = moment.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.date()
        for offset in range(_SEARCH_DAYS):
            current = day + dt.timedelta(days=offset)
            if not self._day_matches(current):
                continue
            first_hour = start.hour if offset == 0 else 0
            for hour in sorted(h for h in self.hours if h >= first_hour):
                first_minute = start.minute if offset == 0 and hour == start.hour else 0
                minutes = sorted(m for m in self.minutes if m >= first_minute)
                if minutes:
                    return dt.datetime(current.year, current.month, current.day, hour, minutes[0], tzinfo=dt.timezone.utc)
        raise ScheduleError(f"schedule {self.text!r} never fires")


def _value(token: str, low: int, high: int, names: dict[str, int], field: str) -> int:
    lowered = token.lower()
    if lowered in names:
        return names[lowered]
    if not token.isdigit():
        raise ScheduleError(f"{field}: {token!r} is not a number{' or name' if names else ''}")
    value = int(token)
    if not low <= value <= high:
        raise ScheduleError(f"{field}: {value} is outside {low}-{high}")
    return value


def _field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    restricted = True
    for part in text.split(","):
        if not part:
            raise ScheduleError(f"{field}: empty list entry in {text!r}")
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"{field}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if span in ("*", "?"):
            first, last = low, high
            if not step_text:
                restricted = False
        elif "-" in span:
            left, _, right = span.partition("-")
            first, last = _value(left, low, high, names, field), _value(right, low, high, names, field)
            if first > last:
                raise ScheduleError(f"{field}: range {span!r} runs backwards")
        else:
            first = _value(span, low, high, names, field)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values), restricted


def parse_schedule(text: str) -> Schedule:
    """A parsed schedule; raises ScheduleError naming the field at fault."""
    source = str(text or "").strip()
    expanded = _SHORTHANDS.get(source.lower(), source)
    parts = expanded.split()
    if len(parts) != 5:
        raise ScheduleError(f"schedule {source!r} must have 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    parsed = [_field(part, name, low, high, names) for part, (name, low, high, names) in zip(parts, _FIELDS)]
    weekdays = frozenset(day % 7 for day in parsed[4][0])  # 7 is Sunday too
    return Schedule(source, parsed[0][0], parsed[1][0], parsed[2][0], parsed[3][0], weekdays, parsed[2][1], parsed[4][1])
