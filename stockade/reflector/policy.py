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

from stockade.goregex import GoRegexError, GoRegexp, compile_go_regex, compile_template, expand_template
from stockade.reflector.semver import Constraint, SemverError, select_highest
from stockade.errors import StockadeError

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


class PolicyError(StockadeError, ValueError):
    """The tags cannot be ordered by the policy (e.g. a non-numeric tag for `numerical`)."""


class InvalidPolicyError(PolicyError):
    """The ImagePolicy spec itself is unusable; Flux stalls with reason InvalidPolicy."""


def compile_tag_filter(pattern: str) -> GoRegexp:
    """Compile a `filterTags.pattern` with Go RE2 semantics (unanchored search)."""
    try:
        return compile_go_regex(pattern)
    except GoRegexError as exc:
        raise InvalidPolicyError(f"invalid regular expression pattern '{pattern}': {exc}") from None


def apply_tag_filter(tags: Iterable[str], pattern: str, extract: str = "") -> dict[str, str]:
    """Map each extracted value to its original tag; a later tag wins a duplicate value."""
    regexp = compile_tag_filter(pattern)
    tags = tags if isinstance(tags, list) else list(tags)
    filtered: dict[str, str] = {}
    if not extract:
        return {tag: tag for tag, _ in regexp.search_each(tags)}
    expand = compile_template(extract, regexp)
    for tag, match in regexp.search_each(tags):
        filtered[expand(match)] = tag
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

    return lambda tags: select_highest(tags, constraint)


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
