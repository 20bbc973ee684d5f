"""Typed seams into the kubernetes client, so the controllers stay checkable by ``mypy --strict``: its API methods
name model classes for request bodies although they serialize the plain dicts the controllers build just as well."""

from __future__ import annotations

from typing import Any


def request_body(body: dict[str, Any]) -> Any:
    """A plain-dict body for an API method whose signature names a model class (the client accepts both)."""
    return body
