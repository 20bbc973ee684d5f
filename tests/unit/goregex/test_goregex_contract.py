"""Checked contract: a regex that comes from a policy or a resource is only ever evaluated through goregex.

Python's ``re`` backtracks, so a user pattern like ``^([a-z0-9]+-?)+$`` can freeze the webhook for minutes.  ``re`` may
only compile patterns the project wrote itself: every ``re.compile/match/search/...`` call outside
``stockade/goregex.py`` must get a pattern built from string literals (f-strings and ``+`` of literals, module-level
constants made that way, or ``re.escape(...)``, which can only match its own text).
"""

from __future__ import annotations

import ast
from pathlib import Path

import stockade

_MATCHING_FUNCTIONS = frozenset({"compile", "match", "search", "fullmatch", "sub", "subn", "findall", "finditer", "split"})
_PACKAGE = Path(stockade.__file__).parent
_EXEMPT = {_PACKAGE / "goregex.py"}


def _is_re_call(node: ast.AST, names: frozenset[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "re"
        and node.func.attr in names
    )


def _literal_built(node: ast.AST | None, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes))
    if isinstance(node, ast.JoinedStr):
        return all(
            isinstance(part, ast.Constant) or (isinstance(part, ast.FormattedValue) and _literal_built(part.value, constants))
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_built(node.left, constants) and _literal_built(node.right, constants)
    if isinstance(node, ast.Name):
        return node.id in constants
    if _is_re_call(node, frozenset({"escape"})):
        return True  # an escaped text matches only itself
    if _is_re_call(node, frozenset({"sub"})):
        assert isinstance(node, ast.Call)
        return all(_literal_built(argument, constants) for argument in node.args)
    return False


def _module_constants(tree: ast.Module) -> set[str]:
    constants: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        if _literal_built(value, constants):
            constants.update(target.id for target in targets if isinstance(target, ast.Name))
    return constants


def _pattern_argument(call: ast.Call) -> ast.AST | None:
    if call.args:
        return call.args[0]
    return next((keyword.value for keyword in call.keywords if keyword.arg == "pattern"), None)


def violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename)
    constants = _module_constants(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "re":
            imported = {alias.name for alias in node.names} & _MATCHING_FUNCTIONS
            if imported:
                found.append(f"{filename}:{node.lineno}: imports {sorted(imported)} from re")
        if _is_re_call(node, _MATCHING_FUNCTIONS):
            assert isinstance(node, ast.Call)
            if not _literal_built(_pattern_argument(node), constants):
                found.append(f"{filename}:{node.lineno}: re.{node.func.attr} with a pattern not built from literals")  # type: ignore[attr-defined]
    return found


def test_checker_flags_user_patterns_and_accepts_project_constants() -> None:
    assert violations("import re\ndef f(p, t):\n    return re.search(p, t)\n", "x.py")
    assert violations("import re\nX = re.compile(''.join(parts))\n", "x.py")
    assert violations("from re import fullmatch\n", "x.py")
    assert violations("import re\ndef f(p):\n    return re.compile(pattern=p)\n", "x.py")
    accepted = (
        "import re\n"
        "_A = '[a-z]+'\n"
        "_B = rf'^{_A}-{_A}$'\n"
        "_C = re.sub(r'\\(', '(?:', _B)\n"
        "_D = re.compile(_C + r'\\d')\n"
        "def f(root, t):\n"
        "    return re.fullmatch(r'[0-9]+', t) or re.compile(re.escape(root) + r'(?!x)').search(t)\n"
    )
    assert violations(accepted, "x.py") == []


def test_no_module_evaluates_a_non_literal_pattern_with_python_re() -> None:
    found: list[str] = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        if path not in _EXEMPT:
            found.extend(violations(path.read_text(encoding="utf-8"), str(path.relative_to(_PACKAGE.parent))))
    assert found == []
