"""Tag and status storage that survives restarts: one JSON file per object, written atomically.

Keyed per ImageRepository object (namespace/name), not per canonical image, so two repositories with
different credentials never share tag lists (Flux's `FluxStorage` layout makes the same choice). Writes
go to a temporary file in the same directory followed by `os.replace`, so a crash leaves either the old
or the new file, never a torn one. A missing or unreadable file reads as "nothing stored": the store is a
cache that a scan rebuilds, which is why the repository reconciler rescans when its tags are gone.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from stockade.reflector.models import ObjectKey
from stockade.errors import StockadeError

__all__ = ["TagStore", "StoreError"]

_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class StoreError(StockadeError, OSError):
    """The store directory cannot be written."""


def _component(value: str, what: str) -> str:
    # Kubernetes names are DNS labels/subdomains; anything else could escape the store directory.
    if not _SAFE_COMPONENT.fullmatch(value) or value in (".", ".."):
        raise StoreError(f"invalid {what} {value!r} for the image store")
    return value


def _write_json_atomically(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(payload, stream, indent=1, sort_keys=True)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None


class TagStore:
    """Directory-backed store: `imagerepository/<ns>/<name>/tags.json` and `status/<kind>/<ns>/<name>.json`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- tags ---------------------------------------------------------------------------------------------------
    def _tags_path(self, key: ObjectKey) -> Path:
        return (
            self.root
            / "imagerepository"
            / _component(key.namespace, "namespace")
            / _component(key.name, "name")
            / "tags.json"
        )

    def tags(self, key: ObjectKey) -> list[str] | None:
        """The tags of the last successful scan, or None when nothing (valid) is stored."""
        data = _read_json(self._tags_path(key))
        if not isinstance(data, dict) or not isinstance(data.get("tags"), list):
            return None
        return list(map(str, data["tags"]))

    def set_tags(self, key: ObjectKey, canonical_image: str, tags: list[str]) -> None:
        _write_json_atomically(self._tags_path(key), {"image": canonical_image, "tags": list(tags)})

    def delete_tags(self, key: ObjectKey) -> None:
        path = self._tags_path(key)
        if path.exists():
            path.unlink()

    # -- statuses -----------------------------------------------------------------------------------------------
    def _status_path(self, kind: str, key: ObjectKey) -> Path:
        return (
            self.root
            / "status"
            / _component(kind.lower(), "kind")
            / _component(key.namespace, "namespace")
            / f"{_component(key.name, 'name')}.json"
        )

    def status(self, kind: str, key: ObjectKey) -> dict[str, Any] | None:
        data = _read_json(self._status_path(kind, key))
        return data if isinstance(data, dict) else None

    def save_status(self, kind: str, key: ObjectKey, status: dict[str, Any]) -> None:
        _write_json_atomically(self._status_path(kind, key), status)

    def statuses(self, kind: str) -> dict[ObjectKey, dict[str, Any]]:
        """Every stored status of `kind` (e.g. all ImagePolicies, for `images update`)."""
        base = self.root / "status" / _component(kind.lower(), "kind")
        found: dict[ObjectKey, dict[str, Any]] = {}
        if not base.is_dir():
            return found
        for namespace_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            for file in sorted(namespace_dir.glob("*.json")):
                data = _read_json(file)
                if isinstance(data, dict):
                    found[ObjectKey(namespace_dir.name, file.stem)] = data
        return found
