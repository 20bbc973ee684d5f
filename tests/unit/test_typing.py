"""``mypy --strict`` over the package is part of the test suite (configuration: pyproject.toml, [tool.mypy]), so an
unannotated function or an unchecked None fails the normal test command. The cache under .cache/mypy keeps reruns
to seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a guard against a hung checker, not a performance assertion: a cold run takes about a minute on 2 cores
MYPY_TIMEOUT_SECONDS = 900


def test_package_is_strictly_typed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=MYPY_TIMEOUT_SECONDS,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
