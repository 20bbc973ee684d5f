"""CEL values crossing between the backend and Python: back into the backend, and out to JSON.

Durations and timestamps reach Python as ``datetime.timedelta``/``datetime.datetime``.  cel-cpp does not take
those back (activation data, a library function's result) but unwraps protobuf's well-known types, so
:func:`to_backend` turns them into ``google.protobuf.Duration``/``Timestamp``.  Where a result leaves CEL as JSON
(a mutation's patch, a generated resource, an HTTP body), :func:`to_json` renders them as cel-go's conversion to a
JSON value does: a duration as its string form (``"259200s"``), a timestamp as RFC 3339 with nanoseconds trimmed,
bytes as standard base64.
"""

from __future__ import annotations

import base64
import datetime
from decimal import Decimal
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

PLAIN_SCALARS = (str, int, float, bool, bytes, type(None))


def to_backend(value: Any) -> Any:
    """Python -> a value the backend accepts as input (activation data, a library function's result).

    cel-cpp refuses ``datetime`` values there but unwraps protobuf's well-known types, so CEL durations and
    timestamps that crossed into Python (a variable holding ``duration("72h")``, a list of timestamps a library
    function returns) go back as ``google.protobuf.Duration``/``Timestamp``.  A naive datetime is taken as UTC.
    """
    if isinstance(value, PLAIN_SCALARS) or isinstance(value, duration_pb2.Duration | timestamp_pb2.Timestamp):
        return value
    if isinstance(value, dict):
        return {to_backend(key): to_backend(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_backend(item) for item in value]
    if isinstance(value, datetime.timedelta):
        duration = duration_pb2.Duration()
        duration.FromTimedelta(value)
        return duration
    if isinstance(value, datetime.datetime):
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc))
        return stamp
    if isinstance(value, bytearray):
        return bytes(value)
    return value



def duration_string(value: datetime.timedelta) -> str:
    """CEL's ``string(duration)``: seconds in the shortest decimal form, then ``s``."""
    seconds = value.total_seconds()
    if seconds.is_integer():
        return f"{int(seconds)}s"
    return f"{format(Decimal(repr(seconds)), 'f')}s"


def timestamp_string(value: datetime.datetime) -> str:
    """CEL's ``string(timestamp)``: RFC 3339 in UTC, fractional seconds only when present, trailing zeros trimmed."""
    moment = value.astimezone(datetime.timezone.utc) if value.tzinfo else value
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += "." + f"{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def to_json(value: Any) -> Any:
    """A CEL result as a JSON value (see the module docstring); plain JSON passes through unchanged."""
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    if isinstance(value, dict):
        return {str(key) if not isinstance(key, str) else key: to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, datetime.timedelta):
        return duration_string(value)
    if isinstance(value, datetime.datetime):
        return timestamp_string(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value
