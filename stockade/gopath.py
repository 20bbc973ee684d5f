"""Go's ``path.Clean``: the one lexical path normaliser (used by pattern anchors and the JMESPath path functions)."""

from __future__ import annotations


def clean(path: str) -> str:
    """Collapse slashes, drop ``.``, resolve ``..`` lexically; ``""`` becomes ``"."`` as in Go."""
    if path == "":
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    cleaned = "/".join(parts)
    if rooted:
        return "/" + cleaned
    return cleaned or "."
