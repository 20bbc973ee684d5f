"""C allocator settings for long-running commands (``serve``, the image controllers).

glibc gives every thread that allocates its own malloc arena (up to eight per core) and raises its mmap threshold
each time a large block is freed.  A server with a hundred watch, queue and HTTP threads that decodes multi-megabyte
list pages then keeps freed memory scattered over many arenas and in the main heap: measured on
`bench/bench_cluster_scale.py`, that was about a third of ``serve``'s RSS.  Two arenas and a fixed mmap threshold
(large blocks come from, and go back to, the kernel) keep the process near what it really holds.

The settings are glibc's own environment variables, so an operator's values always win, and the processes a
command starts (the forkserver and its evaluation workers) inherit them.  The running process reads its
environment only at start-up, so it gets the same values through ``mallopt``.  Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Mapping, MutableMapping

log = logging.getLogger("stockade.allocator")

# glibc environment variable -> (mallopt parameter number, value)
SETTINGS: Mapping[str, tuple[int, int]] = {
    "MALLOC_ARENA_MAX": (-8, 2),  # M_ARENA_MAX
    "MALLOC_MMAP_THRESHOLD_": (-3, 256 * 1024),  # M_MMAP_THRESHOLD (a fixed value also ends the dynamic raise)
    "MALLOC_TRIM_THRESHOLD_": (-1, 1024 * 1024),  # M_TRIM_THRESHOLD: free heap tops above 1 MiB go back at once
}


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        library = ctypes.CDLL(name)
    except OSError:
        return None
    return library if hasattr(library, "mallopt") and hasattr(library, "gnu_get_libc_version") else None


def tune(environ: MutableMapping[str, str] | None = None) -> dict[str, int]:
    """Apply the settings an operator has not set; returns what was applied (empty off glibc).

    Call it before the command starts threads or child processes."""
    environ = os.environ if environ is None else environ
    library = _glibc()
    if library is None:
        return {}
    applied: dict[str, int] = {}
    for variable, (parameter, value) in SETTINGS.items():
        if variable in environ:
            continue
        environ[variable] = str(value)
        if library.mallopt(ctypes.c_int(parameter), ctypes.c_int(value)) == 1:
            applied[variable] = value
        else:
            log.debug("mallopt(%d, %d) refused", parameter, value)
    return applied
