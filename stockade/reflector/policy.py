"""Flux ImagePolicy tag selection: semver / alphabetical / numerical plus filterTags.

Behaviour follows image-reflector-controller's `internal/policy`: the first
policy kind present wins (semver, then alphabetical, then numerical), semver
only considers strict `X.Y.Z` tags, numerical fails on any non-number, and
`filterTags` selects with an unanchored Go regexp whose `extract` template is
expanded like Go's `Regexp.Expand`. The winner is always reported as the
original tag.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

from stockade.reflector.semver import Constraint, SemverError, Version, parse_version

__all__ = [
    "PolicyError",
    "InvalidPolicyError",
    "EMPTY_LIST_MESSAGE",
    "NO_MATCH_MESSAGE",
    "select_latest",
    "compile_tag_filter",
    "apply_tag_filter",
    "expand_template",
    "parse_go_float",
]

EMPTY_LIST_MESSAGE = "version list argument cannot be empty"
NO_MATCH_MESSAGE = "unable to determine latest version from provided list"


class PolicyError(ValueError):
    """The tags cannot be ordered by the policy (e.g. a non-numeric tag for `numerical`)."""


class InvalidPolicyError(PolicyError):
    """The ImagePolicy spec itself is unusable; Flux stalls with reason InvalidPolicy."""


# --- Go regexp compatibility ------------------------------------------------------

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7F",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1F\\x7F",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_GO_ONLY_ESCAPES = {"z": "\\Z", "s": "[\\t\\n\\f\\r ]", "S": "[^\\t\\n\\f\\r ]"}


def _translate_go_regexp(pattern: str) -> str:
    """Rewrite the RE2 syntax Python spells differently; reject what RE2 refuses.

    RE2 has no look-around or back-references, so patterns using them fail in
    Flux; they must fail here too rather than silently select different tags.
    """
    out: list[str] = []
    index = 0
    in_class = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if index + 1 >= len(pattern):
                raise InvalidPolicyError(f"invalid regular expression pattern '{pattern}': trailing backslash")
            nxt = pattern[index + 1]
            if nxt.isdigit() and nxt != "0" and not in_class:
                raise InvalidPolicyError(
                    f"invalid regular expression pattern '{pattern}': back-references are not supported"
                )
            if nxt in ("p", "P"):
                raise InvalidPolicyError(
                    f"invalid regular expression pattern '{pattern}': Unicode classes are not supported"
                )
            if nxt in _GO_ONLY_ESCAPES and not in_class:
                out.append(_GO_ONLY_ESCAPES[nxt])
            elif nxt == "s" and in_class:
                out.append("\\t\\n\\f\\r ")
            else:
                out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            if char == "[" and pattern.startswith("[:", index):
                end = pattern.find(":]", index + 2)
                name = pattern[index + 2 : end] if end != -1 else ""
                negated = name.startswith("^")
                if end != -1 and name.lstrip("^") in _POSIX_CLASSES and not negated:
                    out.append(_POSIX_CLASSES[name])
                    index = end + 2
                    continue
                raise InvalidPolicyError(
                    f"invalid regular expression pattern '{pattern}': unsupported character class"
                )
            if char == "]":
                in_class = False
            out.append(char)
            index += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            index += 1
            # A leading `]` (or `^]`) is a literal member, not the end of the class.
            if pattern.startswith("^", index):
                out.append("^")
                index += 1
            if pattern.startswith("]", index):
                out.append("\\]")
                index += 1
            continue
        if char == "(" and pattern.startswith("(?", index):
            rest = pattern[index + 2 :]
            if rest.startswith(("=", "!", "<=", "<!", "P=", "#", "(")):
                raise InvalidPolicyError(
                    f"invalid regular expression pattern '{pattern}': look-around, back-references, comments "
                    "and conditionals are not supported"
                )
            if rest.startswith("<"):
                out.append("(?P<")
                index += 3
                continue
        out.append(char)
        index += 1
    return "".join(out)


def compile_tag_filter(pattern: str) -> re.Pattern[str]:
    """Compile a `filterTags.pattern` with Go RE2 semantics (unanchored search)."""
    try:
        # RE2's \d, \w and \b are ASCII-only.
        return re.compile(_translate_go_regexp(pattern), re.ASCII)
    except re.error as exc:
        raise InvalidPolicyError(f"invalid regular expression pattern '{pattern}': {exc}") from None


def _name_length(template: str) -> int:
    length = 0
    while length < len(template) and (template[length].isalnum() or template[length] == "_"):
        length += 1
    return length


def _group_number(name: str) -> int:
    """Go only treats a name as a group number when it is all digits without a leading 0."""
    if not name.isascii() or not name.isdigit() or (name[0] == "0" and len(name) > 1):
        return -1
    return int(name) if len(name) <= 8 else -1


def expand_template(template: str, match: re.Match[str]) -> str:
    """Expand `$1`, `$name`, `${name}` and `$$` exactly like Go's Regexp.ExpandString.

    Names are greedy (`$1x` refers to group `1x`), unknown or non-participating
    groups expand to "", and a malformed `$` reference is kept literally.
    """
    out: list[str] = []
    rest = template
    while True:
        dollar = rest.find("$")
        if dollar < 0:
            out.append(rest)
            break
        out.append(rest[:dollar])
        rest = rest[dollar + 1 :]
        if rest.startswith("$"):
            out.append("$")
            rest = rest[1:]
            continue
        braced = rest.startswith("{")
        body = rest[1:] if braced else rest
        length = _name_length(body)
        if length == 0 or (braced and not body[length:].startswith("}")):
            out.append("$")
            continue
        name = body[:length]
        rest = body[length + 1 :] if braced else body[length:]
        number = _group_number(name)
        if number >= 0:
            if number <= (match.re.groups or 0) and match.group(number) is not None:
                out.append(match.group(number))
        elif name in match.re.groupindex and match.group(name) is not None:
            out.append(match.group(name))
    return "".join(out)


def apply_tag_filter(tags: Iterable[str], pattern: str, extract: str = "") -> dict[str, str]:
    """Map each extracted value to its original tag; a later tag wins a duplicate value."""
    regexp = compile_tag_filter(pattern)
    filtered: dict[str, str] = {}
    for tag in tags:
        match = regexp.search(tag)
        if match is None:
            continue
        value = expand_template(extract, match) if extract else tag
        filtered[value] = tag
    return filtered


# --- numbers ---------------------------------------------------------------------

_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)


def _underscores_ok(text: str) -> bool:
    saw = "^"
    index = 0
    if text[:1] in ("+", "-"):
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in "box":
        index, saw, hexadecimal = 2, "0", text[1].lower() == "x"
    for char in text[index:]:
        if char.isascii() and (char.isdigit() or (hexadecimal and char.lower() in "abcdef")):
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        else:
            if saw == "_":
                return False
            saw = "!"
    return saw != "_"


def _has_go_float_syntax(text: str) -> bool:
    """Follow the shape accepted by Go's readFloat (digits, one dot, exponent, `0x…p…`)."""
    index, length = 0, len(text)
    if text[:1] in ("+", "-"):
        index = 1
    hexadecimal = length > index + 2 and text[index] == "0" and text[index + 1] in "xX"
    if hexadecimal:
        index += 2
    digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
    saw_digit = saw_dot = False
    while index < length:
        char = text[index]
        if char == ".":
            if saw_dot:
                break
            saw_dot = True
        elif char in digits:
            saw_digit = True
        elif char != "_":
            break
        index += 1
    if not saw_digit:
        return False
    if index < length and text[index] in ("pP" if hexadecimal else "eE"):
        index += 1
        if index < length and text[index] in "+-":
            index += 1
        if index >= length or text[index] not in "0123456789":
            return False
        while index < length and text[index] in "0123456789_":
            index += 1
    elif hexadecimal:
        return False  # Go requires a binary exponent on hexadecimal floats
    return index == length


