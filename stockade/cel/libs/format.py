"""Kubernetes' format library: ``format.dns1123Label().validate(name)`` returns an optional list of problems.

cel-expr-python cannot return optionals from Python, so ``validate`` and ``format.named`` return a tagged
"pseudo-optional" map that answers ``hasValue()`` and ``value()`` like a real optional (``orValue`` is reserved
by the backend for real optionals and is not available on it).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
import urllib.parse
from typing import Any, Callable

from stockade.cel.functions import Library, tagged, untag

FORMAT_TYPE = "kubernetes.NamedFormat"
OPTIONAL_TYPE = "stockade.Optional"

_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_UUID_RE = re.compile(r"^(?i:[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12})$")


def _mask_trailing_dash(text: str, prefix: bool) -> str:
    # generateName prefixes may end with "-"; validate them as if a suffix followed.
    return text[:-1] + "a" if prefix and len(text) > 1 and text.endswith("-") else text


def _dns_label(text: str, prefix: bool = False) -> list[str]:
    text = _mask_trailing_dash(text, prefix)
    problems = []
    if len(text) > 63:
        problems.append("must be no more than 63 characters")
    if not _LABEL_RE.match(text):
        problems.append("a lowercase RFC 1123 label must contain only lower case alphanumerics or '-', and start "
                        "and end with an alphanumeric (regex '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    return problems


def _dns_subdomain(text: str, prefix: bool = False) -> list[str]:
    text = _mask_trailing_dash(text, prefix)
    problems = []
    if len(text) > 253:
        problems.append("must be no more than 253 characters")
    if not text or not all(_LABEL_RE.match(part) for part in text.split(".")):
        problems.append("a lowercase RFC 1123 subdomain must contain only lower case alphanumerics, '-' or '.', "
                        "and start and end with an alphanumeric")
    return problems


def _dns_1035_label(text: str, prefix: bool = False) -> list[str]:
    text = _mask_trailing_dash(text, prefix)
    problems = []
    if len(text) > 63:
        problems.append("must be no more than 63 characters")
    if not _LABEL_1035_RE.match(text):
        problems.append("a DNS-1035 label must contain only lower case alphanumerics or '-', start with a letter "
                        "and end with an alphanumeric (regex '[a-z]([-a-z0-9]*[a-z0-9])?')")
    return problems


def _qualified_name(text: str) -> list[str]:
    problems: list[str] = []
    prefix, slash, name = text.rpartition("/") if "/" in text else ("", "", text)
    if slash:
        if not prefix:
            problems.append("prefix part must not be empty")
        else:
            problems.extend("prefix part " + problem for problem in _dns_subdomain(prefix))
    if not name:
        problems.append("name part must not be empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME_RE.match(name):
        problems.append("name part must contain only alphanumerics, '-', '_' or '.', and start and end with an "
                        "alphanumeric")
    return problems


def _label_value(text: str) -> list[str]:
    problems = []
    if len(text) > 63:
        problems.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(text):
        problems.append("a label value must be empty or contain only alphanumerics, '-', '_' or '.', and start "
                        "and end with an alphanumeric")
    return problems


def _uri(text: str) -> list[str]:
    from stockade.cel.libs.network import _split_url

    try:
        _split_url(text)
        urllib.parse.urlsplit(text)
    except ValueError as error:
        return [str(error)]
    return []


def _byte(text: str) -> list[str]:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return ["invalid base64"]
    return []


def _date(text: str) -> list[str]:
    try:
        datetime.date.fromisoformat(text) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else _raise()
    except ValueError:
        return ["invalid date"]
    return []


def _datetime(text: str) -> list[str]:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text):
        return ["invalid datetime"]
    try:
        datetime.datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return ["invalid datetime"]
    return []


def _raise() -> None:
    raise ValueError("not a date")


FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": _dns_label,
    "dns1123Subdomain": _dns_subdomain,
    "dns1035Label": _dns_1035_label,
    "qualifiedName": _qualified_name,
    "dns1123LabelPrefix": lambda text: _dns_label(text, True),
    "dns1123SubdomainPrefix": lambda text: _dns_subdomain(text, True),
    "dns1035LabelPrefix": lambda text: _dns_1035_label(text, True),
    "labelValue": _label_value,
    "uri": _uri,
    "uuid": lambda text: [] if _UUID_RE.match(text) else ["does not match the UUID format"],
    "byte": _byte,
    "date": _date,
    "datetime": _datetime,
}


def pseudo_optional(value: Any, present: bool) -> dict[str, Any]:
    return tagged(OPTIONAL_TYPE, [value] if present else [])


def _validate(named_format: Any, text: str) -> dict[str, Any]:
    problems = FORMATS[untag(named_format, FORMAT_TYPE)](text)
    return pseudo_optional(problems, bool(problems))


def _named(name: str) -> dict[str, Any]:
    return pseudo_optional(tagged(FORMAT_TYPE, name), name in FORMATS)


def _has_value(optional: Any) -> bool:
    return bool(untag(optional, OPTIONAL_TYPE))


def _value(optional: Any) -> Any:
    items = untag(optional, OPTIONAL_TYPE)
    if not items:
        raise ValueError("optional.none() dereference")
    return items[0]


def build_format() -> Library:
    library = Library("k8s.format")
    for name in FORMATS:
        library.add(f"format.{name}", (), "opaque", lambda name=name: tagged(FORMAT_TYPE, name))
    library.add("format.named", ("string",), "opaque", _named)
    library.add("validate", ("map", "string"), "opaque", _validate, member=True)
    library.add("hasValue", ("map",), "bool", _has_value, member=True)
    library.add("value", ("map",), "dyn", _value, member=True)
    return library
