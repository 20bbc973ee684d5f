"""Kyverno's CEL type-check warnings for a ClusterPolicy's ``validate.cel`` (the part of its policy validation that
reads the cluster's OpenAPI schemas): each expression is checked against the schema of every kind the policy's
ValidatingAdmissionPolicy would match, and problems come back as warnings, never refusals, in Kubernetes' words::

    spec.rules[0].validate.cel.expressions[1].expression:apps/v1, Kind=Deployment: compilation failed: ERROR: ...

Pure: the caller supplies the kinds and a lookup of their schema types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.cel import DEFAULT_LIBRARIES
from stockade.cel.schematypes import type_check

MAX_TYPES_TO_CHECK = 10  # Kubernetes' TypeChecker stops collecting kinds here
# The variables of a ValidatingAdmissionPolicy expression besides the typed object/oldObject.
UNTYPED_VARIABLES = ("request", "params", "namespaceObject", "authorizer", "variables")


@dataclass(frozen=True)
class Gvk:
    group: str
    version: str
    kind: str

    def __str__(self) -> str:
        """Go's schema.GroupVersionKind.String(): ``apps/v1, Kind=Deployment``, ``/v1, Kind=Pod`` for the core group."""
        return f"{self.group}/{self.version}, Kind={self.kind}"


SchemaLookup = Callable[[Gvk], tuple[Any, str] | None]
"""GVK -> (descriptor pool, message type name) of its schema, or None when the cluster serves none."""


def cel_type_warnings(rule: dict[str, Any], gvks: list[Gvk], lookup: SchemaLookup) -> list[str]:
    expressions = ((rule.get("validate") or {}).get("cel") or {}).get("expressions") or []
    typed: list[tuple[Gvk, Any, str]] = []
    for gvk in sorted(set(gvks), key=lambda g: (g.group, g.version, g.kind))[:MAX_TYPES_TO_CHECK]:
        found = lookup(gvk)
        if found is not None:
            typed.append((gvk, found[0], found[1]))
    warnings: list[str] = []
    for index, entry in enumerate(expressions):
        if not isinstance(entry, dict):
            continue
        for key in ("expression", "messageExpression"):
            text = entry.get(key)
            if not isinstance(text, str) or not text:
                continue
            results = []
            for gvk, pool, type_name in typed:
                issue = type_check(text, pool, {"object": type_name, "oldObject": type_name}, UNTYPED_VARIABLES, DEFAULT_LIBRARIES)
                if issue:
                    results.append(f"{gvk}: compilation failed: {issue}\n")
            if results:
                message = "\n".join(results).replace("\n", ";")
                warnings.append(f"spec.rules[0].validate.cel.expressions[{index}].{key}:{message}")
    return warnings
