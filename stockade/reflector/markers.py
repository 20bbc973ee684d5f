"""Rewrite Flux `# {"$imagepolicy": "ns:name[:tag|:name|:digest]"}` setters in YAML text.

Flux re-serialises every touched file through kyaml, which reflows block
scalars and re-indents (fluxcd/image-automation-controller#68, #616). Here the
YAML is only parsed to *locate* marked scalars; the new value is spliced into
the original text at the parsed position, so a diff touches exactly the marked
scalars and keeps comments, quoting style, indentation and line endings.

Differences from Flux, on purpose: a `:digest` marker whose policy has no
reflected digest, a malformed marker value, and an unparsable YAML file that
contains a marker are errors instead of silently writing "" or skipping.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import yaml

from stockade import yamlsafe
from stockade.safefile import FileReadError, file_type, read_bytes
from stockade.errors import StockadeError

__all__ = ["Change", "FileUpdate", "MarkerError", "MARKER_TOKEN", "plan_updates", "update_text", "update_path", "write_updates"]

MARKER_TOKEN = '"$imagepolicy"'
_MARKER_KEY = "$imagepolicy"
_FIELDS = ("tag", "name", "digest")

Resolver = Callable[[str, str], "dict[str, object] | None"]

_LINE_BREAK = re.compile("[\r\n\x85\u2028\u2029]")
_LINE_COMMENT = re.compile(r"[ \t]+#(.*)")
_WHOLE_LINE_COMMENT = re.compile(r"[ \t]*#(.*)")
_NODE_PROPERTIES = re.compile(r"(?:[&!][^ \t\r\n]*[ \t\r\n]+)*")
_SEQUENCE_INDENT = re.compile(r"[ \t]*(?:-[ \t]+)*")
_PLAIN_FIRST = re.compile(r"[0-9A-Za-z_./]")
_FLOW_INDICATORS = re.compile(r"[,\[\]{}]")


@dataclass
class Change:
    """One rewritten scalar; `line` is 1-based, `old`/`new` are the scalar values."""

    file: str
    line: int
    old: str
    new: str
    marker: str


class MarkerError(StockadeError, ValueError):
    """A marker that cannot be applied; the message names the file and line."""


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    replacement: str


def _line_end(text: str, index: int) -> int:
    found = _LINE_BREAK.search(text, index)
    return found.start() if found else len(text)


def _line_start(text: str, index: int) -> int:
    start = index
    while start > 0 and not _LINE_BREAK.match(text, start - 1):
        start -= 1
    return start


def _marker_from_comment(comment: str) -> str | None:
    """Decode a comment the way kyaml does: strip leading `#`, JSON map of strings."""
    try:
        decoded = json.loads(comment.lstrip("#"))
    except ValueError:
        return None
    if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
        return None
    value = decoded.get(_MARKER_KEY)
    return value if isinstance(value, str) else None


def _previous_line(text: str, line_start: int) -> tuple[int, str] | None:
    """Return (start index, content) of the line before the one starting at `line_start`."""
    if line_start == 0:
        return None
    end = line_start - 1
    if end > 0 and text[end] == "\n" and text[end - 1] == "\r":
        end -= 1
    start = _line_start(text, end)
    return start, text[start:end]


def _find_marker(text: str, value_start: int, value_end: int) -> tuple[str, int] | None:
    """Find a marker in the scalar's line comment, else in a one-line head comment.

    Head comments count only where yaml.v3 attaches them to the value itself:
    a sequence item or a value on its own line, never `key: value`.
    """
    rest = text[value_end:_line_end(text, value_end)]
    line_comment = _LINE_COMMENT.fullmatch(rest)
    if line_comment:
        marker = _marker_from_comment(line_comment.group(1))
        if marker is not None:
            return marker, value_end
    line_start = _line_start(text, value_start)
    if not _SEQUENCE_INDENT.fullmatch(text[line_start:value_start]):
        return None
    previous = _previous_line(text, line_start)
    if previous is None:
        return None
    head = _WHOLE_LINE_COMMENT.fullmatch(previous[1])
    if head is None:
        return None
    before = _previous_line(text, previous[0])
    if before is not None and _WHOLE_LINE_COMMENT.fullmatch(before[1]):
        return None  # a multi-line head comment never decodes as one JSON object
    marker = _marker_from_comment(head.group(1))
    return (marker, previous[0]) if marker is not None else None


def _scalar_values(node: yaml.Node, in_flow: bool = False) -> Iterator[tuple[yaml.ScalarNode, bool]]:
    """Yield value scalars (never mapping keys) with whether they sit in a flow collection."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, in_flow)]
    while stack:
        current, flow = stack.pop()
        if id(current) in seen:
            continue  # aliases share the anchored node; rewrite it once
        seen.add(id(current))
        if isinstance(current, yaml.ScalarNode):
            yield current, flow
        elif isinstance(current, yaml.MappingNode):
            inner = flow or bool(current.flow_style)
            stack.extend((value, inner) for _key, value in reversed(current.value))
        elif isinstance(current, yaml.SequenceNode):
            inner = flow or bool(current.flow_style)
            stack.extend((item, inner) for item in reversed(current.value))