def parse_go_float(text: str) -> float:
    """Parse like Go's strconv.ParseFloat(text, 64); raise ValueError when Go errors.

    Python's float() accepts surrounding whitespace and rejects hex floats, and
    neither reports overflow, so tags like ` 1` or `1e400` would rank differently.
    """
    if _SPECIAL_FLOAT.fullmatch(text):
        return float(text)
    if not _has_go_float_syntax(text) or ("_" in text and not _underscores_ok(text)):
        raise ValueError(f"invalid syntax: {text!r}")
    cleaned = text.replace("_", "")
    hexadecimal = cleaned.lstrip("+-")[:2].lower() == "0x"
    try:
        value = float.fromhex(cleaned) if hexadecimal else float(cleaned)
    except OverflowError:
        raise ValueError(f"value out of range: {text!r}") from None
    if math.isinf(value):
        raise ValueError(f"value out of range: {text!r}")
    return value


# --- policies --------------------------------------------------------------------


def _normalise_order(spec: Mapping[str, object] | None) -> str:
    order = str((spec or {}).get("order") or "").upper()
    if order == "":
        return "ASC"
    if order not in ("ASC", "DESC"):
        raise InvalidPolicyError(
            f"invalid policy: invalid order argument provided: '{order}', must be one of: ASC, DESC"
        )
    return order


