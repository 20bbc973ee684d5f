"""Hold a policy document to its kind's structural schema, as the API server does, with kubectl-style field paths.

The schema is the one Stockade ships in its CRDs (``stockade.policy.schema.crd``); each node is translated once into
JSON Schema and checked by the ``jsonschema`` library.  Two outcomes are kept apart because the API server treats
them apart: an *unknown field* is pruned (kubectl warns ``unknown field "spec.rules[0].validate.patern"``), while a
value of the wrong type, outside an enum or missing where required is refused.  A typo'd field is the classic way a
policy silently stops checking anything, so unknown fields carry a "did you mean" when a known field is one edit away.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from stockade.errors import StockadeError
from stockade.policy.schema.crd import object_schema
from stockade.policy.schema.registry import SchemaRegistry, default_registry
from stockade.policy.schema.types import KindSchema, Node

# OpenAPI keys that translate one to one; everything else (formats, defaults, descriptions, list types...) is not
# a constraint the check enforces.
_COPIED_KEYS = ("enum", "minLength", "maxLength", "pattern", "minimum", "maximum", "minItems", "maxItems", "required")
_TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean", "null": "null"}


@dataclass(frozen=True)
class SchemaProblem:
    """One place a document departs from its schema.  ``unknown`` problems are fields the API server would prune."""

    path: str
    message: str
    unknown: bool = False
    suggestion: str = ""

    def __str__(self) -> str:
        if self.unknown:
            hint = f' (did you mean "{self.suggestion}"?)' if self.suggestion else ""
            return f'unknown field "{self.path}"{hint}'
        return f"{self.path}: {self.message}" if self.path else self.message


class UnknownKind(StockadeError):
    """The document names a kind (or version) of a policy group that does not exist; ``suggestion`` may help."""

    def __init__(self, message: str, suggestion: str = "") -> None:
        super().__init__(message + (f' (did you mean "{suggestion}"?)' if suggestion else ""))
        self.suggestion = suggestion


def one_edit_away(word: str, candidates: Iterable[str]) -> str:
    """The candidate one insertion, deletion, substitution, adjacent swap or case change from ``word``, if any."""
    for candidate in sorted(candidates):
        if candidate != word and (_within_one_edit(word, candidate) or word.lower() == candidate.lower()):
            return candidate
    return ""


def _within_one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        differing = [i for i in range(len(a)) if a[i] != b[i]]
        if len(differing) == 1:
            return True
        return len(differing) == 2 and differing[1] == differing[0] + 1 and a[differing[0]] == b[differing[1]] and a[differing[1]] == b[differing[0]]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    for index in range(len(long)):
        if long[:index] + long[index + 1:] == short:
            return True
    return False


def resolve_kind(api_version: str, kind: str, registry: SchemaRegistry | None = None) -> tuple[KindSchema, str] | None:
    """The schema and version of a document of a group Stockade has schemas for; ``None`` for other groups (plain
    resources).  Raises ``UnknownKind`` for a misspelt kind or an unserved version of a known group."""
    registry = registry or default_registry()
    group, _, version = api_version.rpartition("/")
    known = registry.group(group)
    if not known:
        return None
    schema = registry.lookup(group, kind)
    if schema is None:
        suggestion = one_edit_away(kind, [k.kind for k in known]) or _closest_by_case(kind, [k.kind for k in known])
        raise UnknownKind(f'no kind "{kind}" in {group}; its kinds are {", ".join(sorted(k.kind for k in known))}', suggestion)
    if version in schema.also_read:
        return schema, schema.storage_version
    if version not in schema.versions:
        served = ", ".join(f"{group}/{v}" for v in schema.versions)
        raise UnknownKind(f"{kind} is not served as {api_version}; use one of {served}", "")
    return schema, version


def _closest_by_case(word: str, candidates: Sequence[str]) -> str:
    for candidate in candidates:
        if candidate.lower() == word.lower():
            return candidate
    return ""


def check_document(document: dict[str, Any], registry: SchemaRegistry | None = None) -> list[SchemaProblem]:
    """Every schema problem of one document of a known policy kind, by field path; [] for other kinds.

    Raises ``UnknownKind`` when the kind or version does not exist in a known policy group.
    """
    resolved = resolve_kind(str(document.get("apiVersion") or ""), str(document.get("kind") or ""), registry)
    if resolved is None:
        return []
    validator = _validator(*resolved)
    problems: list[SchemaProblem] = []
    seen: set[tuple[str, str]] = set()
    for error in sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path]):
        for problem in _problems(error):
            key = (problem.path, str(problem))
            if key not in seen:
                seen.add(key)
                problems.append(problem)
    return sorted(problems, key=lambda problem: problem.path)


def prune_unknown(document: dict[str, Any], registry: SchemaRegistry | None = None) -> dict[str, Any]:
    """A copy of ``document`` without the fields its schema does not know, as the API server stores it."""
    resolved = resolve_kind(str(document.get("apiVersion") or ""), str(document.get("kind") or ""), registry)
    if resolved is None:
        return document
    schema, version = resolved
    pruned: dict[str, Any] = _prune(document, object_schema(schema, version))
    return pruned


def _prune(value: Any, node: Node) -> Any:
    if isinstance(value, dict) and node.get("type") == "object":
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if node.get("x-kubernetes-preserve-unknown-fields") and not properties:
            return value
        result: dict[str, Any] = {}
        for key, item in value.items():
            if properties and key in properties:
                result[key] = _prune(item, properties[key])
            elif isinstance(extra, dict):
                result[key] = _prune(item, extra)
            elif node.get("x-kubernetes-preserve-unknown-fields") or (not properties and extra is None):
                result[key] = item
        return result
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_prune(item, node["items"]) for item in value]
    return value


# ------------------------------------------------------------------------------------------------------------------
# translation to JSON Schema


# (id of the KindSchema, version) -> (the KindSchema, kept alive so the id stays its own; its validator)
_validators: dict[tuple[int, str], tuple[KindSchema, Draft202012Validator]] = {}


def _validator(schema: KindSchema, version: str) -> Draft202012Validator:
    """Built once per kind and version: the translation walks the whole schema."""
    cached = _validators.get((id(schema), version))
    if cached is None:
        cached = (schema, Draft202012Validator(_translate(object_schema(schema, version))))
        _validators[(id(schema), version)] = cached
    return cached[1]


def _translate(node: Node) -> dict[str, Any]:
    """One OpenAPI node as JSON Schema.  Null is allowed everywhere: the API server drops nulls of non-nullable
    fields rather than refusing them, and YAML's empty values (``exclude:``) are null."""
    out: dict[str, Any] = {key: node[key] for key in _COPIED_KEYS if key in node}
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string", "null"]
        return out
    if "anyOf" in node:
        out["anyOf"] = [_translate(option) for option in node["anyOf"]] + [{"type": "null"}]
    kind = node.get("type")
    if kind:
        out["type"] = [kind, "null"]
    if kind == "object" or "properties" in node:
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {name: _translate(child) for name, child in properties.items()}
        if isinstance(extra, dict):
            out["additionalProperties"] = _translate(extra)
        elif properties and not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if kind == "array" and isinstance(node.get("items"), dict):
        out["items"] = _translate(node["items"])
    # field-presence rules (kubebuilder's oneOf of required lists, "not both"): they speak of mappings only, so a
    # null (absent) value is not held to them
    presence = {key: node[key] for key in ("oneOf", "not") if key in node}
    if presence:
        out["if"] = {"type": "object"}
        out["then"] = presence
    return out


