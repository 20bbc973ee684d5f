"""Kyverno's custom string, collection and encoding functions (pkg/engine/jmespath/functions.go)."""

from __future__ import annotations

from stockade import gopath

import base64
import binascii
import hashlib
import ipaddress
import json
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import yaml

from stockade import yamlsafe
from stockade.jmespath.errors import JMESPathError
from stockade.gofmt import go_float_f, go_float_g
from stockade.jmespath.golang import deep_equal, is_number
from stockade.goregex import GoRegexError, GoRegexp, OutputTooLargeError, compile_go_regex, replace_all
from stockade.wildcard import match as match_wildcard
from stockade.jmespath.registry import (
    ANY,
    ARRAY,
    ARRAY_STRING,
    NUMBER,
    OBJECT,
    STRING,
    MAX_RESULT_GROWTH,
    ResultTooLargeError,
    argument_type_error,
    check_result_size,
    generic_error,
    register,
    string_argument,
)

_BOOLEAN = ("bool",)


@register("compare", (STRING,), (STRING,), returns=(NUMBER,), note="compares two strings lexicographically")
def _compare(arguments: list[Any]) -> Any:
    left = string_argument("compare", arguments, 0).encode()
    right = string_argument("compare", arguments, 1).encode()
    return (left > right) - (left < right)


@register("equal_fold", (STRING,), (STRING,), returns=_BOOLEAN,
          note="allows comparing two strings for equivalency where the only differences are letter cases")
def _equal_fold(arguments: list[Any]) -> Any:
    left = string_argument("equal_fold", arguments, 0)
    right = string_argument("equal_fold", arguments, 1)
    return len(left) == len(right) and all(
        a == b or a.lower() == b.lower() or a.upper() == b.upper() for a, b in zip(left, right)
    )


@register("replace", (STRING,), (STRING,), (STRING,), (NUMBER,), returns=(STRING,),
          note="replaces a specified number of instances of the source string with the replacement string in a "
               "parent ")
def _replace(arguments: list[Any]) -> Any:
    text = string_argument("replace", arguments, 0)
    old = string_argument("replace", arguments, 1)
    new = string_argument("replace", arguments, 2)
    count = int(arguments[3])
    return _go_replace(text, old, new, count)


def _go_replace(text: str, old: str, new: str, count: int) -> str:
    """``strings.Replace``: a negative count means all; an empty ``old`` inserts between every rune."""
    if count == 0 or old == new:
        return text
    occurrences = len(text) + 1 if old == "" else text.count(old)
    if count > 0:
        occurrences = min(occurrences, count)
    check_result_size("replace", len(text) + occurrences * (len(new) - len(old)), len(text) + len(new))
    if old == "":
        pieces = list(text)
        limit = len(pieces) + 1 if count < 0 else min(count, len(pieces) + 1)
        result = []
        for index in range(len(pieces) + 1):
            if index < limit:
                result.append(new)
            if index < len(pieces):
                result.append(pieces[index])
        return "".join(result)
    return text.replace(old, new, count if count > 0 else -1)


@register("replace_all", (STRING,), (STRING,), (STRING,), returns=(STRING,),
          note="replace all instances of one string with another in an overall parent string")
def _replace_all(arguments: list[Any]) -> Any:
    text = string_argument("replace_all", arguments, 0)
    old = string_argument("replace_all", arguments, 1)
    new = string_argument("replace_all", arguments, 2)
    return _go_replace(text, old, new, -1)


@register("to_upper", (STRING,), returns=(STRING,),
          note="takes in a string and outputs the same string with all upper-case letters")
def _to_upper(arguments: list[Any]) -> Any:
    return string_argument("to_upper", arguments, 0).upper()


@register("to_lower", (STRING,), returns=(STRING,),
          note="takes in a string and outputs the same string with all lower-case letters")
def _to_lower(arguments: list[Any]) -> Any:
    return string_argument("to_lower", arguments, 0).lower()


@register("trim", (STRING,), (STRING,), returns=(STRING,),
          note="trims both ends of the source string by characters appearing in the second string")
