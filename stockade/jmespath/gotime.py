"""Go's ``time.Parse`` reference-layout language and the bits of ``time.Time`` Kyverno's time functions use.

Layouts such as ``2006-01-02T15:04:05Z07:00`` or ``Mon Jan _2 15:04:05 MST 2006`` describe the reference time
Mon Jan 2 15:04:05 MST 2006. Times are held as Unix seconds + nanoseconds + a fixed UTC offset, with our own civil
calendar arithmetic so that Go's year-0 default (a layout without a year) works, which ``datetime`` cannot do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from stockade.errors import StockadeError

_NANOS_PER_SECOND = 1_000_000_000
_SECONDS_FROM_YEAR_ONE_TO_UNIX = 62_135_596_800

_LONG_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December")
_SHORT_MONTHS = tuple(name[:3] for name in _LONG_MONTHS)
_LONG_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_SHORT_DAYS = tuple(name[:3] for name in _LONG_DAYS)

RFC3339 = "2006-01-02T15:04:05Z07:00"


class GoTimeError(StockadeError, ValueError):
    """A value that does not match its layout; ``str()`` follows Go's ``time.ParseError`` wording."""


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date (any year, including 0 and negatives)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    year = year_of_era + era * 400
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + (3 if month_index < 10 else -9)
    return year + (month <= 2), month, day


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_month(month: int, year: int) -> int:
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


