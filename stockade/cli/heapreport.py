"""Where `stockade serve`'s Python memory goes: a diagnosis aid for the memory benchmarks, off unless asked for.

With ``STOCKADE_HEAP_REPORT=FILE`` in the environment, ``serve`` starts ``tracemalloc`` with
``STOCKADE_HEAP_REPORT_DEPTH`` frames per allocation (allocation tracing slows the process down and adds its own
overhead: use it to find consumers, not to measure totals) and appends a report
to FILE each time it receives SIGUSR2: the process's RSS, the live Python allocations grouped by the innermost
``stockade`` frame that led to them (the code that owns the memory), by source line, and by file, plus the number
of live objects per type.  Without the variable nothing is imported or installed.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import signal
import time
import tracemalloc
from pathlib import Path

ENVIRONMENT_VARIABLE = "STOCKADE_HEAP_REPORT"
DEPTH_VARIABLE = "STOCKADE_HEAP_REPORT_DEPTH"
# frames kept per allocation: 1 (the default) is cheap and groups by source line; 10-20 reaches the stockade frame
# below library code (json, the HTTP client) for the by-owner table, at several times the tracing cost
DEFAULT_DEPTH = 1
TOP = 40

log = logging.getLogger("stockade.heapreport")


def report_path() -> Path | None:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "")
    return Path(value) if value else None


def _rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _owner(trace: tracemalloc.Trace, package_marker: str) -> str:
    """The innermost frame of the trace inside the stockade package, else its innermost frame."""
    frames = trace.traceback  # most recent call first
    for frame in frames:
        if package_marker in frame.filename:
            return f"{frame.filename.split(package_marker, 1)[1]}:{frame.lineno}"
    return f"{frames[0].filename}:{frames[0].lineno}" if len(frames) else "?"


def render(snapshot: tracemalloc.Snapshot) -> str:
    """The report's text for one snapshot."""
    marker = os.sep + "stockade" + os.sep
    snapshot = snapshot.filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    owners: collections.Counter[str] = collections.Counter()
    blocks: collections.Counter[str] = collections.Counter()
    for trace in snapshot.traces:
        owner = _owner(trace, marker)
        owners[owner] += trace.size
        blocks[owner] += 1
    total = sum(owners.values())
    lines = [f"--- {time.strftime('%H:%M:%S')} pid {os.getpid()} RSS {_rss_mib():.1f} MiB, traced Python memory {total / 2**20:.1f} MiB"]
    lines.append("by owner (innermost stockade frame):")
    lines += [f"  {size / 2**20:8.2f} MiB {blocks[owner]:9d} blocks  {owner}" for owner, size in owners.most_common(TOP)]
    lines.append("by file:")
    lines += [f"  {stat.size / 2**20:8.2f} MiB  {stat.traceback[0].filename}" for stat in snapshot.statistics("filename")[:TOP]]
    lines.append("by line:")
    lines += [f"  {stat.size / 2**20:8.2f} MiB  {stat.traceback[0].filename}:{stat.traceback[0].lineno}" for stat in snapshot.statistics("lineno")[:TOP]]
    types: collections.Counter[str] = collections.Counter(type(item).__qualname__ for item in gc.get_objects())
    lines.append("live objects by type (gc-tracked):")
    lines += [f"  {count:9d}  {name}" for name, count in types.most_common(20)]
    return "\n".join(lines) + "\n"


def write_report(path: Path) -> None:
    try:
        text = render(tracemalloc.take_snapshot())
        with path.open("a") as out:
            out.write(text)
    except OSError as exc:
        log.warning("heap report to %s failed: %s", path, exc)


def install(loop: asyncio.AbstractEventLoop) -> bool:
    """Start tracing and report on SIGUSR2 when the environment asks for it; True when it did."""
    path = report_path()
    if path is None:
        return False
    try:
        depth = max(1, int(os.environ.get(DEPTH_VARIABLE, "") or DEFAULT_DEPTH))
    except ValueError:
        depth = DEFAULT_DEPTH
    tracemalloc.start(depth)
    loop.add_signal_handler(signal.SIGUSR2, write_report, path)
    log.warning("tracing Python allocations (%s=%s); SIGUSR2 writes a report", ENVIRONMENT_VARIABLE, path)
    return True