def _trim(arguments: list[Any]) -> Any:
    text = string_argument("trim", arguments, 0)
    cutset = string_argument("trim", arguments, 1)
    return text.strip(cutset) if cutset else text


@register("trim_prefix", (STRING,), (STRING,), returns=(STRING,),
          note="trims the second string prefix from the first string if the first string starts with the prefix")
def _trim_prefix(arguments: list[Any]) -> Any:
    text = string_argument("trim_prefix", arguments, 0)
    prefix = string_argument("trim_prefix", arguments, 1)
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


@register("split", (STRING,), (STRING,), returns=(ARRAY_STRING,),
          note="splits the first string when the second string is found and converts it into an array ")
def _split(arguments: list[Any]) -> Any:
    text = string_argument("split", arguments, 0)
    separator = string_argument("split", arguments, 1)
    if separator == "":
        return list(text)  # strings.Split with an empty separator splits into runes
    return text.split(separator)


def _to_text(value: Any) -> str | None:
    """Kyverno's ``ifaceToString``: numbers print with float32 precision, booleans as true/false."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float_f(value, bit_size=32)
    return None


def _compiled(function: str, pattern: str) -> GoRegexp:
    try:
        return compile_go_regex(pattern)
    except GoRegexError as error:
        raise generic_error(function, str(error)) from None


def _regex_replace(function: str, arguments: list[Any], literal: bool) -> str:
    pattern = string_argument(function, arguments, 0)
    source = _to_text(arguments[1])
    if source is None:
        raise argument_type_error(function, 2, "String or Real")
    replacement = _to_text(arguments[2])
    if replacement is None:
        raise argument_type_error(function, 3, "String or Real")
    limit = len(source) + len(replacement) + MAX_RESULT_GROWTH
    try:
        return replace_all(_compiled(function, pattern), source, replacement, literal, max_length=limit)
    except OutputTooLargeError:
        raise ResultTooLargeError(
            f"JMESPath function '{function}': result exceeds the limit of {MAX_RESULT_GROWTH} characters beyond its "
            "arguments"
        ) from None


@register("regex_replace_all", (STRING,), (STRING, NUMBER), (STRING, NUMBER), returns=(STRING,),
          note="converts all parameters to string")
def _regex_replace_all(arguments: list[Any]) -> Any:
    return _regex_replace("regex_replace_all", arguments, literal=False)


@register("regex_replace_all_literal", (STRING,), (STRING, NUMBER), (STRING, NUMBER), returns=(STRING,),
          note="converts all parameters to string")
def _regex_replace_all_literal(arguments: list[Any]) -> Any:
    return _regex_replace("regex_replace_all_literal", arguments, literal=True)


@register("regex_match", (STRING,), (STRING, NUMBER), returns=_BOOLEAN,
          note="first string is the regular exression which is compared with second input which can be a number "
               "or string")
def _regex_match(arguments: list[Any]) -> Any:
    pattern = string_argument("regex_match", arguments, 0)
    source = _to_text(arguments[1])
    if source is None:
        raise argument_type_error("regex_match", 2, "String or Real")
    try:
        compiled = compile_go_regex(pattern)
    except GoRegexError as error:
        raise JMESPathError(str(error)) from None  # regexp.Match's error is returned unwrapped
    return compiled.search(source) is not None


def wildcard_match(pattern: str, text: str) -> bool:
    """Kyverno's ext/wildcard: ``*`` matches any run of characters (even none), ``?`` exactly one."""
    return match_wildcard(pattern, text)


@register("pattern_match", (STRING,), (STRING, NUMBER), returns=_BOOLEAN,
          note="'*' matches zero or more alphanumeric characters, '?' matches a single alphanumeric character")
def _pattern_match(arguments: list[Any]) -> Any:
    pattern = string_argument("pattern_match", arguments, 0)
    source = _to_text(arguments[1])
    if source is None:
        raise argument_type_error("pattern_match", 2, "String or Real")
    return wildcard_match(pattern, source)


