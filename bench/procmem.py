"""Memory of a server's process tree, for the benches that compare it (bench_cluster_scale, compare_kyverno).

RSS counts a page once for every process that maps it, so the RSS of a forked tree (Stockade's server, its
multiprocessing forkserver and the evaluation workers forked from that) over-counts the pages they share.  PSS
(``/proc/PID/smaps_rollup``) divides each shared page among the processes mapping it; the sum of PSS over a tree
is what the tree costs together, and close to what a container's memory cgroup is charged for it.  For one Go
process the two are about equal.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from bench_admission import descendants

MIB = float(2**20)


def process_memory(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, anonymous PSS) of one process in bytes; zeros once it is gone.  Anonymous pages (heap, stacks) are
    shared only by fork, so within one tree; the file pages in PSS (the interpreter, shared libraries, a Go binary's
    text) are divided with every process on the machine mapping the same file, unrelated ones included, so the
    anonymous part is the one that does not move with what else runs."""
    figures = {"Rss:": 0, "Pss:": 0, "Pss_Anon:": 0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(" ")
            if name in figures:
                figures[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0, 0
    return figures["Rss:"], figures["Pss:"], figures["Pss_Anon:"]


def roled_pids(top: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """(role, pid) for every live process below the named top processes, each top process first: below Stockade's
    server, the multiprocessing forkserver, the evaluation workers it forks (``worker``) and the resource tracker;
    anything else is ``other``."""
    found: list[tuple[str, int]] = []
    for name, top_pid in top:
        if not Path(f"/proc/{top_pid}").exists():
            continue
        found.append((name, top_pid))
        forkservers: set[int] = set()
        for pid in descendants(top_pid):  # parents come before their children
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent in forkservers:
                role = "worker"
            elif "forkserver" in command:
                role = "forkserver"
                forkservers.add(pid)
            elif "resource_tracker" in command:
                role = "resource_tracker"
            else:
                role = "other"
            found.append((role, pid))
    return found


# one sample: (role, pid, RSS, PSS, anonymous PSS) per process
Sample = list[tuple[str, int, int, int, int]]


def sample_memory(processes: list[tuple[str, int]]) -> Sample:
    return [(role, pid, *process_memory(pid)) for role, pid in processes]


class PeakRss(threading.Thread):
    """Samples a process tree's memory every ``interval`` seconds until ``stopped`` is set: the peak of the sum over
    its processes (RSS, PSS and anonymous PSS, each its own peak), each process's own peaks, the per-process figures at the moment
    of the RSS peak, and the peak of the sum over the processes whose role is in ``group``."""

    def __init__(self, processes: Callable[[], list[tuple[str, int]]], interval: float = 0.5, group: Iterable[str] = (), cgroup: "MemoryCgroup | None" = None) -> None:
        super().__init__(daemon=True)
        self.processes, self.interval, self.group, self.cgroup = processes, interval, frozenset(group), cgroup
        self.peak_cgroup_anon = 0  # the peak of the engine's memory cgroup's anonymous charge (MemoryCgroup)
        self.peak_unique = 0  # the peak of the distinct physical pages the tree maps (unique_resident_bytes)
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # take() runs in the thread and may run in the caller too
        self.peak = self.peak_pss = self.peak_anon = self.peak_group = 0
        self.samples = 0
        self.at_peak: Sample = []  # every process at the RSS peak
        self.per_process: dict[int, tuple[str, int, int, int]] = {}  # pid -> (role, peak RSS, peak PSS, peak anonymous PSS)

    def take(self) -> Sample:
        """One sample now, folded into the peaks (the thread calls it; a caller may too, e.g. right before stopping)."""
        sample = sample_memory(self.processes())
        sample = [item for item in sample if item[2] > 0]  # gone between the listing and the read
        charged = self.cgroup.anonymous() if self.cgroup is not None else 0
        unique = unique_resident_bytes(item[1] for item in sample)
        with self.lock:
            self.fold(sample)
            self.peak_cgroup_anon = max(self.peak_cgroup_anon, charged)
            self.peak_unique = max(self.peak_unique, unique)
        return sample

    def fold(self, sample: Sample) -> None:
        self.samples += 1
        rss, pss, anon = sum(item[2] for item in sample), sum(item[3] for item in sample), sum(item[4] for item in sample)
        if rss > self.peak:
            self.peak, self.at_peak = rss, sample
        self.peak_pss, self.peak_anon = max(self.peak_pss, pss), max(self.peak_anon, anon)
        self.peak_group = max(self.peak_group, sum(item[2] for item in sample if item[0] in self.group))
        for role, pid, rss_now, pss_now, anon_now in sample:
            _, peak_rss, peak_pss, peak_anon = self.per_process.get(pid, (role, 0, 0, 0))
            self.per_process[pid] = (role, max(peak_rss, rss_now), max(peak_pss, pss_now), max(peak_anon, anon_now))

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.take()


class MemoryCgroup:
    """A memory cgroup holding one engine's processes, so its memory is read the way the kernel charges a container:
    each page once, however many processes of the engine map it.  ``anonymous`` is the heap, stacks and copy-on-write
    pages of the whole tree (the part a container limit is mostly spent on); ``peak`` is the kernel's own high-water
    mark, page cache charged to the group included (files first read by the engine).

    Created under the benchmark's own memory cgroup (cgroup v1's memory controller, or cgroup v2 with the memory
    controller enabled for children); ``create`` returns None where neither is writable, and the benches then say so."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @classmethod
    def create(cls, name: str) -> "MemoryCgroup | None":
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, relative = line.split(":", 2)
            if "memory" in controllers.split(","):
                candidates = [(Path("/sys/fs/cgroup/memory") / relative.lstrip("/"), 1)]
                break
        else:
            own = Path("/proc/self/cgroup").read_text().splitlines()
            relative = next((line.split(":", 2)[2] for line in own if line.startswith("0::")), "/")
            candidates = [(Path("/sys/fs/cgroup") / relative.lstrip("/"), 2)]
        for parent, version in candidates:
            path = parent / f"{name}-{os.getpid()}"
            try:
                path.mkdir()
            except OSError:
                continue
            group = cls(path, version)
            if (path / "cgroup.procs").exists() and group.anonymous() >= 0:
                return group
            group.remove()
        return None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the group: a shell joins it and execs the command (same pid, so children the
        command forks later are in the group too)."""
        return ["sh", "-c", f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"', "sh", *argv]

    def _stat(self) -> dict[str, int]:
        figures: dict[str, int] = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                figures[key] = int(value)
        return figures

    def anonymous(self) -> int:
        """Anonymous memory charged to the group now, in bytes (-1 when unreadable)."""
        try:
            stat = self._stat()
        except OSError:
            return -1
        return stat.get("total_rss", 0) if self.version == 1 else stat.get("anon", 0)

    def peak(self) -> int:
        """The kernel's peak charge of the group in bytes (page cache included); 0 when unreadable."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def remove(self) -> None:
        """Remove the group once its processes are gone (a few tries: the last exit is noticed asynchronously)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT = 1 << 63
_PFN_MASK = (1 << 55) - 1


def unique_resident_bytes(pids: Iterable[int]) -> int:
    """Bytes of the distinct physical pages the processes map (anonymous and file pages alike), each page once
    however many of them map it: what the tree holds in RAM, without RSS's double counting of forked processes'
    shared pages and without PSS's division of a file's pages with unrelated processes.  Reads ``/proc/PID/pagemap``
    (page frame numbers need root; 0 without them) for the mappings smaps shows resident."""
    frames: set[int] = set()
    for pid in pids:
        try:
            ranges = _resident_ranges(pid)
            with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
                for start, end in ranges:
                    pagemap.seek(start // _PAGE * 8)
                    data = pagemap.read((end - start) // _PAGE * 8)
                    for (entry,) in struct.iter_unpack("<Q", data):
                        if entry & _PRESENT:
                            frames.add(entry & _PFN_MASK)
        except (OSError, ValueError):
            continue
    frames.discard(0)  # without CAP_SYS_ADMIN every frame number reads as 0
    return len(frames) * _PAGE


def _resident_ranges(pid: int) -> list[tuple[int, int]]:
    """Address ranges of the process's mappings with resident pages (from smaps)."""
    ranges: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and not head.endswith(":"):
            low, _, high = head.partition("-")
            try:
                current = (int(low, 16), int(high, 16))
            except ValueError:
                current = None
        elif head == "Rss:" and current is not None and line.split()[1] != "0":
            ranges.append(current)
    return ranges
