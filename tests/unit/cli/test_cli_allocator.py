"""The C allocator settings of long-running commands: an operator's values win, children inherit the rest."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

from stockade.cli import allocator

glibc = pytest.mark.skipif(allocator._glibc() is None, reason="not glibc: tune() leaves the allocator alone")


@glibc
def test_unset_settings_are_applied_and_exported() -> None:
    environ: dict[str, str] = {}
    applied = allocator.tune(environ)
    assert applied == {name: value for name, (_, value) in allocator.SETTINGS.items()}
    assert environ == {name: str(value) for name, value in applied.items()}


@glibc
def test_an_operators_value_is_kept() -> None:
    environ = {"MALLOC_ARENA_MAX": "8"}
    applied = allocator.tune(environ)
    assert "MALLOC_ARENA_MAX" not in applied
    assert environ["MALLOC_ARENA_MAX"] == "8"
    assert environ["MALLOC_MMAP_THRESHOLD_"] == str(256 * 1024)


@glibc
def test_a_child_process_starts_with_the_settings() -> None:
    # what the forkserver and its evaluation workers see: a process started after tune() has glibc's variables
    script = (
        "import json, os, subprocess, sys\n"
        "from stockade.cli.allocator import tune\n"
        "tune()\n"
        "child = subprocess.run([sys.executable, '-c', 'import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(\"MALLOC_\")}))'], capture_output=True, text=True, check=True)\n"
        "print(child.stdout.strip())\n"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    environment["MALLOC_ARENA_MAX"] = "4"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=environment)
    seen = json.loads(out.stdout)
    assert seen == {"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_THRESHOLD_": str(256 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024)}


def test_no_c_library_means_no_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda _name: None)
    environ: dict[str, str] = {}
    assert allocator.tune(environ) == {}
    assert environ == {}