@register("label_match", (OBJECT,), (OBJECT,), returns=_BOOLEAN,
          note="object arguments must be enclosed in backticks; ex. `{{request.object.spec.template.metadata.labels}}`")
def _label_match(arguments: list[Any]) -> Any:
    selector, labels = arguments
    if not isinstance(selector, dict):
        raise argument_type_error("label_match", 0, "Object")
    if not isinstance(labels, dict):
        raise argument_type_error("label_match", 1, "Object")
    return all(key in labels and deep_equal(labels[key], value) for key, value in selector.items())


@register("to_boolean", (STRING,), returns=_BOOLEAN,
          note="It returns true or false for any string, such as 'True', 'TruE', 'False', 'FAlse', 'faLSE', etc.")
def _to_boolean(arguments: list[Any]) -> Any:
    text = string_argument("to_boolean", arguments, 0)
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise generic_error("to_boolean", f"lowercase argument must be 'true' or 'false' (provided: '{text}')")


_BASE64_ALPHABET = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


@register("base64_decode", (STRING,), returns=(STRING,), note="decodes a base 64 string")
def _base64_decode(arguments: list[Any]) -> Any:
    text = string_argument("base64_decode", arguments, 0)
    cleaned = text.replace("\r", "").replace("\n", "")  # Go's StdEncoding skips line breaks
    try:
        if len(cleaned) % 4 or any(character not in _BASE64_ALPHABET for character in cleaned.rstrip("=")):
            raise binascii.Error
        decoded = base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        raise JMESPathError(f"illegal base64 data at input byte {_first_bad_base64_byte(text)}") from None
    return decoded.decode("utf-8", errors="replace")


def _first_bad_base64_byte(text: str) -> int:
    """Offset of the first character Go rejects, or the start of the incomplete final quantum."""
    for index, character in enumerate(text):
        if character not in _BASE64_ALPHABET and character not in "=\r\n":
            return index
    stripped = len(text.rstrip("="))
    return stripped - stripped % 4


@register("base64_encode", (STRING,), returns=(STRING,),
          note="encodes a regular, plaintext and unencoded string to base64")
def _base64_encode(arguments: list[Any]) -> Any:
    text = string_argument("base64_encode", arguments, 0)
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def clean_path(path: str) -> str:
    """Go's ``filepath.Clean`` on a POSIX system (``filepath.Join`` of one element, empty stays empty)."""
    return "" if path == "" else gopath.clean(path)


@register("path_canonicalize", (STRING,), returns=(STRING,),
          note="normalizes or canonicalizes a given path by removing excess slashes")
def _path_canonicalize(arguments: list[Any]) -> Any:
    return clean_path(string_argument("path_canonicalize", arguments, 0))


@register("truncate", (STRING,), (NUMBER,), returns=(STRING,),
          note="length argument must be enclosed in backticks; ex. "
               "\"{{request.object.metadata.name | truncate(@, `9`)}}\"")
def _truncate(arguments: list[Any]) -> Any:
    text = string_argument("truncate", arguments, 0)
    length = arguments[1]
    limit = 0 if length < 0 else int(length)
    return text[:limit]


@register("semver_compare", (STRING,), (STRING,), returns=_BOOLEAN,
          note="compares two strings which comply with the semantic versioning schema and outputs a boolean "
               "response as to the position of the second relative to the first")
def _semver_compare(arguments: list[Any]) -> Any:
    from stockade.jmespath.semver import SemverError, parse_range, parse_version_or_zero

    version = parse_version_or_zero(string_argument("semver_compare", arguments, 0))
    try:
        matches = parse_range(string_argument("semver_compare", arguments, 1))
    except SemverError as error:
        raise JMESPathError(str(error)) from None
    return matches(version)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


@register("parse_json", (STRING,), returns=(ANY,),
          note="decodes a valid JSON encoded string to the appropriate type. Opposite of `to_string` function")