# ------------------------------------------------------------------------------------------------------------------
# errors in kubectl's words


def field_path(parts: Iterable[str | int]) -> str:
    """``["spec", "rules", 0, "name"]`` -> ``spec.rules[0].name``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _problems(error: ValidationError) -> Iterator[SchemaProblem]:
    path = list(error.absolute_path)
    where = field_path(path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    instance = error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = schema.get("properties") or {}
        for key in instance:
            if key not in known:
                yield SchemaProblem(field_path([*path, str(key)]), "unknown field", unknown=True, suggestion=one_edit_away(str(key), known))
        return
    if error.validator == "type":
        expected = [t for t in (schema.get("type") or []) if t != "null"]
        wanted = " or ".join(_TYPE_NAMES.get(t, t) for t in expected)
        yield SchemaProblem(where, f"Invalid value: must be {wanted}, found {_type_name(instance)} {_show(instance)}")
        return
    if error.validator == "enum":
        allowed = [v for v in schema.get("enum") or [] if v is not None]
        suggestion = one_edit_away(str(instance), [str(v) for v in allowed]) if isinstance(instance, str) else ""
        hint = f' (did you mean "{suggestion}"?)' if suggestion else ""
        supported = ", ".join(_show(v) for v in allowed)
        yield SchemaProblem(where, f"Unsupported value: {_show(instance)}: supported values: {supported}{hint}", suggestion=suggestion)
        return
    if error.validator == "required":
        missing = [name for name in schema.get("required") or [] if not isinstance(instance, dict) or name not in instance]
        for name in missing:
            yield SchemaProblem(field_path([*path, name]), "Required value")
        return
    if error.validator in ("minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum", "pattern"):
        limit = schema.get(str(error.validator))
        words = {
            "minLength": f"must be at least {limit} characters long",
            "maxLength": f"may not be longer than {limit} characters",
            "minItems": f"must have at least {limit} items",
            "maxItems": f"must have at most {limit} items",
            "minimum": f"must be greater than or equal to {limit}",
            "maximum": f"must be less than or equal to {limit}",
            "pattern": f"must match the pattern {limit!r}",
        }
        yield SchemaProblem(where, f"Invalid value: {_show(instance)}: {words[str(error.validator)]}")
        return
    if error.validator == "oneOf":
        choices = [" and ".join(option.get("required") or []) for option in schema.get("oneOf") or []]
        present = [choice for choice, option in zip(choices, schema.get("oneOf") or []) if isinstance(instance, dict) and all(k in instance for k in option.get("required") or [])]
        how = f"found {', '.join(present)}" if present else "found none"
        yield SchemaProblem(where, f"Invalid value: exactly one of {', '.join(choices)} must be set, {how}")
        return
    if error.validator == "not":
        together = (schema.get("not") or {}).get("required") or []
        yield SchemaProblem(where, f"Invalid value: {' and '.join(together)} may not be set together")
        return
    if error.validator == "anyOf":
        yield SchemaProblem(where, f"Invalid value: {_show(instance)}: not one of the allowed forms")
        return
    yield SchemaProblem(where, f"Invalid value: {error.message}")
