"""Kyverno's pure CEL libraries (kyverno/sdk ``extensions/cel/libs``): json, yaml, hash, gzip, x509, math, time,
user, transform, random, the string-based ``time_*`` functions and ``jmespath``.  Both the unprefixed (pre-1.18) and the ``namespace.`` prefixed names exist."""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import math
from typing import Any

import yaml

from stockade import yamlsafe
from stockade.cel.functions import Library

_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def _numbers_as_floats(value: Any) -> Any:
    """Go's encoding/json decodes every number as float64; CEL then sees doubles."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {key: _numbers_as_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_as_floats(item) for item in value]
    return value


def _json_unmarshal(text: str) -> Any:
    try:
        return _numbers_as_floats(json.loads(text))
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON: {error}") from None


def _go_json(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(key): _go_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_go_json(item) for item in value]
    return value


def _json_marshal(value: Any) -> str:
    # Go sorts map keys and writes compact JSON without escaping-only differences that matter to policies.
    return json.dumps(_go_json(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _yaml_parse(text: str) -> Any:
    try:
        return _numbers_as_floats(yamlsafe.load(text))
    except yaml.YAMLError as error:
        raise ValueError(f"invalid YAML: {error}") from None


def _hex_digest(algorithm: str) -> Any:
    return lambda text: hashlib.new(algorithm, text.encode()).hexdigest()


def _gzip_compress(value: Any) -> bytearray:
    if isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif isinstance(value, str):
        data = value.encode()
    else:
        data = _json_marshal(value).encode()
    # cel-expr-python truncates ``bytes`` at the first NUL but copies ``bytearray`` faithfully.
    return bytearray(gzip.compress(data))


def _gzip_decompress(data: Any) -> str:
    try:
        return gzip.decompress(bytes(data)).decode()
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise ValueError(f"failed to decompress: {error}") from None


def _round(value: float, precision: int) -> float:
    shift = math.pow(10, precision)
    scaled = value * shift
    # Go's math.Round rounds half away from zero (Python's round() rounds half to even).
    rounded = math.floor(abs(scaled) + 0.5) * (1 if scaled >= 0 else -1)
    return rounded / shift


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _to_cron(moment: datetime.datetime) -> str:
    weekday = (moment.weekday() + 1) % 7  # Go: Sunday == 0
    return f"{moment.minute} {moment.hour} {moment.day} {moment.month} {weekday}"


def _truncate(moment: datetime.datetime, period: datetime.timedelta) -> datetime.datetime:
    step = period // datetime.timedelta(microseconds=1)
    if step <= 0:
        return moment
    epoch = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)  # Go truncates relative to year 1
    elapsed = (moment - epoch) // datetime.timedelta(microseconds=1)
    return epoch + datetime.timedelta(microseconds=elapsed - elapsed % step)


def _parse_service_account(user: str) -> dict[str, str]:
    account = {"Name": "", "Namespace": ""}
    if user.startswith(_SERVICE_ACCOUNT_PREFIX):
        namespace, separator, name = user[len(_SERVICE_ACCOUNT_PREFIX):].partition(":")
        if separator:
            account = {"Name": name, "Namespace": namespace}
    return account


def _list_obj_to_map(keys: list[Any], values: list[Any], key_field: str, value_field: str) -> dict[str, Any]:
    if len(keys) != len(values):
        raise ValueError(f"listObjToMap must take lists of equal length. list1: {len(keys)}, list2: {len(values)}")
    result: dict[str, Any] = {}
    for key_object, value_object in zip(keys, values):
        if not isinstance(key_object, dict) or not isinstance(key_object.get(key_field), str):
            raise ValueError("the passed key name cannot be handled as a string in the key object list")
        if not isinstance(value_object, dict):
            raise ValueError("object cannot be handled as a map string to any in the value object list")
        result[key_object[key_field]] = value_object.get(value_field)
    return result


# --- random(pattern): Kyverno's CEL random() and its JMESPath random() are both goregen, so they share one generator.


def _random_string(pattern: str = "[0-9a-z]{8}") -> str:
    from stockade.jmespath.regen import generate

    return generate(pattern)


def _via_jmespath(function: str, arity: int) -> Any:
    """Kyverno's string-based ``time_*`` CEL functions behave exactly like its JMESPath functions of the same
    name, so they share the JMESPath implementation (compiled once)."""
    from stockade.jmespath import JMESPathError, compile_expression

    arguments = ", ".join(f"@[{index}]" for index in range(arity))
    compiled = compile_expression(f"{function}({arguments})")

    def call(*values: Any) -> Any:
        try:
            return compiled.search(list(values))
        except JMESPathError as error:
            raise ValueError(f"{function}: {error}") from None

    return call


def _jmespath(query: str, data: Any) -> Any:
    """``jmespath(query, data)``: Kyverno's JMESPath dialect over CEL data."""
    from stockade.jmespath import JMESPathError, search

    try:
        return search(query, data)
    except JMESPathError as error:
        raise ValueError(f"jmespath evaluation failed: {error}") from None


def build_kyverno() -> Library:
    library = Library("kyverno")
    library.add("json.unmarshal", ("string",), "dyn", _json_unmarshal)
    library.add("json.marshal", ("any",), "string", _json_marshal)
    library.add("yaml.parse", ("string",), "dyn", _yaml_parse)
    for algorithm in ("sha1", "sha256", "md5"):
        library.add(algorithm, ("string",), "string", _hex_digest(algorithm))
        library.add(f"hash.{algorithm}", ("string",), "string", _hex_digest(algorithm))
    library.add("gzip.compress", ("any",), "bytes", _gzip_compress)
    library.add("gzip.decompress", ("bytes",), "string", _gzip_decompress)
    library.add("math.round", ("double", "int"), "double", _round)
    library.add("time.now", (), "timestamp", _now)
    library.add("time.toCron", ("timestamp",), "string", _to_cron)
    library.add("time.truncate", ("timestamp", "duration"), "timestamp", _truncate)
    for name in ("time_now", "time_now_utc"):
        library.add(name, (), "string", _via_jmespath(name, 0))
    for name in ("time_parse", "time_add", "time_diff"):
        library.add(name, ("string", "string"), "string", _via_jmespath(name, 2))
    for name in ("time_before", "time_after"):
        library.add(name, ("string", "string"), "bool", _via_jmespath(name, 2))
    library.add("jmespath", ("string", "any"), "dyn", _jmespath)
    for name in ("parseServiceAccount", "user.parseServiceAccount"):
        library.add(name, ("string",), "opaque", _parse_service_account)
    for name in ("listObjToMap", "transform.listObjToMap"):
        library.add(name, ("list", "list", "string", "string"), "map", _list_obj_to_map)
    for name in ("random", "random.random"):
        library.add(name, (), "string", _random_string)
        library.add(name, ("string",), "string", _random_string)
    return library