def _is_plain_safe(value: str, in_flow: bool) -> bool:
    if not value or not _PLAIN_FIRST.match(value) or value != value.strip():
        return False
    if ": " in value or " #" in value or value.endswith(":") or not value.isprintable():
        return False
    if in_flow and _FLOW_INDICATORS.search(value):
        return False
    try:
        loaded = yamlsafe.load(value, yaml.SafeLoader)
    except yaml.YAMLError:
        return False
    return isinstance(loaded, str) and loaded == value


def _render(value: str, style: str | None, in_flow: bool) -> str:
    """Keep the scalar's quoting style; quote plain values YAML would not read back as that string."""
    if style == "'" and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    if style in (None, "") and _is_plain_safe(value, in_flow):
        return value
    return json.dumps(value, ensure_ascii=False)


def _parse_marker(marker: str, where: str) -> tuple[str, str, str]:
    parts = marker.split(":")
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1], "image"
    if len(parts) == 3 and parts[0] and parts[1] and parts[2] in _FIELDS:
        return parts[0], parts[1], parts[2]
    raise MarkerError(
        f"{where}: malformed $imagepolicy marker {marker!r}: expected 'namespace:name[:tag|:name|:digest]'"
    )


def _required(ref: dict[str, object], key: str, marker: str, where: str) -> str:
    value = ref.get(key)
    if not isinstance(value, str) or not value:
        raise MarkerError(f"{where}: policy for marker {marker!r} has no {key} to set")
    return value


def _new_value(field: str, ref: dict[str, object], marker: str, where: str) -> str:
    if field == "tag":
        return _required(ref, "tag", marker, where)
    if field == "name":
        return _required(ref, "image", marker, where)
    digest = ref.get("digest") or ""
    if not isinstance(digest, str):
        raise MarkerError(f"{where}: policy for marker {marker!r} has a non-string digest")
    if field == "digest":
        if not digest:
            raise MarkerError(
                f"{where}: marker {marker!r} asks for a digest but the policy has none reflected "
                "(set spec.digestReflectionPolicy to IfNotPresent or Always)"
            )
        return digest
    image = f"{_required(ref, 'image', marker, where)}:{_required(ref, 'tag', marker, where)}"
    return f"{image}@{digest}" if digest else image


_TAB_BEFORE_COMMENT = re.compile(r"\t(?=[ \t]*#)")


