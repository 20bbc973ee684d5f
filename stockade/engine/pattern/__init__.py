"""Kyverno's validation pattern language: anchors, value operators, wildcards and ``$(…)`` references.

Pure functions over decoded JSON (dicts, lists, str, int, float, bool, None); nothing here does I/O.
"""

from stockade.engine.pattern.metadata import expand_metadata_wildcards
from stockade.engine.pattern.references import PatternReferenceError, resolve_references
from stockade.engine.pattern.validate import PatternFailure, validate_pattern
from stockade.engine.pattern.value import match_value

__all__ = [
    "PatternFailure",
    "PatternReferenceError",
    "expand_metadata_wildcards",
    "match_value",
    "resolve_references",
    "validate_pattern",
]
