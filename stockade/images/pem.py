"""PEM text: the blocks a policy field or key file holds, without loading a cryptography backend.

Split from `stockade.images.keys` so that code which only reads PEM text (the manifest validator listing a policy's
keys) does not pull `cryptography`'s native library into every process that evaluates policies.
"""

from __future__ import annotations

import base64
import binascii
import re

from stockade.errors import StockadeError

_PEM_BLOCK_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)


class KeyFormatError(StockadeError, ValueError):
    """A key or key file that cannot be used (bad PEM, wrong password, unsupported algorithm)."""


def split_pem(text: str) -> list[str]:
    """Every PEM block in `text` (policies may list several public keys in one string)."""
    return [match.group(0) for match in _PEM_BLOCK_RE.finditer(text)]


def pem_blocks(text: str | bytes) -> list[tuple[str, bytes]]:
    """(type, DER bytes) for each PEM block; KeyFormatError for an empty, truncated or undecodable one."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text.strip():
        raise KeyFormatError("empty, expected a PEM block")
    blocks: list[tuple[str, bytes]] = []
    for match in _PEM_BLOCK_RE.finditer(text):
        try:
            blocks.append((match.group(1), base64.b64decode("".join(match.group(2).split()), validate=True)))
        except (ValueError, binascii.Error):
            raise KeyFormatError(f"{match.group(1)} PEM block is not valid base64 (truncated or corrupted?)") from None
    if not blocks:
        if "-----BEGIN " in text:
            raise KeyFormatError("PEM block has no matching END line (truncated?)")
        raise KeyFormatError("no PEM block found")
    return blocks
