"""Wildcard label and annotation keys in validation patterns (Kyverno's ``wildcards.ExpandInMetadata``).

A pattern such as ``metadata: {labels: {"app.kubernetes.io/*": "?*"}}`` names a key pattern, not a key; before
matching, each such key is replaced by the first resource label key it matches so the value check applies to
that label.  Like Kyverno, the rebuilt map keeps only string-valued entries.
"""

from __future__ import annotations

from typing import Any

from stockade.engine.pattern.anchors import parse_anchor
from stockade.engine.wildcard import contains_wildcard
from stockade.engine.wildcard import match as wildcard_match

__all__ = ["expand_metadata_wildcards"]


def tagged_entry(tag: str, data: dict[str, Any]) -> tuple[str, Any]:
    """The entry stored under ``tag`` itself or under an anchor around it, e.g. ``=(labels)``."""
    if tag in data:
        return tag, data[tag]
    for key, value in data.items():
        anchor = parse_anchor(key)
        if anchor is not None and anchor.key == tag:
            return key, value
    return "", None


def _string_entries(tag: str, data: Any) -> tuple[str, dict[str, str] | None]:
    if not isinstance(data, dict):
        return "", None
    key, value = tagged_entry(tag, data)
    if not isinstance(value, dict):
        return "", None
    return key, {name: text for name, text in value.items() if isinstance(text, str)}


def _expand_key(key_pattern: str, resource_entries: dict[str, str]) -> str:
    for resource_key in resource_entries:
        if wildcard_match(key_pattern, resource_key):
            return resource_key
    return key_pattern


def _expanded_tag(tag: str, pattern_metadata: dict[str, Any], resource_metadata: Any) -> tuple[str, dict[str, Any] | None]:
    pattern_key, pattern_entries = _string_entries(tag, pattern_metadata)
    if pattern_entries is None:
        return "", None
    _, resource_entries = _string_entries(tag, resource_metadata)
    if resource_entries is None:
        return "", None
    original = pattern_metadata[pattern_key]
    if len(pattern_entries) == len(original) and not any(contains_wildcard(key) for key in pattern_entries):
        return "", None  # the rebuilt map would equal the original: no copy needed
    expanded: dict[str, Any] = {}
    for key, value in pattern_entries.items():
        if contains_wildcard(key):
            anchor = parse_anchor(key)
            if anchor is not None:
                expanded[f"{anchor.modifier}({_expand_key(anchor.key, resource_entries)})"] = value
            else:
                expanded[_expand_key(key, resource_entries)] = value
        else:
            expanded[key] = value
    return pattern_key, expanded


def expand_metadata_wildcards(pattern: Any, resource: Any) -> Any:
    """Return ``pattern`` with wildcard keys under ``metadata.labels``/``annotations`` resolved against ``resource``.

    The input is never modified; a shallow copy is made only when something changes.
    """
    if not isinstance(pattern, dict) or not isinstance(resource, dict):
        return pattern
    metadata_key, pattern_metadata = tagged_entry("metadata", pattern)
    if pattern_metadata is None or not isinstance(pattern_metadata, dict):
        return pattern
    resource_metadata = resource.get("metadata")
    if resource_metadata is None:
        return pattern
    replacements: dict[str, Any] = {}
    for tag in ("labels", "annotations"):
        key, expanded = _expanded_tag(tag, pattern_metadata, resource_metadata)
        if expanded is not None:
            replacements[key] = expanded
    if not replacements:
        return pattern
    new_metadata = dict(pattern_metadata)
    new_metadata.update(replacements)
    new_pattern = dict(pattern)
    new_pattern[metadata_key] = new_metadata
    return new_pattern
