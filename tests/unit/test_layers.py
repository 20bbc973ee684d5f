"""The layer contract (pyproject.toml, [tool.importlinter]) is part of the test suite, so a change that makes a lower
layer import a higher one fails the normal test command. import-linter's graph (grimp) includes imports inside
functions, so a lazy import cannot hide a violation; the second test shows that on a throwaway package."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK_TIMEOUT_SECONDS = 120


def run_import_linter(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports in a child process (its own sys.path and module cache), without writing a cache."""
    env = dict(os.environ, PYTHONPATH=str(cwd))
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]
    command += ["--config", str(config), "--no-cache"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS)


def test_stockade_layers_hold() -> None:
    result = run_import_linter(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_checker_catches_a_lazy_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "top.py").write_text("from layered import bottom\n")
    # The violation sits inside a function, the way a lazy import would hide a cycle at import time.
    (package / "bottom.py").write_text("def uses_top() -> object:\n    from layered import top\n    return top\n")
    config = tmp_path / "pyproject.toml"
    config.write_text(
        textwrap.dedent(
            """
            [tool.importlinter]
            root_package = "layered"

            [[tool.importlinter.contracts]]
            name = "layered"
            type = "layers"
            layers = ["layered.top", "layered.bottom"]
            """
        )
    )
    result = run_import_linter(tmp_path, config)
    assert result.returncode != 0
    assert "layered.bottom -> layered.top (l.2)" in result.stdout


def test_every_top_level_module_has_a_layer() -> None:
    """A package left out of the contract would escape it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = config["tool"]["importlinter"]["contracts"]
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    top_level = {f"stockade.{path.stem}" for path in (ROOT / "stockade").iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()}
    assert top_level - {"stockade.__init__", "stockade.__main__"} == layered
