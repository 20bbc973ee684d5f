"""Type-checking CEL expressions against the OpenAPI schemas of the resources they read, as Kubernetes does for
ValidatingAdmissionPolicies and Kyverno does when a ClusterPolicy's ``validate.cel`` is stored.

cel-cpp checks field access only on message types, so each OpenAPI object schema becomes a protobuf message
(built at run time in a private descriptor pool): properties become fields, ``additionalProperties`` a map,
arrays repeated fields, ``int-or-string`` and schema-less values ``google.protobuf.Value`` (CEL's dyn), strings with
format date-time/duration timestamps/durations, as Kubernetes' schema-to-CEL mapping does.  The messages only serve
the check: evaluation keeps its dynamic values.

A schema can hold a million fields if a hostile CRD says so; conversion stops at ``MAX_MESSAGES`` messages, and
anything past it is dyn (unchecked), never an error.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, struct_pb2, timestamp_pb2

from stockade.cel.environment import native_env_with_types, native_module, prepare_source

PACKAGE = "stockade.schema"
MAX_MESSAGES = 4000
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIELD = descriptor_pb2.FieldDescriptorProto
_VALUE = ".google.protobuf.Value"
_STRUCT = ".google.protobuf.Struct"
_TIMESTAMP = ".google.protobuf.Timestamp"
_DURATION = ".google.protobuf.Duration"
_UNDEFINED_FIELD = re.compile(r"undefined field '([^']*)' not found in struct '[^']*'")
_WELL_KNOWN = (struct_pb2, timestamp_pb2, duration_pb2)
# cel-cpp keeps the descriptors it has seen by file and message name across pools, so every set of schemas gets its
# own file and package.
_GENERATION = itertools.count(1)


def _message_name(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", ref.rsplit("/", 1)[-1])


class SchemaTypes:
    """Message types for the schemas of one OpenAPI v3 document (``components.schemas`` by name)."""

    def __init__(self, components: Mapping[str, Any]) -> None:
        self.components = components
        generation = next(_GENERATION)
        self.package = f"{PACKAGE}.g{generation}"
        self.file = descriptor_pb2.FileDescriptorProto(
            name=f"stockade_schema_types_{generation}.proto",
            package=self.package,
            syntax="proto3",
            dependency=[module.DESCRIPTOR.name for module in _WELL_KNOWN],
        )
        self._by_ref: dict[str, str] = {}
        self._count = 0
        self._pool: Any = None

    @classmethod
    def checking_type(cls, components: Mapping[str, Any], name: str) -> tuple[Any, str] | None:
        """(descriptor pool, CEL type name) for ``components.schemas[name]`` and everything it references: one root
        per pool, since a pool cannot grow once cel-cpp has seen it."""
        types = cls(components)
        type_name = types.type_of_component(name)
        return (types.pool(), type_name) if type_name else None

    def type_of_component(self, name: str) -> str | None:
        """The CEL type name for ``components.schemas[name]``, or None when the document lacks it."""
        schema = self.components.get(name)
        if not isinstance(schema, dict):
            return None
        return self._component(name)[1:]

    def _component(self, name: str) -> str:
        known = self._by_ref.get(name)
        if known is not None:
            return known
        message_name = _message_name(name)
        full = f".{self.package}.{message_name}"
        self._by_ref[name] = full
        message = self.file.message_type.add(name=message_name)
        self._fill(message, self.components.get(name) or {}, full)
        return full

    def _fill(self, message: Any, schema: Mapping[str, Any], full: str) -> None:
        self._count += 1
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return
        number = 0
        for name, child in properties.items():
            if not isinstance(name, str) or not _IDENTIFIER.match(name) or not isinstance(child, dict):
                continue
            number += 1
            field = message.field.add(name=name, number=number, label=_FIELD.LABEL_OPTIONAL)
            self._type_field(field, message, child, f"{full}.{name[:1].upper()}{name[1:]}Type", name)

    def _resolve(self, schema: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any]]:
        ref = schema.get("$ref")
        if not ref:
            all_of = schema.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
                ref = all_of[0].get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref[len("#/components/schemas/"):]
            return name, self.components.get(name) or {}
        return None, schema

    def _scalar(self, schema: Mapping[str, Any]) -> tuple[int, str]:
        """(protobuf field type, type name) of a schema, building a message for an object with properties."""
        kind = schema.get("type")
        if schema.get("x-kubernetes-int-or-string") or not kind:
            if schema.get("properties") is None and schema.get("additionalProperties") is None:
                return _FIELD.TYPE_MESSAGE, _VALUE
            kind = "object"
        if kind == "string":
            form = schema.get("format")
            if form == "byte":
                return _FIELD.TYPE_BYTES, ""
            if form in ("date-time", "date"):
                return _FIELD.TYPE_MESSAGE, _TIMESTAMP
            if form == "duration":
                return _FIELD.TYPE_MESSAGE, _DURATION
            return _FIELD.TYPE_STRING, ""
        if kind == "integer":
            return _FIELD.TYPE_INT64, ""
        if kind == "number":
            return _FIELD.TYPE_DOUBLE, ""
        if kind == "boolean":
            return _FIELD.TYPE_BOOL, ""
        return _FIELD.TYPE_MESSAGE, _VALUE

    def _set_scalar(self, field: Any, schema: Mapping[str, Any]) -> None:
        field.type, type_name = self._scalar(schema)
        if type_name:
            field.type_name = type_name

    def _type_field(self, field: Any, parent: Any, schema: Mapping[str, Any], nested_name: str, name: str) -> None:
        ref, resolved = self._resolve(schema)
        if self._count >= MAX_MESSAGES:
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, _VALUE
            return
        if ref is not None and resolved.get("type", "object") == "object" and isinstance(resolved.get("properties"), dict):
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, self._component(ref)
            return
        kind = resolved.get("type")
        if kind == "array":
            items = resolved.get("items")
            field.label = _FIELD.LABEL_REPEATED
            if not isinstance(items, dict) or self._resolve(items)[1].get("type") == "array":
                field.type, field.type_name = _FIELD.TYPE_MESSAGE, _VALUE
                return
            self._element(field, parent, items, nested_name)
            return
        if kind == "object" or (kind is None and (resolved.get("properties") or resolved.get("additionalProperties"))):
            extra = resolved.get("additionalProperties")
            if isinstance(resolved.get("properties"), dict):
                nested = parent.nested_type.add(name=nested_name.rsplit(".", 1)[-1])
                self._fill(nested, resolved, nested_name)
                field.type, field.type_name = _FIELD.TYPE_MESSAGE, nested_name
                return
            if isinstance(extra, dict):
                entry_name = "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "Entry"  # protobuf's rule
                entry = parent.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_STRING)
                value = entry.field.add(name="value", number=2, label=_FIELD.LABEL_OPTIONAL)
                if self._resolve(extra)[1].get("type") == "array":
                    value.type, value.type_name = _FIELD.TYPE_MESSAGE, _VALUE
                else:
                    self._element(value, entry, extra, f"{nested_name}Value")
                field.label = _FIELD.LABEL_REPEATED
                field.type, field.type_name = _FIELD.TYPE_MESSAGE, f"{nested_name.rsplit('.', 1)[0]}.{entry_name}"
                return
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, _STRUCT
            return
        self._set_scalar(field, resolved)

    def _element(self, field: Any, parent: Any, schema: Mapping[str, Any], nested_name: str) -> None:
        """The type of a list element or map value (never itself repeated)."""
        ref, resolved = self._resolve(schema)
        if ref is not None and isinstance(resolved.get("properties"), dict):
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, self._component(ref)
        elif isinstance(resolved.get("properties"), dict):
            nested = parent.nested_type.add(name=nested_name.rsplit(".", 1)[-1])
            self._fill(nested, resolved, nested_name)
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, nested_name
        elif resolved.get("type") == "object":
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, _STRUCT
        else:
            self._set_scalar(field, resolved)

    def pool(self) -> Any:
        """The descriptor pool of every message built so far; build no more types after asking for it."""
        if self._pool is None:
            pool = descriptor_pool.DescriptorPool()
            for module in _WELL_KNOWN:
                pool.Add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
            pool.Add(self.file)
            self._pool = pool
        return self._pool


_CHECK_LOCK = threading.Lock()


def type_check(
    expression: str, pool: Any, typed: Mapping[str, str], untyped: Iterable[str], libraries: tuple[str, ...]
) -> str:
    """cel-go's issue text for ``expression`` ("ERROR: <input>:L:C: message\\n | source\\n | ...^"), or "" when it
    type-checks.  ``typed`` names message types for some variables; ``untyped`` ones are dyn."""
    cel = native_module()
    variables: dict[str, Any] = {name: cel.Type.DYN for name in untyped}
    variables.update({name: cel.Type(type_name) for name, type_name in typed.items()})
    with _CHECK_LOCK:
        env = native_env_with_types(pool, variables, libraries)
        try:
            env.compile(prepare_source(expression, libraries))
        except Exception as error:  # noqa: BLE001 - the backend raises RuntimeError with the checker's text
            return _as_cel_go_issue(str(error))
    return ""


def _as_cel_go_issue(message: str) -> str:
    """cel-cpp's status text in cel-go's words: no status prefix/suffix, "undefined field 'x'" without the struct."""
    text = message.strip()
    for prefix in ("INVALID_ARGUMENT: ",):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = re.sub(r"\s*\[INVALID_ARGUMENT\]$", "", text)
    return _UNDEFINED_FIELD.sub(lambda match: f"undefined field '{match.group(1)}'", text)
