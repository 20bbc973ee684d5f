"""Reading files a user named without trusting what they are.

A path in a test file or on the command line may name ``/dev/zero``, a FIFO that never delivers, or a file of
gigabytes; reading any of those whole would hang or exhaust memory. Only regular files within ``MAX_FILE_BYTES``
(64 MiB -- far above any policy or manifest) are read. This module sits at the bottom of the layers (beside
``goregex``) so every layer reads user-named files the same way.
"""

from __future__ import annotations

import os
import stat
from stockade.errors import StockadeError

MAX_FILE_BYTES = 64 * 1024 * 1024


class FileReadError(StockadeError, OSError):
    """A file was refused or could not be read; ``reason`` says why in words a user can act on."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def read_bytes(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes; FIFOs, devices, sockets, directories and files over ``limit`` are refused."""
    try:
        # O_NONBLOCK so opening a FIFO cannot wait for a writer; it is refused below before any read.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileReadError(path, "no such file") from None
    except IsADirectoryError:
        raise FileReadError(path, "is a directory") from None
    except OSError as exc:
        raise FileReadError(path, exc.strerror or str(exc)) from None
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            raise FileReadError(path, "is a directory")
        if not stat.S_ISREG(status.st_mode):
            raise FileReadError(path, f"not a regular file ({file_type(status.st_mode)})")
        if status.st_size > limit:
            raise FileReadError(path, f"file is {status.st_size} bytes, over the {limit}-byte limit")
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(descriptor, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        if isinstance(exc, FileReadError):
            raise
        raise FileReadError(path, exc.strerror or str(exc)) from None
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileReadError(path, f"file grew past the {limit}-byte limit while being read")
    return data


def file_type(mode: int) -> str:
    """A file type in words, for messages."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a regular file" if stat.S_ISREG(mode) else "not a plain file"
