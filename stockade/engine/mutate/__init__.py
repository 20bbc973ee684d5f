"""Kyverno's mutation primitives: patchStrategicMerge, patchesJson6902 and patch diffs.

The rule handlers substitute variables first and then call these functions; the functions
never modify their inputs.  A strategic merge whose anchors do not hold, or which changes
nothing, reports `skipped` with Kyverno's rule message "no patches applied".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._anchors import ConditionFailed, GlobalConditionFailed, preprocess_overlay
from ._common import PatchError, deep_copy, json_equal
from ._diff import diff_operations
from ._json6902 import KUBERNETES_OPTIONS, KYVERNO_OPTIONS, PatchOptions, apply_operations, parse_operations
from ._merge import Schema, element_schema, field_schema, merge_into, schema_from_meta

__all__ = [
    "KUBERNETES_OPTIONS",
    "KYVERNO_OPTIONS",
    "NO_PATCHES_APPLIED",
    "PatchError",
    "PatchOptions",
    "PatchOutcome",
    "Schema",
    "element_schema",
    "field_schema",
    "schema_from_meta",
    "apply_json6902",
    "apply_strategic_merge",
    "diff_json_patch",
]

NO_PATCHES_APPLIED = "no patches applied"


@dataclass
class PatchOutcome:
    resource: dict[str, Any]  # the patched resource (a new object; the input is never modified)
    skipped: bool = False  # anchors made the patch inapplicable, or it changed nothing
    message: str = ""  # Kyverno's rule message when skipped
    reason: str = ""  # the failed condition, e.g. 'global condition failed: ...'


def apply_strategic_merge(resource: dict[str, Any], patch: Any) -> PatchOutcome:
    """Apply a patchStrategicMerge overlay (anchors included) the way Kyverno does.

    When a conditional or global anchor fails, Kyverno merges an empty patch instead, so the
    outcome is normally unchanged and skipped.  Errors raise PatchError; the caller prefixes
    Kyverno's "failed to patch resource: ".
    """
    overlay = deep_copy(patch)
    reason = ""
    try:
        overlay = preprocess_overlay(overlay, resource)
    except (ConditionFailed, GlobalConditionFailed) as failure:
        reason = str(failure)
        overlay = {}
    except PatchError as problem:
        raise PatchError(f"failed to preProcess rule: {problem}") from None
    patched = merge_into(deep_copy(resource), overlay)
    if json_equal(patched, resource):
        return PatchOutcome(resource=patched, skipped=True, message=NO_PATCHES_APPLIED, reason=reason)
    return PatchOutcome(resource=patched, reason=reason)


def apply_json6902(
    resource: dict[str, Any], operations: str | list[dict[str, Any]], options: PatchOptions = KYVERNO_OPTIONS
) -> dict[str, Any]:
    """Apply RFC 6902 operations (a YAML/JSON string or a list) to a copy; ``options`` picks Kyverno's or
    Kubernetes' flavour of evanphx/json-patch."""
    decoded = parse_operations(operations)
    return apply_operations(deep_copy(resource), decoded, options)  # type: ignore[no-any-return]


def diff_json_patch(original: Any, patched: Any) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `original` into `patched`."""
    return diff_operations(original, patched)