def _parse_json(arguments: list[Any]) -> Any:
    text = string_argument("parse_json", arguments, 0)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise JMESPathError(_go_json_message(text, error)) from None
    except ValueError as error:
        raise JMESPathError(str(error)) from None


_GO_JSON_CONTEXT = {
    "Expecting value": "looking for beginning of value",
    "Extra data": "after top-level value",
    "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
    "Expecting ':' delimiter": "after object key",
    "Expecting ',' delimiter": "after object key:value pair",
}


def _go_json_message(text: str, error: json.JSONDecodeError) -> str:
    """Reword Python's decoder errors the way encoding/json words the common ones."""
    if error.pos >= len(text.rstrip()):
        return "unexpected end of JSON input"
    context = _GO_JSON_CONTEXT.get(error.msg)
    if context is None:
        return error.msg
    return f"invalid character {_go_char(text[error.pos])} {context}"


def _go_char(character: str) -> str:
    if character == "'":
        return "'\\''"
    if character == '"':
        return "'\"'"
    return f"'{character}'"


class _GoYamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML as sigs.k8s.io/yaml reads it into JSON: timestamps stay strings."""


_GoYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _json_compatible(value: Any) -> Any:
    """Map keys become strings and non-finite floats are rejected, as YAMLToJSON does."""
    if isinstance(value, dict):
        return {_json_key(key): _json_compatible(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_compatible(item) for item in value]
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        raise JMESPathError(f"json: unsupported value: {go_float_g(value)}")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    return value


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return go_float_g(key)
    return str(key)


@register("parse_yaml", (STRING,), returns=(ANY,),
          note="decodes a valid YAML encoded string to the appropriate type provided it can be represented as JSON")
def _parse_yaml(arguments: list[Any]) -> Any:
    text = string_argument("parse_yaml", arguments, 0)
    try:
        documents = yamlsafe.iter_documents(text, _GoYamlLoader)
        document = next(iter(documents), None)
    except yaml.YAMLError as error:
        raise JMESPathError(f"error converting YAML to JSON: yaml: {error}") from None
    return _json_compatible(document)


@register("lookup", (OBJECT, ARRAY), (STRING, NUMBER), returns=(ANY,),
          note="returns the value corresponding to the given key/index in the given object/array")
def _lookup(arguments: list[Any]) -> Any:
    collection, key = arguments
    if isinstance(collection, dict):
        if not isinstance(key, str):
            raise argument_type_error("lookup", 2, "String")
        return collection.get(key)
    if isinstance(collection, (list, tuple)):
        if not is_number(key):
            raise argument_type_error("lookup", 2, "Number")
        if isinstance(key, float):
            if math.isinf(key) or math.isnan(key) or key != math.trunc(key):
                raise JMESPathError(
                    f"JMESPath function 'lookup': argument #2: expected an integer number but got: "
                    f"{go_float_g(key)}"
                )
            key = int(key)
        if key < 0 or key >= len(collection):
            return None
        return collection[key]
    raise argument_type_error("lookup", 1, "Object or Array")


@register("items", (OBJECT, ARRAY), (STRING,), (STRING,), returns=(ARRAY,),
          note="converts a map or array to an array of objects where each key:value is an item in the array")
def _items(arguments: list[Any]) -> Any:
    collection, key_name, value_name = arguments
    if not isinstance(key_name, str):
        raise argument_type_error("items", 2, "String")
    if not isinstance(value_name, str):
        raise argument_type_error("items", 3, "String")
    if isinstance(collection, dict):
        return [{key_name: key, value_name: collection[key]} for key in sorted(collection)]
    if isinstance(collection, (list, tuple)):
        return [{key_name: index, value_name: value} for index, value in enumerate(collection)]
    raise argument_type_error("items", 1, "Object or Array")


@register("object_from_lists", (ARRAY,), (ARRAY,), returns=(OBJECT,),
          note="converts a pair of lists containing keys and values to an object")
def _object_from_lists(arguments: list[Any]) -> Any:
    keys, values = arguments
    if not isinstance(keys, (list, tuple)):
        raise argument_type_error("object_from_lists", 1, "Array")
    if not isinstance(values, (list, tuple)):
        raise argument_type_error("object_from_lists", 2, "Array")
    result: dict[str, Any] = {}
    for index, raw_key in enumerate(keys):
        key = _to_text(raw_key)
        if key is None:
            raise argument_type_error("object_from_lists", 1, "StringArray")
        result[key] = values[index] if index < len(values) else None
    return result


@register("random", (STRING,), returns=(STRING,), note="Generates a random sequence of characters")
def _random(arguments: list[Any]) -> Any:
    from stockade.jmespath.regen import RegenError, generate

    pattern = arguments[0]
    if pattern == "":
        raise JMESPathError("no pattern provided")
    try:
        return generate(pattern)
    except RegenError as error:
        raise JMESPathError(str(error)) from None


@register("x509_decode", (STRING,), returns=(OBJECT,),
          note="decodes an x.509 certificate to an object. you may also use this in conjunction with "
               "`base64_decode` jmespath function to decode a base64-encoded certificate")
def _x509_decode(arguments: list[Any]) -> Any:
    from stockade.jmespath.x509 import X509Error, decode_pem

    text = string_argument("x509_decode", arguments, 0)
    try:
        return decode_pem(text)
    except X509Error as error:
        raise JMESPathError(str(error)) from None


@register("image_normalize", (STRING,), returns=(STRING,), note="normalizes an image reference")
def _image_normalize(arguments: list[Any]) -> Any:
    from stockade.jmespath.images import ImageReferenceError, normalize_image

    image = string_argument("image_normalize", arguments, 0)
    try:
        return normalize_image(image)
    except ImageReferenceError as error:
        raise generic_error("image_normalize", str(error)) from None


# Hostname resolution is I/O, which the engine must not do; callers that want Kyverno's DNS check install a
# resolver returning the host's addresses. Without one, a name that is not an IP literal counts as external
# unless it is "localhost".
_hostname_resolver: Callable[[str], list[str]] | None = None


def set_hostname_resolver(resolver: Callable[[str], list[str]] | None) -> None:
    global _hostname_resolver
    _hostname_resolver = resolver


_PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(network) for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)


def _is_internal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's ``IP.IsLoopback() || IP.IsPrivate()`` (RFC 1918 and RFC 4193 only, not link-local)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return True
    return any(address in network for network in _PRIVATE_NETWORKS if network.version == address.version)


@register("is_external_url", (STRING,), returns=_BOOLEAN,
          note="determine if a URL points to an external network address")
def _is_external_url(arguments: list[Any]) -> Any:
    text = string_argument("is_external_url", arguments, 0)
    try:
        host = urlsplit(text).hostname or ""
    except ValueError as error:
        raise JMESPathError(f'parse "{text}": {error}') from None
    try:
        return not _is_internal(ipaddress.ip_address(host))
    except ValueError:
        pass
    if host == "":
        raise JMESPathError("lookup : no such host")
    if _hostname_resolver is None:
        return host.lower() != "localhost"
    addresses = _hostname_resolver(host)
    for address_text in addresses:
        if _is_internal(ipaddress.ip_address(address_text)):
            return False
    return True


@register("sha256", (STRING,), returns=(STRING,), note="generate unique resources name if length exceeds the limit")
def _sha256(arguments: list[Any]) -> Any:
    return hashlib.sha256(string_argument("sha256", arguments, 0).encode("utf-8")).hexdigest()


@register("sha1", (STRING,), returns=(STRING,), note="generate a SHA-1 hash")
def _sha1(arguments: list[Any]) -> Any:
    return hashlib.sha1(string_argument("sha1", arguments, 0).encode("utf-8")).hexdigest()  # noqa: S324


@register("md5", (STRING,), returns=(STRING,), note="generates an MD5 hash")
def _md5(arguments: list[Any]) -> Any:
    return hashlib.md5(string_argument("md5", arguments, 0).encode("utf-8")).hexdigest()  # noqa: S324
