"""The one way Stockade reads YAML: libyaml speed, with alias expansion bounded.

PyYAML resolves an alias to the very node object its anchor named, so nine lines of nested aliases ("billion
laughs") describe a document of 10^9 nodes that anything walking the constructed data would expand. Every document
is therefore composed first (cheap: aliases stay shared), its node graph is walked the way a consumer would walk
it -- counting each node reached through an alias, stopping at the first node past the budget -- and only then
constructed. A self-referencing anchor (``&a [*a]``) is refused outright: the constructed value would be cyclic.

Budget: at most ``ALIAS_EXPANSION_BASE`` (10,000) nodes plus the document's own distinct node count may be reached
through aliases. Ordinary reuse of anchors (a few shared blocks) stays far below it; a bomb crosses it after at
most that many steps, so refusing costs milliseconds.

This module sits at the bottom of the layers (beside ``goregex``) so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import yaml
from yaml.events import DocumentEndEvent, MappingEndEvent, MappingStartEvent, SequenceEndEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode
from stockade.errors import StockadeError

try:  # libyaml is ~8x faster than the pure-Python parser
    SAFE_LOADER: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - wheels without libyaml
    SAFE_LOADER = yaml.SafeLoader

ALIAS_EXPANSION_BASE = 10_000
MAX_DEPTH = 512
"""Deepest nesting of collections accepted. libyaml's composer recurses in C and crashes the process near 50,000
levels; Kubernetes objects and CRD schemas nest well under 100, and Python code walking the data recursively
stays clear of the interpreter's recursion limit."""


class YamlAliasError(StockadeError, yaml.YAMLError):
    """A document's aliases expand past the budget or refer to themselves, or it nests too deep; ``index`` is 0-based."""

    def __init__(self, reason: str, index: int) -> None:
        self.reason = reason
        self.index = index
        super().__init__(f"document {index + 1}: {reason}")


def _may_nest_too_deep(text: str | bytes) -> bool:
    """Cheap and conservative: block nesting needs indentation or indicators on one line, flow nesting needs brackets."""
    if len(text) <= MAX_DEPTH:
        return False
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    longest_line = max(map(len, text.splitlines()), default=0)
    return longest_line + text.count("[") + text.count("{") > MAX_DEPTH


class _Position(Protocol):
    line: int


def _line(mark: _Position | None) -> int:
    """1-based line of a parser position (0 when the parser gave none)."""
    return mark.line + 1 if mark is not None else 0


def check_depth(text: str | bytes, loader: type = SAFE_LOADER) -> None:
    """Refuse a stream nesting deeper than ``MAX_DEPTH``, reading only parser events (no recursion, no nodes)."""
    if not _may_nest_too_deep(text):
        return
    try:
        _scan_depth(text, loader)
    except YamlAliasError:
        raise
    except yaml.YAMLError:
        if loader is yaml.SafeLoader:
            raise
        # Newer libyaml builds stop flow nesting themselves (near 1,000 levels) while scanning ahead, before the
        # parser has produced our 513th start event. Re-scan with the pure-Python parser, which has no such limit,
        # so the refusal names our depth; any other syntax error comes back as it was.
        try:
            _scan_depth(text, yaml.SafeLoader)
        except YamlAliasError:
            raise
        except yaml.YAMLError:
            pass
        raise


def _scan_depth(text: str | bytes, loader: type) -> None:
    instance = loader(text)
    try:
        depth = 0
        index = 0
        while instance.check_event():
            event = instance.get_event()
            if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlAliasError(
                        f"collections nest deeper than {MAX_DEPTH} levels at line {_line(event.start_mark)}", index
                    )
            elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                depth -= 1
            elif isinstance(event, DocumentEndEvent):
                index += 1
    finally:
        instance.dispose()


def check_aliases(root: Node, index: int = 0) -> None:
    """Refuse a composed document whose alias expansion is over budget or cyclic (see the module docstring)."""
    distinct = _distinct_nodes(root)
    budget = ALIAS_EXPANSION_BASE + distinct
    reached_through_alias = 0
    seen: set[int] = set()
    on_path: set[int] = set()
    # Depth-first over the node graph as a tree: (node, exiting?) pairs keep the current path for cycle detection.
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, exiting = stack.pop()
        key = id(node)
        if exiting:
            on_path.discard(key)
            continue
        if key in on_path:
            raise YamlAliasError(f"anchor refers to itself (recursive alias) at line {node.start_mark.line + 1}", index)
        if key in seen:
            reached_through_alias += 1
            if reached_through_alias > budget:
                raise YamlAliasError(
                    f"aliases expand to more than {budget} nodes (budget {ALIAS_EXPANSION_BASE} plus the document's "
                    f"{distinct} nodes); refusing a likely alias bomb",
                    index,
                )
        seen.add(key)
        children = _children(node)
        if children:
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children))


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _distinct_nodes(root: Node) -> int:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(_children(node))
    return len(seen)


def iter_documents(text: str | bytes, loader: type = SAFE_LOADER) -> Iterator[Any]:
    """Each document of a YAML stream, checked then constructed lazily (a consumer may stop after the first)."""
    check_depth(text, loader)
    instance = loader(text)
    try:
        index = 0
        while instance.check_node():
            node = instance.get_node()
            if node is None:  # pragma: no cover - libyaml reports an empty stream through check_node
                break
            check_aliases(node, index)
            yield instance.construct_document(node)
            index += 1
    finally:
        instance.dispose()


def load_all(text: str | bytes, loader: type = SAFE_LOADER) -> list[Any]:
    """Every document of a YAML stream (``None`` for empty ones), alias expansion bounded."""
    try:
        return list(iter_documents(text, loader))
    except RecursionError:  # the pure-Python parser recurses per level and may give up before MAX_DEPTH
        raise YamlAliasError("collections nest too deep for the parser", 0) from None


def load(text: str | bytes, loader: type = SAFE_LOADER) -> Any:
    """The single document of a YAML text, as ``yaml.load`` reads it (a second document is an error)."""
    check_depth(text, loader)
    instance = loader(text)
    try:
        node = instance.get_single_node()
        if node is None:
            return None
        check_aliases(node, 0)
        return instance.construct_document(node)
    except RecursionError:  # the pure-Python parser recurses per level and may give up before MAX_DEPTH
        raise YamlAliasError("collections nest too deep for the parser", 0) from None
    finally:
        instance.dispose()


def compose_all(text: str | bytes, loader: type = SAFE_LOADER) -> list[Node]:
    """Composed nodes of every document (for callers that need positions), alias expansion bounded."""
    check_depth(text, loader)
    instance = loader(text)
    try:
        nodes: list[Node] = []
        while instance.check_node():
            node = instance.get_node()
            if node is None:  # pragma: no cover
                break
            check_aliases(node, len(nodes))
            nodes.append(node)
        return nodes
    finally:
        instance.dispose()
