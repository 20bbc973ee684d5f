"""GeneratingPolicy ``template`` generation: YAML documents with optional ``(( expression ))`` placeholders."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from stockade import yamlsafe
from stockade.cel import to_json
from stockade.celpolicy.scope import Scope

_PLACEHOLDER = re.compile(r"\(\((.+?)\)\)", re.DOTALL)


def _render(node: Any, scope: Scope, field_path: str) -> Any:
    if isinstance(node, dict):
        return {_render(k, scope, field_path): _render(v, scope, field_path) for k, v in node.items()}
    if isinstance(node, list):
        return [_render(item, scope, field_path) for item in node]
    if isinstance(node, str) and "((" in node:
        whole = _PLACEHOLDER.fullmatch(node.strip())
        if whole:
            return to_json(scope.evaluate(field_path, whole.group(1).strip()))

        def text(match: re.Match[str]) -> str:
            value = to_json(scope.evaluate(field_path, match.group(1).strip()))
            return value if isinstance(value, str) else json.dumps(value)

        return _PLACEHOLDER.sub(text, node)
    return node


def render_template(scope: Scope, field_path: str, template: dict[str, Any]) -> list[dict[str, Any]]:
    """Parse ``template.value`` (multi-document YAML) and, with ``interpolate: cel``, evaluate placeholders."""
    try:
        documents = [d for d in yamlsafe.load_all(str(template.get("value") or ""), yaml.SafeLoader) if d is not None]
    except yaml.YAMLError as error:
        raise ValueError(f"{field_path}.value: invalid YAML: {error}") from error
    for document in documents:
        if not isinstance(document, dict):
            raise ValueError(f"{field_path}.value: every document must be a mapping")
    if str(template.get("interpolate") or "none").lower() == "cel":
        documents = [_render(d, scope, field_path + ".value") for d in documents]
    return documents