def _semver_selector(spec: Mapping[str, object] | None) -> Callable[[list[str]], str | None]:
    range_text = (spec or {}).get("range")
    if not isinstance(range_text, str):
        raise InvalidPolicyError("invalid policy: semver policy requires a string 'range'")
    try:
        constraint = Constraint(range_text)
    except SemverError as exc:
        raise InvalidPolicyError(f"invalid policy: {exc}") from None

    def latest(tags: list[str]) -> str | None:
        best: Version | None = None
        for tag in tags:
            try:
                version = parse_version(tag)
            except SemverError:
                continue
            if constraint.check(version) and (best is None or version > best):
                best = version
        return best.original if best is not None else None

    return latest


def _alphabetical_selector(spec: Mapping[str, object] | None) -> Callable[[list[str]], str | None]:
    order = _normalise_order(spec)
    return lambda tags: min(tags) if order == "DESC" else max(tags)


def _numerical_selector(spec: Mapping[str, object] | None) -> Callable[[list[str]], str | None]:
    order = _normalise_order(spec)

    def latest(tags: list[str]) -> str | None:
        chosen = ""
        chosen_value = 0.0
        for position, tag in enumerate(tags):
            try:
                value = parse_go_float(tag)
            except ValueError:
                raise PolicyError(f"failed to parse invalid numeric value '{tag}'") from None
            # Go keeps the later tag on ties and whenever a NaN is involved.
            if position and ((order == "ASC" and value < chosen_value) or (order == "DESC" and value > chosen_value)):
                continue
            chosen, chosen_value = tag, value
        return chosen

    return latest


def _selector_for(policy: Mapping[str, object]) -> Callable[[list[str]], str | None]:
    if not isinstance(policy, Mapping):
        raise InvalidPolicyError("invalid policy: given ImagePolicyChoice object is invalid")
    if policy.get("semver") is not None:
        return _semver_selector(policy["semver"])  # type: ignore[arg-type]
    if policy.get("alphabetical") is not None:
        return _alphabetical_selector(policy["alphabetical"])  # type: ignore[arg-type]
    if policy.get("numerical") is not None:
        return _numerical_selector(policy["numerical"])  # type: ignore[arg-type]
    raise InvalidPolicyError("invalid policy: given ImagePolicyChoice object is invalid")


def select_latest(
    tags: Iterable[str],
    policy: Mapping[str, object],
    filter_tags: Mapping[str, object] | None = None,
) -> str | None:
    """Return the original tag elected by an ImagePolicy `spec.policy`, or None.

    None means "no candidate" (empty list, everything filtered out, or no tag in
    range) — Flux reports EMPTY_LIST_MESSAGE / NO_MATCH_MESSAGE for these.
    Raises InvalidPolicyError for a bad spec (range, order, regexp) even when
    there are no tags, and PolicyError when a numerical policy meets a non-number.
    Among equal semver versions the first tag in `tags` wins.
    """
    selector = _selector_for(policy)
    candidates = list(tags)
    if filter_tags is not None:
        pattern = str(filter_tags.get("pattern") or "")
        extract = str(filter_tags.get("extract") or "")
        try:
            originals = apply_tag_filter(candidates, pattern, extract)
        except InvalidPolicyError as exc:
            raise InvalidPolicyError(f"failed to filter tags: {exc}") from None
        if not originals:
            return None
        winner = selector(list(originals))
        return originals[winner] if winner is not None else None
    if not candidates:
        return None
    return selector(candidates)
