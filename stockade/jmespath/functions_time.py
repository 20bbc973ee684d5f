"""Kyverno's time functions (pkg/engine/jmespath/time.go): RFC 3339 in, RFC 3339 or Go duration text out."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from stockade.jmespath.errors import JMESPathError
from stockade.jmespath.gotime import RFC3339, GoTime, GoTimeError, parse
from stockade.jmespath.registry import STRING, register, string_argument
from stockade.units.duration import DurationError, format_duration, parse_duration

_BOOLEAN = ("bool",)

# Injectable clock so tests (and a deterministic `kyverno test` run) can pin "now": returns Unix nanoseconds.
_clock: Callable[[], int] = time.time_ns


def set_clock(clock: Callable[[], int] | None) -> None:
    """Replace the source of "now" (Unix nanoseconds); ``None`` restores the system clock."""
    global _clock
    _clock = clock or time.time_ns


def _now() -> GoTime:
    nanos = _clock()
    seconds, remainder = divmod(nanos, 1_000_000_000)
    offset = time.localtime(seconds).tm_gmtoff or 0
    return GoTime(seconds, remainder, offset)


def _parse(layout: str, value: str) -> GoTime:
    try:
        return parse(layout, value)
    except GoTimeError as error:
        raise JMESPathError(str(error)) from None


def _time_argument(function: str, arguments: list[Any], index: int) -> GoTime:
    return _parse(RFC3339, string_argument(function, arguments, index))


def _duration_argument(function: str, arguments: list[Any], index: int) -> int:
    try:
        return parse_duration(string_argument(function, arguments, index))
    except DurationError as error:
        raise JMESPathError(str(error)) from None


@register("time_since", (STRING,), (STRING,), (STRING,), returns=(STRING,),
          note="calculate the difference between a start and end period of time where the end may either be a "
               "static definition or the then-current time")
def _time_since(arguments: list[Any]) -> Any:
    layout = string_argument("time_since", arguments, 0) or RFC3339
    start = _parse(layout, string_argument("time_since", arguments, 1))
    end_text = string_argument("time_since", arguments, 2)
    end = _parse(layout, end_text) if end_text else _now()
    return format_duration(end.total_nanos - start.total_nanos)


@register("time_now", returns=(STRING,), note="returns current time in RFC 3339 format")
def _time_now(arguments: list[Any]) -> Any:
    return _now().rfc3339()


@register("time_now_utc", returns=(STRING,), note="returns current UTC time in RFC 3339 format")
def _time_now_utc(arguments: list[Any]) -> Any:
    return _now().utc().rfc3339()


@register("time_to_cron", (STRING,), returns=(STRING,),
          note="converts a time (RFC 3339) to a cron expression (string).")
def _time_to_cron(arguments: list[Any]) -> Any:
    _, month, day, hour, minute, _, weekday = _time_argument("time_to_cron", arguments, 0).fields()
    return f"{minute} {hour} {day} {month} {weekday}"


@register("time_add", (STRING,), (STRING,), returns=(STRING,),
          note="adds duration (second string) to a time value (first string)")
def _time_add(arguments: list[Any]) -> Any:
    # Kyverno validates both arguments under the name time_to_cron; keep its wording.
    moment = _time_argument("time_to_cron", arguments, 0)
    return moment.add_nanos(_duration_argument("time_to_cron", arguments, 1)).rfc3339()


_EPOCH_LAYOUT = re.compile(r"^[+-]?[0-9]+$")


@register("time_parse", (STRING,), (STRING,), returns=(STRING,),
          note="changes a time value of a given layout to RFC 3339")
def _time_parse(arguments: list[Any]) -> Any:
    layout = string_argument("time_parse", arguments, 0)
    value = string_argument("time_parse", arguments, 1)
    if _EPOCH_LAYOUT.match(layout) and _fits_int64(layout):
        if not _EPOCH_LAYOUT.match(value) or not _fits_int64(value):
            raise JMESPathError(f'strconv.ParseInt: parsing "{value}": invalid syntax')
        return GoTime(int(value)).rfc3339()
    return _parse(layout, value).rfc3339()


def _fits_int64(text: str) -> bool:
    return -(2**63) <= int(text) < 2**63


@register("time_utc", (STRING,), returns=(STRING,),
          note="calcutes time in UTC from a given time in RFC 3339 format")
def _time_utc(arguments: list[Any]) -> Any:
    return _time_argument("time_utc", arguments, 0).utc().rfc3339()


@register("time_diff", (STRING,), (STRING,), returns=(STRING,),
          note="calculate the difference between a start and end date in RFC3339 format")
def _time_diff(arguments: list[Any]) -> Any:
    start = _time_argument("time_diff", arguments, 0)
    end = _time_argument("time_diff", arguments, 1)
    return format_duration(end.total_nanos - start.total_nanos)


@register("time_before", (STRING,), (STRING,), returns=_BOOLEAN,
          note="checks if a time is before another time, both in RFC3339 format")
def _time_before(arguments: list[Any]) -> Any:
    return _time_argument("time_before", arguments, 0).total_nanos < _time_argument(
        "time_before", arguments, 1).total_nanos


@register("time_after", (STRING,), (STRING,), returns=_BOOLEAN,
          note="checks if a time is after another time, both in RFC3339 format")
def _time_after(arguments: list[Any]) -> Any:
    return _time_argument("time_after", arguments, 0).total_nanos > _time_argument(
        "time_after", arguments, 1).total_nanos


@register("time_between", (STRING,), (STRING,), (STRING,), returns=_BOOLEAN,
          note="checks if a time is between a start and end time, all in RFC3339 format")
def _time_between(arguments: list[Any]) -> Any:
    moment = _time_argument("time_between", arguments, 0).total_nanos
    start = _time_argument("time_between", arguments, 1).total_nanos
    end = _time_argument("time_between", arguments, 2).total_nanos
    return start < moment < end


@register("time_truncate", (STRING,), (STRING,), returns=(STRING,),
          note="returns the result of rounding time down to a multiple of duration")
def _time_truncate(arguments: list[Any]) -> Any:
    moment = _time_argument("time_truncate", arguments, 0)
    return moment.truncate(_duration_argument("time_truncate", arguments, 1)).rfc3339()
