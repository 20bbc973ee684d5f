"""A stand-in for `stockade.kube.client.KubeClient` in unit tests: every call is recorded, and answered from an
in-memory store of objects by REST path (GET, POST, PUT, merge-PATCH and DELETE behave as the API server's do for
one object, with its typed errors) unless the test set an answer for that method and path with ``on``."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stockade.kube.client import JSON, MERGE_PATCH
from stockade.kube.errors import AlreadyExists, KubeError, MethodNotAllowed, NotFound


@dataclass
class Call:
    method: str
    path: str
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    content_type: str = JSON
    accept: str = JSON
    timeout: Any = None


Answer = Any  # a value, a KubeError to raise, or a function of the Call returning one of those


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeKube:
    def __init__(self, objects: Mapping[str, Any] | None = None) -> None:
        self.objects: dict[str, Any] = {path: copy.deepcopy(obj) for path, obj in (objects or {}).items()}
        self.calls: list[Call] = []
        self.answers: dict[tuple[str, str], Answer] = {}

    def on(self, method: str, path: str, answer: Answer) -> None:
        """Answer ``method path`` with ``answer`` from now on instead of the store."""
        self.answers[(method, path)] = answer

    def sent(self, method: str, path_prefix: str = "") -> list[Call]:
        """The calls made with ``method`` (to paths starting with ``path_prefix``), in order."""
        return [call for call in self.calls if call.method == method and call.path.startswith(path_prefix)]

    def request(
        self, method: str, path: str, body: Any = None, *, query: Any = None, content_type: str = JSON, accept: str = JSON, timeout: Any = None
    ) -> Any:
        pairs = query.items() if isinstance(query, Mapping) else (query or ())
        call = Call(method, path, copy.deepcopy(body), dict(pairs), content_type, accept, timeout)
        self.calls.append(call)
        answer = self.answers.get((method, path))
        if answer is not None:
            if callable(answer) and not isinstance(answer, KubeError):
                answer = answer(call)
            if isinstance(answer, KubeError):
                raise answer
            return copy.deepcopy(answer)
        return self._store(call)

    def _store(self, call: Call) -> Any:
        method, path, body = call.method, call.path, call.body
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise AlreadyExists(f"{body['metadata']['name']} already exists", reason="AlreadyExists", method=method, path=path)
            self.objects[target] = copy.deepcopy(body)
            return copy.deepcopy(body)
        if path not in self.objects:
            raise NotFound(f"{path} not found", reason="NotFound", method=method, path=path)
        if method == "GET":
            return copy.deepcopy(self.objects[path])
        if method == "PUT":
            self.objects[path] = copy.deepcopy(body)
            return copy.deepcopy(body)
        if method == "PATCH" and call.content_type == MERGE_PATCH:
            self.objects[path] = merge_patch(self.objects[path], body)
            return copy.deepcopy(self.objects[path])
        if method == "DELETE":
            del self.objects[path]
            return {"kind": "Status", "status": "Success"}
        raise MethodNotAllowed(f"{method} ({call.content_type}) is not supported by FakeKube", method=method, path=path)