def _parse_documents(text: str, label: str) -> list[yaml.Node]:
    # PyYAML rejects a tab before a comment although YAML allows it; a same-length
    # substitution keeps every offset valid for splicing into the original text.
    parseable = _TAB_BEFORE_COMMENT.sub(" ", text)
    try:
        # The pure-Python loader reports marks as character offsets into `text`.
        return [doc for doc in yamlsafe.compose_all(parseable, yaml.SafeLoader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise MarkerError(f"{label}{line}: cannot parse YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise MarkerError(f"{label}: cannot parse YAML: {exc}") from None


def update_text(text: str, resolve: Resolver, file_label: str = "") -> tuple[str, list[Change]]:
    """Return `text` with every resolvable marked scalar set to its policy's latest ref.

    `resolve(namespace, name)` gives {"image", "tag", "digest"} or None for a
    policy this run does not know (such markers are left alone, as in Flux).
    Values already equal to the target are not changes, so a rerun is a no-op.
    """
    label = file_label or "<text>"
    if MARKER_TOKEN not in text:
        return text, []
    edits: list[_Edit] = []
    changes: list[Change] = []
    for document in _parse_documents(text, label):
        for node, in_flow in _scalar_values(document):
            if node.style in ("|", ">"):
                continue
            start = node.start_mark.index
            properties = _NODE_PROPERTIES.match(text, start)
            if properties is not None:  # the pattern matches the empty string, so this always holds
                start = properties.end()
            end = node.end_mark.index
            found = _find_marker(text, start, end)
            if found is None:
                continue
            marker, marker_index = found
            where = f"{label}:{_line_number(text, marker_index)}"
            namespace, name, field = _parse_marker(marker, where)
            ref = resolve(namespace, name)
            if ref is None:
                continue
            new = _new_value(field, ref, marker, where)
            if new == node.value:
                continue
            replacement = _render(new, node.style, in_flow)
            if start == end and start > 0 and not text[start - 1].isspace():
                replacement = " " + replacement  # `key:` with an empty value
            edits.append(_Edit(start, end, replacement))
            changes.append(Change(label, _line_number(text, start), node.value, new, marker))
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.replacement + text[edit.end :]
    changes.sort(key=lambda change: change.line)
    return text, changes


def _line_number(text: str, index: int) -> int:
    """Count lines like PyYAML does, where CRLF is one break and a lone CR is one too."""
    return len(re.findall("\r\n|[\r\n\x85\u2028\u2029]", text[:index])) + 1


def _candidate_files(root: str) -> Iterator[str]:
    if os.path.isfile(root):
        yield root
        return
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != ".git")
        for filename in sorted(files):
            if filename.endswith((".yaml", ".yml")) or filename == "Kustomization":
                path = os.path.join(directory, filename)
                if not os.path.islink(path):  # never write through a link out of the tree
                    yield path


def _stage(path: str, content: bytes) -> str:
    """Write ``content`` to a temporary file beside ``path`` with ``path``'s permissions; return its name."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".stockade-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, os.stat(path).st_mode & 0o7777)
    except BaseException:
        _discard(temporary)
        raise
    return temporary


def _discard(temporary: str) -> None:
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass


def _check_writable(update: FileUpdate) -> None:
    """A target must still be a regular file the user may write, in a directory that takes a temporary file."""
    try:
        status = os.lstat(update.path)
    except OSError as exc:
        raise MarkerError(f"{update.label}: cannot write: {exc.strerror or exc}") from None
    if not stat.S_ISREG(status.st_mode):
        raise MarkerError(f"{update.label}: cannot write: {file_type(status.st_mode)}, not a regular file")
    # Mode bits as well as access(): root may write anything, yet a file nobody may write is meant to stay as it is.
    if not status.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(update.path, os.W_OK):
        raise MarkerError(f"{update.label}: cannot write: file is read-only")
    directory = os.path.dirname(os.path.abspath(update.path))
    if not os.access(directory, os.W_OK | os.X_OK):
        raise MarkerError(f"{update.label}: cannot write: directory {directory} is not writable")


@dataclass
class FileUpdate:
    """A file whose markers change: `label` is relative to the scanned directory, texts are decoded UTF-8."""

    path: str
    label: str
    old_text: str
    new_text: str
    changes: list[Change]


def plan_updates(path: str, resolve: Resolver) -> list[FileUpdate]:
    """Compute every file's new text without writing anything (for dry runs and diffs)."""
    root_is_dir = os.path.isdir(path)
    updates: list[FileUpdate] = []
    for file_path in _candidate_files(path):
        try:
            raw = read_bytes(file_path)
        except FileReadError as exc:
            raise MarkerError(str(exc)) from None
        if MARKER_TOKEN.encode() not in raw:
            continue
        label = os.path.relpath(file_path, path).replace(os.sep, "/") if root_is_dir else file_path
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MarkerError(f"{label}: not UTF-8 text: {exc}") from None
        new_text, changes = update_text(text, resolve, label)
        if changes:
            updates.append(FileUpdate(file_path, label, text, new_text, changes))
    return updates


def write_updates(updates: list[FileUpdate]) -> None:
    """Write planned updates all or nothing: every target is checked and staged before the first is replaced.

    Each file gets a temporary sibling with its permissions, then an atomic rename; a read-only file or an
    unwritable directory is a ``MarkerError`` before anything changes (renaming over a read-only file would
    silently replace it).
    """
    for update in updates:
        _check_writable(update)
    staged: list[tuple[str, str]] = []
    try:
        for update in updates:
            try:
                staged.append((_stage(update.path, update.new_text.encode("utf-8")), update.path))
            except OSError as exc:
                raise MarkerError(f"{update.label}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        for temporary, _ in staged:
            _discard(temporary)
        raise
    for index, (temporary, target) in enumerate(staged):
        try:
            os.replace(temporary, target)
        except OSError as exc:  # pragma: no cover - a rename within one checked directory does not fail in practice
            for leftover, _ in staged[index:]:
                _discard(leftover)
            raise MarkerError(f"{target}: cannot write: {exc.strerror or exc}") from None


def update_path(path: str, resolve: Resolver, dry_run: bool = False) -> list[Change]:
    """Apply markers in a file, or in all *.yaml/*.yml/Kustomization files under a directory.

    Every file is processed before anything is written, so one bad marker leaves
    the whole tree untouched. `Change.file` is relative to `path` for directories.
    Symlinks and `.git` are skipped; only files that change are rewritten.
    """
    updates = plan_updates(path, resolve)
    if not dry_run:
        write_updates(updates)
    return [change for update in updates for change in update.changes]
