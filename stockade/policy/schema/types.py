"""A compact notation for the structural OpenAPI v3 schemas of the policy kinds.

The functions return schema nodes exactly as a CustomResourceDefinition stores them (``type``, ``properties``,
``items``, ``enum``, ``x-kubernetes-preserve-unknown-fields`` ...), so one definition serves two readers: the CRDs
Stockade ships (``hack/gen-crds.py`` renders them into ``deploy/crds``) and the offline policy check
(``stockade.policy.schema.validate``), which holds a policy to the same schema the API server enforces.

Definitions are plain values: a shape used in several places (a label selector, a resource filter) is a module-level
constant reused by reference; nodes are never mutated after construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Node = dict[str, Any]
Scope = Literal["Namespaced", "Cluster"]


def string(
    *,
    enum: Sequence[str] = (),
    fmt: str | None = None,
    pattern: str | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    default: str | None = None,
) -> Node:
    node: Node = {"type": "string"}
    if enum:
        node["enum"] = list(enum)
    if fmt:
        node["format"] = fmt
    if pattern is not None:
        node["pattern"] = pattern
    if min_length is not None:
        node["minLength"] = min_length
    if max_length is not None:
        node["maxLength"] = max_length
    if default is not None:
        node["default"] = default
    return node


def integer(*, fmt: str | None = "int32", minimum: int | None = None, maximum: int | None = None, default: int | None = None) -> Node:
    node: Node = {"type": "integer"}
    if fmt:
        node["format"] = fmt
    if minimum is not None:
        node["minimum"] = minimum
    if maximum is not None:
        node["maximum"] = maximum
    if default is not None:
        node["default"] = default
    return node


def number() -> Node:
    return {"type": "number"}


def boolean(*, default: bool | None = None) -> Node:
    node: Node = {"type": "boolean"}
    if default is not None:
        node["default"] = default
    return node


def int_or_string() -> Node:
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def any_value() -> Node:
    """Any JSON value, kept as written (a pattern, a condition's value, an embedded resource)."""
    return {"x-kubernetes-preserve-unknown-fields": True}


def free_object() -> Node:
    """A mapping whose keys are not checked (an embedded resource, a raw patch)."""
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def array(items: Node, *, min_items: int | None = None, max_items: int | None = None, list_type: str | None = None, list_map_keys: Sequence[str] = ()) -> Node:
    node: Node = {"type": "array", "items": items}
    if min_items is not None:
        node["minItems"] = min_items
    if max_items is not None:
        node["maxItems"] = max_items
    if list_type:
        node["x-kubernetes-list-type"] = list_type
    if list_map_keys:
        node["x-kubernetes-list-map-keys"] = list(list_map_keys)
    return node


def string_list(**options: Any) -> Node:
    return array(string(), **options)


def map_of(values: Node) -> Node:
    return {"type": "object", "additionalProperties": values}


def string_map() -> Node:
    return map_of(string())


def obj(properties: Mapping[str, Node], *, required: Iterable[str] = (), nullable: bool = False, preserve_unknown: bool = False) -> Node:
    """An object with known fields; any other field is unknown (reported, and pruned by the API server)."""
    node: Node = {"type": "object", "properties": dict(properties)}
    names = list(required)
    missing = [name for name in names if name not in properties]
    if missing:
        raise ValueError(f"required field(s) not declared: {', '.join(missing)}")
    if names:
        node["required"] = names
    if nullable:
        node["nullable"] = True
    if preserve_unknown:
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def extend(base: Node, properties: Mapping[str, Node], *, required: Iterable[str] = ()) -> Node:
    """``base``'s fields plus ``properties`` (Go's embedded structs), as a new node."""
    merged = dict(base.get("properties") or {})
    merged.update(properties)
    return obj(merged, required=[*(base.get("required") or []), *required], nullable=bool(base.get("nullable")))


def validated(node: Node, *rules: tuple[str, str]) -> Node:
    """``node`` with CEL ``x-kubernetes-validations`` (rule, message) the API server evaluates."""
    return {**node, "x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def one_of(node: Node, *alternatives: Sequence[str]) -> Node:
    """``node`` that must set exactly one of the field sets in ``alternatives`` (kubebuilder's ``oneOf`` of
    ``required`` lists): ``one_of(obj(...), ["glob"], ["expression"])``."""
    for names in alternatives:
        missing = [name for name in names if name not in (node.get("properties") or {})]
        if missing:
            raise ValueError(f"oneOf field(s) not declared: {', '.join(missing)}")
    return {**node, "oneOf": [{"required": list(names)} for names in alternatives]}


def atomic(node: Node) -> Node:
    """``node`` replaced as a whole by server-side apply (``x-kubernetes-map-type: atomic``, Go's
    ``+structType=atomic``)."""
    return {**node, "x-kubernetes-map-type": "atomic"}


def defaulted(node: Node, value: Any) -> Node:
    """``node`` with a ``default`` the API server fills in when the field is absent (an object's ``{}``)."""
    return {**node, "default": value}


def not_together(node: Node, *names: str) -> Node:
    """``node`` where the fields ``names`` may not all be present at once: ``not: {required: [...]}``."""
    return {**node, "not": {"required": list(names)}}


@dataclass(frozen=True)
class KindSchema:
    """One policy kind: its CRD identity and, per served version, the schema of ``spec`` (and ``status``)."""

    group: str
    kind: str
    plural: str
    scope: Scope
    # served versions in the order the CRD lists them; the first is the storage version unless ``storage`` says
    versions: Mapping[str, Node]
    storage: str = ""
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status: Node | None = None
    # printer columns and subresources are rendered into the CRD only
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    spec_required: bool = False
    # versions the CRD keeps but no longer serves (rendered with served: false; the check refuses them)
    unserved: tuple[str, ...] = field(default=())
    # older versions the offline check reads with the storage version's schema although the shipped CRD does not serve
    # them (Flux still serves v1beta2 of its image kinds; manifests written for it must keep working offline)
    also_read: tuple[str, ...] = ()
    # whether status is a subresource (written apart from spec); Kyverno's exceptions have none
    status_subresource: bool = True

    @property
    def storage_version(self) -> str:
        return self.storage or next(iter(self.versions))

    def spec(self, version: str) -> Node | None:
        return self.versions.get(version)

