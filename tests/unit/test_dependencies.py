"""Declared dependencies match the code: the product imports only what `pip install stockade[server]` installs (the
container image installs exactly that), test tooling may add the `test` extra, and nothing declared goes unused."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stockade"
TEST_TOOLING = PACKAGE / "testing"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {_name(r) for r in project["dependencies"]}, {_name(r) for r in extras["server"]}, {_name(r) for r in extras["test"]}


def _imported_modules(files: list[Path]) -> dict[str, Path]:
    """Top-level third-party modules imported anywhere in ``files`` (inside functions too), with one importer each."""
    found: dict[str, Path] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top != "stockade" and top not in sys.stdlib_module_names:
                    found.setdefault(top, path)
    return found


def _candidates(modules: dict[str, Path]) -> dict[str, tuple[set[str], Path]]:
    """Each imported module's possible distributions (a namespace package such as opentelemetry has several)."""
    by_module = importlib.metadata.packages_distributions()
    return {
        module: ({d.lower().replace("_", "-") for d in by_module.get(module, [module])}, importer)
        for module, importer in modules.items()
    }


def _undeclared(modules: dict[str, Path], declared: set[str]) -> dict[str, str]:
    return {
        module: str(importer.relative_to(ROOT))
        for module, (distributions, importer) in _candidates(modules).items()
        if not distributions & declared
    }


def _files(under: Path, *, skip: Path | None = None) -> list[Path]:
    return [p for p in sorted(under.rglob("*.py")) if skip is None or skip not in p.parents]


def test_the_product_imports_only_runtime_and_server_dependencies() -> None:
    runtime, server, _test = _declared()
    assert _undeclared(_imported_modules(_files(PACKAGE, skip=TEST_TOOLING)), runtime | server) == {}


def test_test_tooling_imports_only_declared_dependencies() -> None:
    runtime, server, test = _declared()
    assert _undeclared(_imported_modules(_files(TEST_TOOLING)), runtime | server | test) == {}


def test_every_runtime_and_server_dependency_is_imported() -> None:
    runtime, server, _test = _declared()
    used = set().union(*(distributions for distributions, _ in _candidates(_imported_modules(_files(PACKAGE))).values()))
    assert sorted((runtime | server) - used) == []