@dataclass(frozen=True, slots=True)
class GoTime:
    """An instant plus the fixed offset it is presented in (what ``time.Time`` carries for parsed values)."""

    seconds: int  # Unix seconds
    nanos: int = 0
    offset: int = 0  # seconds east of UTC

    @property
    def total_nanos(self) -> int:
        return self.seconds * _NANOS_PER_SECOND + self.nanos

    def fields(self) -> tuple[int, int, int, int, int, int, int]:
        """Year, month, day, hour, minute, second and weekday (Sunday = 0) in this time's own offset."""
        local = self.seconds + self.offset
        days, second_of_day = divmod(local, 86400)
        year, month, day = civil_from_days(days)
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        weekday = (days + 4) % 7  # 1970-01-01 was a Thursday
        return year, month, day, hour, minute, second, weekday

    def utc(self) -> GoTime:
        return GoTime(self.seconds, self.nanos, 0)

    def add_nanos(self, delta: int) -> GoTime:
        seconds, nanos = divmod(self.total_nanos + delta, _NANOS_PER_SECOND)
        return GoTime(seconds, nanos, self.offset)

    def truncate(self, step: int) -> GoTime:
        """``Time.Truncate``: rounds down on the absolute timeline measured from January 1, year 1 UTC."""
        if step <= 0:
            return self
        since_year_one = (self.seconds + _SECONDS_FROM_YEAR_ONE_TO_UNIX) * _NANOS_PER_SECOND + self.nanos
        return self.add_nanos(-(since_year_one % step))

    def rfc3339(self) -> str:
        year, month, day, hour, minute, second, _ = self.fields()
        year_text = f"{year:04d}" if year >= 0 else f"-{-year:04d}"
        text = f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        if self.offset == 0:
            return text + "Z"
        sign = "+" if self.offset > 0 else "-"
        hours, minutes = divmod(abs(self.offset) // 60, 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"


# -------------------------------------------------------------------------------------------------------------
# Layout tokenizer: splits a layout into (literal prefix, element) pairs, mirroring Go's nextStdChunk.

_ZONE_ELEMENTS = ("Z070000", "Z07:00:00", "Z0700", "Z07:00", "Z07", "-070000", "-07:00:00", "-0700", "-07:00", "-07")


def _next_element(layout: str, start: int) -> tuple[int, str]:
    """Return (index, element) of the next layout element at or after ``start``; element "" means none."""
    length = len(layout)
    for index in range(start, length):
        character = layout[index]
        rest = layout[index:]
        if character == "J" and rest.startswith("Jan"):
            return index, "January" if rest.startswith("January") else "Jan"
        if character == "M":
            if rest.startswith("Monday"):
                return index, "Monday"
            if rest.startswith("Mon"):
                return index, "Mon"
            if rest.startswith("MST"):
                return index, "MST"
        if character == "0" and index + 1 < length and layout[index + 1] in "123456":
            return index, layout[index : index + 2]
        if character == "0" and rest.startswith("002"):
            return index, "002"
        if character == "1":
            return index, "15" if rest.startswith("15") else "1"
        if character == "2":
            if rest.startswith("2006"):
                return index, "2006"
            return index, "2"
        if character == "_":
            if rest.startswith("_2"):
                if rest.startswith("_2006"):
                    # "_2006" is a literal underscore followed by a four-digit year.
                    return index + 1, "2006"
                return index, "_2"
            if rest.startswith("__2"):
                return index, "__2"
        if character in "345":
            return index, character
        if character == "P" and rest.startswith("PM"):
            return index, "PM"
        if character == "p" and rest.startswith("pm"):
            return index, "pm"
        if character in "-Z":
            for element in _ZONE_ELEMENTS:
                if rest.startswith(element):
                    return index, element
        if character in ".," and index + 1 < length and layout[index + 1] in "09":
            digit = layout[index + 1]
            end = index + 1
            while end < length and layout[end] == digit:
                end += 1
            if not (end < length and layout[end].isdigit()):
                return index, layout[index:end]
    return length, ""


def _skip(value: str, prefix: str) -> str | None:
    """Match a literal layout prefix; runs of spaces match runs of spaces, as Go's ``skip`` does."""
    while prefix:
        if prefix[0] == " ":
            if value and value[0] != " ":
                return None
            prefix = prefix.lstrip(" ")
            value = value.lstrip(" ")
            continue
        if not value or value[0] != prefix[0]:
            return None
        prefix = prefix[1:]
        value = value[1:]
    return value


def _number(value: str, fixed: bool) -> tuple[int, str] | None:
    if not value or not value[0].isdigit() or not value[0].isascii():
        return None
    if len(value) < 2 or not value[1].isdigit() or not value[1].isascii():
        if fixed:
            return None
        return int(value[0]), value[1:]
    return int(value[:2]), value[2:]


def _lookup_name(names: tuple[str, ...], value: str) -> tuple[int, str] | None:
    for index, name in enumerate(names):
        if len(value) >= len(name) and value[: len(name)].lower() == name.lower():
            return index, value[len(name) :]
    return None


def _fraction_nanos(digits: str) -> int:
    return int((digits + "000000000")[:9])


def _zone_abbreviation_length(value: str) -> int:
    """How many characters of ``value`` form a time-zone abbreviation (Go's parseTimeZone), or 0."""
    if len(value) < 3:
        return 0
    if value[:4] in ("ChST", "MeST"):
        return 4
    if value.startswith("GMT"):
        rest = value[3:]
        if rest[:1] in ("+", "-"):
            digits = 0
            while digits + 1 < len(rest) and rest[digits + 1].isdigit():
                digits += 1
            if digits and int(rest[1 : 1 + digits]) <= 23:
                return 4 + digits
        return 3
    upper = 0
    while upper < min(len(value), 6) and "A" <= value[upper] <= "Z":
        upper += 1
    if upper == 3:
        return 3
    if upper == 4 and (value[3] == "T" or value[:4] == "WITA"):
        return 4
    if upper == 5 and value[4] == "T":
        return 5
    return 0


def parse(layout: str, value: str) -> GoTime:
    """``time.Parse(layout, value)`` for the layouts Kyverno users write; raises GoTimeError like Go does."""
    original_layout, original_value = layout, value
    year, month, day, yday = 0, -1, -1, -1
    hour = minute = second = nanos = 0
    pm_set = am_set = False
    offset: int | None = None
    position = 0

    def bad(value_element: str, layout_element: str) -> GoTimeError:
        return GoTimeError(
            f"parsing time {_quote(original_value)} as {_quote(original_layout)}: "
            f"cannot parse {_quote(value_element)} as {_quote(layout_element)}"
        )

    def out_of_range(what: str) -> GoTimeError:
        return GoTimeError(f"parsing time {_quote(original_value)}: {what} out of range")

    while True:
        index, element = _next_element(layout, position)
        prefix = layout[position:index]
        remaining = _skip(value, prefix)
        if remaining is None:
            raise bad(value, prefix)
        value = remaining
        if not element:
            if value:
                raise GoTimeError(f"parsing time {_quote(original_value)}: extra text: {_quote(value)}")
            break
        position = index + len(element)
        before = value
        parsed: tuple[int, str] | None
        if element == "2006":
            if len(value) < 4 or not value[:4].isdigit():
                raise bad(before, element)
            year, value = int(value[:4]), value[4:]
        elif element == "06":
            if len(value) < 2 or not value[:2].isdigit():
                raise bad(before, element)
            year, value = int(value[:2]), value[2:]
            year += 1900 if year >= 69 else 2000
        elif element in ("January", "Jan"):
            parsed = _lookup_name(_LONG_MONTHS if element == "January" else _SHORT_MONTHS, value)
            if parsed is None:
                raise bad(before, element)
            month, value = parsed[0] + 1, parsed[1]
        elif element in ("Monday", "Mon"):
            parsed = _lookup_name(_LONG_DAYS if element == "Monday" else _SHORT_DAYS, value)
            if parsed is None:
                raise bad(before, element)
            value = parsed[1]
        elif element in ("1", "01"):
            parsed = _number(value, element == "01")
            if parsed is None:
                raise bad(before, element)
            month, value = parsed
            if not 1 <= month <= 12:
                raise out_of_range("month")
        elif element in ("2", "_2", "02"):
            if element == "_2" and value.startswith(" "):
                value = value[1:]
            parsed = _number(value, element == "02")
            if parsed is None:
                raise bad(before, element)
            day, value = parsed
        elif element in ("__2", "002"):
            if element == "__2":
                for _ in range(2):
                    if value.startswith(" "):
                        value = value[1:]
            digits = 0
            while digits < 3 and digits < len(value) and value[digits].isdigit():
                digits += 1
            if digits == 0 or (element == "002" and digits != 3):
                raise bad(before, element)
            yday, value = int(value[:digits]), value[digits:]
            if not 1 <= yday <= 366:
                raise out_of_range("day-of-year")
        elif element == "15":
            parsed = _number(value, False)
            if parsed is None:
                raise bad(before, element)
            hour, value = parsed
            if hour > 23:
                raise out_of_range("hour")
        elif element in ("3", "03"):
            parsed = _number(value, element == "03")
            if parsed is None:
                raise bad(before, element)
            hour, value = parsed
            if hour > 12:
                raise out_of_range("hour")
        elif element in ("4", "04"):
            parsed = _number(value, element == "04")
            if parsed is None:
                raise bad(before, element)
            minute, value = parsed
            if minute > 59:
                raise out_of_range("minute")
        elif element in ("5", "05"):
            parsed = _number(value, element == "05")
            if parsed is None:
                raise bad(before, element)
            second, value = parsed
            if second > 59:
                raise out_of_range("second")
            # A fraction in the value is accepted even when the layout has none right here.
            if len(value) >= 2 and value[0] in ".," and value[1].isdigit():
                _, following = _next_element(layout, position)
                if not (following[:1] in ".," and len(following) > 1):
                    end = 1
                    while end < len(value) and value[end].isdigit():
                        end += 1
                    nanos = _fraction_nanos(value[1:end])
                    value = value[end:]
        elif element in ("PM", "pm"):
            marker = value[:2]
            if element == "PM" and marker in ("PM", "AM") or element == "pm" and marker in ("pm", "am"):
                pm_set, am_set = marker in ("PM", "pm"), marker in ("AM", "am")
                value = value[2:]
            else:
                raise bad(before, element)
        elif element in _ZONE_ELEMENTS:
            if element.startswith("Z") and value.startswith("Z"):
                offset, value = 0, value[1:]
            else:
                shape = element[1:]  # e.g. "07:00"
                width = 1 + len(shape)
                candidate = value[:width]
                if len(candidate) < width or candidate[0] not in "+-":
                    raise bad(before, element)
                body = candidate[1:]
                for expected, actual in zip(shape, body):
                    if expected == ":" and actual != ":" or expected != ":" and not actual.isdigit():
                        raise bad(before, element)
                numbers = [int(part) for part in (body.split(":") if ":" in shape else
                                                   [body[i: i + 2] for i in range(0, len(body), 2)])]
                hours, minutes, seconds = (numbers + [0, 0])[:3]
                if hours > 24 or minutes > 60 or seconds > 60:
                    raise out_of_range("time zone offset")
                total = hours * 3600 + minutes * 60 + seconds
                offset = -total if candidate[0] == "-" else total
                value = value[width:]
        elif element == "MST":
            if value.startswith("UTC"):
                offset, value = 0, value[3:]
            else:
                length = _zone_abbreviation_length(value)
                if length == 0:
                    raise bad(before, element)
                offset, value = 0, value[length:]
        elif element[0] in ".," and element[1:2] == "0":
            width = len(element)
            if len(value) < width or value[0] not in ".," or not value[1:width].isdigit():
                raise bad(before, element)
            nanos, value = _fraction_nanos(value[1:width]), value[width:]
        elif element[0] in ".," and element[1:2] == "9":
            if len(value) >= 2 and value[0] in ".," and value[1].isdigit():
                end = 1
                while end < len(value) and value[end].isdigit():
                    end += 1
                nanos, value = _fraction_nanos(value[1:end]), value[end:]
    if pm_set and hour < 12:
        hour += 12
    elif am_set and hour == 12:
        hour = 0
    if yday >= 0:
        if month < 0:
            cumulative = 0
            for candidate_month in range(1, 13):
                length = _days_in_month(candidate_month, year)
                if yday <= cumulative + length:
                    month, day = candidate_month, yday - cumulative
                    break
                cumulative += length
            else:
                raise out_of_range("day-of-year")
    if month < 0:
        month = 1
    if day < 0:
        day = 1
    if day < 1 or day > _days_in_month(month, year):
        raise out_of_range("day")
    local_seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    zone = offset or 0
    return GoTime(local_seconds - zone, nanos, zone)


def parse_rfc3339(value: str) -> GoTime:
    return parse(RFC3339, value)
