"""Comparing actual and expected resources as ``kyverno test`` does (tidied, generate labels normalised)."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from stockade.policy.loader import load_documents
from stockade.policy.resources import normalise_resource


def tidy(value: Any) -> Any:
    """Drop nulls, empty maps and empty lists, recursively (what Kyverno's Tidy does before comparing)."""
    if isinstance(value, dict):
        out = {k: t for k, v in value.items() if (t := tidy(v)) is not None}
        return out or None
    if isinstance(value, list):
        items = [t for v in value if (t := tidy(v)) is not None]
        return items or None
    return value


def _fix_generate_labels(resource: dict[str, Any]) -> dict[str, Any]:
    resource = dict(resource)
    metadata = dict(resource.get("metadata") or {})
    labels = {"app.kubernetes.io/managed-by": "kyverno"}
    for key, value in (metadata.get("labels") or {}).items():
        if not str(key).startswith("generate.kyverno.io/"):
            labels[key] = value
    metadata["labels"] = labels
    resource["metadata"] = metadata
    return resource


def _normalise_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normalise_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise_numbers(v) for v in value]
    return value


def compare_resources(actual: dict[str, Any], expected: dict[str, Any]) -> tuple[bool, str]:
    left = _normalise_numbers(tidy(_fix_generate_labels(actual)))
    right = _normalise_numbers(tidy(_fix_generate_labels(expected)))
    if left == right:
        return True, ""
    expected_text = yaml.safe_dump(right, sort_keys=True).splitlines()
    actual_text = yaml.safe_dump(left, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(expected_text, actual_text, "expected", "actual", lineterm=""))
    return False, diff


def find_resource(path: str, actual: dict[str, Any]) -> dict[str, Any] | None:
    """The document of a (multi-document) file with the same apiVersion, kind, namespace and name."""
    metadata = actual.get("metadata") or {}
    for document in load_documents([path], require_kind=False):
        candidate = normalise_resource(document.data)
        candidate_metadata = candidate.get("metadata") or {}
        if (
            candidate.get("apiVersion") == actual.get("apiVersion")
            and candidate.get("kind") == actual.get("kind")
            and candidate_metadata.get("name") == metadata.get("name")
            and (candidate_metadata.get("namespace") or "") == (metadata.get("namespace") or "")
        ):
            return candidate
    return None
