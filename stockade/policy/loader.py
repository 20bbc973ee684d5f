"""Reading Kubernetes-style documents from files and directories.

Every document keeps where it came from (file and index) so an error can name the exact spot a user must fix.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from stockade import safefile, yamlsafe
from stockade.errors import StockadeError

YAML_SUFFIXES = (".yaml", ".yml", ".json")
STDIN_PATH = "-"  # a path argument meaning "read standard input"
STDIN_SOURCE = "<stdin>"  # the source name documents read from standard input carry


class LoadError(StockadeError):
    """A document could not be read; the message names file, document index and field."""

    def __init__(self, source: str, reason: str, index: int | None = None, field: str | None = None) -> None:
        self.source = source
        self.index = index
        self.field = field
        self.reason = reason
        where = source
        if index is not None:
            where += f" (document {index + 1})"
        if field:
            where += f" field {field}"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Document:
    """One YAML document and its origin."""

    data: dict[str, Any]
    source: str
    index: int

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion", ""))

    @property
    def origin(self) -> str:
        return f"{self.source} (document {self.index + 1})"


def parse_yaml_documents(text: str, source: str) -> list[Any]:
    """All documents of a multi-document YAML or JSON text, empty documents dropped."""
    try:
        return [doc for doc in yamlsafe.load_all(text) if doc is not None]
    except yamlsafe.YamlAliasError as exc:
        raise LoadError(source, exc.reason or str(exc), exc.index) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise LoadError(source, f"malformed YAML{position}: {problem}") from None


def source_name(path: str) -> str:
    """How documents read from ``path`` are named in messages: ``<stdin>`` for ``-``, else the path."""
    return STDIN_SOURCE if path == STDIN_PATH else path


def _read_stdin(limit: int) -> bytes:
    """Standard input to its end, within ``limit`` bytes. Read once per run: the CLI lets a single input be ``-``."""
    stream = getattr(sys.stdin, "buffer", None)
    try:
        if stream is not None:
            data = bytes(stream.read(limit + 1))
        else:
            text = sys.stdin.read(limit + 1) if sys.stdin is not None else ""
            data = text.encode("utf-8")
    except OSError as exc:
        raise LoadError(STDIN_SOURCE, exc.strerror or str(exc)) from None
    if len(data) > limit:
        raise LoadError(STDIN_SOURCE, f"over the {limit}-byte limit")
    return data


def read_text(path: str, limit: int = safefile.MAX_FILE_BYTES) -> str:
    """A regular file's UTF-8 text within ``limit`` bytes; devices, FIFOs and directories are refused.

    ``-`` reads standard input instead (a pipe is what it is meant for, so it is not refused).
    """
    try:
        data = _read_stdin(limit) if path == STDIN_PATH else safefile.read_bytes(path, limit)
    except safefile.FileReadError as exc:
        raise LoadError(path, exc.reason or str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(source_name(path), f"not UTF-8 text ({exc.reason})") from None


def expand_paths(paths: Iterable[str]) -> Iterator[str]:
    """Files as given, directories walked recursively for YAML/JSON files in a stable order; ``-`` stays as it is."""
    for path in paths:
        if path != STDIN_PATH and os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(YAML_SUFFIXES):
                        yield os.path.join(root, name)
        else:
            yield path


def load_documents(paths: Iterable[str], *, require_kind: bool = True) -> list[Document]:
    """Load every document from the given files/directories, expanding ``kind: List``."""
    documents: list[Document] = []
    for path in expand_paths(paths):
        documents.extend(load_file(path, require_kind=require_kind))
    return documents


def load_file(path: str, *, require_kind: bool = True) -> list[Document]:
    text = read_text(path)
    return documents_from_text(text, source_name(path), require_kind=require_kind)


def documents_from_text(text: str, source: str, *, require_kind: bool = True) -> list[Document]:
    documents: list[Document] = []
    for index, data in enumerate(parse_yaml_documents(text, source)):
        if not isinstance(data, dict):
            raise LoadError(source, f"expected a mapping, found {type(data).__name__}", index)
        if data.get("kind") == "List" and isinstance(data.get("items"), list):
            for item in data["items"]:
                if isinstance(item, dict):
                    documents.append(Document(item, source, index))
            continue
        if require_kind:
            for field in ("apiVersion", "kind"):
                if not isinstance(data.get(field), str) or not data.get(field):
                    raise LoadError(source, "missing or empty", index, field)
        documents.append(Document(data, source, index))
    return documents


def to_json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
