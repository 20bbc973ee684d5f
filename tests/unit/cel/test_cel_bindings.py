"""Bindings (``cel.bind``, ``optMap``, ``optFlatMap`` and the rewrites' own bindings) read their own value.

cel-cpp initialises a bind lazily in a comprehension slot that a sibling ``exists()`` which stopped early leaves
holding its iteration value, so before the rewrite ``cel.bind(n, c.name, n)`` inside ``map``/``all`` evaluated to
an element of ``c.xs``.  cel-go (Kyverno) binds each name to its own value; these tests state cel-go's results.
"""

from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelEnvironment, CelEvalError
from stockade.cel.rewrite import rewrite_bindings, rewrite_null_safety

ENV = CelEnvironment(["object"])
PODLIKE = {
    "containers": [
        {"name": "a", "v": 1, "xs": [1, 2, 3], "opt": {"k": "a-k"}},
        {"name": "b", "v": 2, "xs": [5, 6], "opt": {"k": "b-k"}},
        {"name": "c", "v": 3, "xs": [7], "opt": {}},
    ]
}


def ev(expression: str, obj: Any = None) -> Any:
    return ENV.evaluate(expression, {"object": PODLIKE if obj is None else obj})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # a user-written cel.bind beside an exists() that stops at the first element
        ("object.containers.all(c, c.xs.exists(x, x > 0) && cel.bind(n, c.name, n == c.name))", True),
        ("object.containers.map(c, [c.xs.exists(x, x > 0), cel.bind(n, c.name, n)])",
         [[True, "a"], [True, "b"], [True, "c"]]),
        ("object.containers.map(c, c.xs.exists(x, x > 0) ? cel.bind(n, c.v * 10, n + 1) : 0)", [11, 21, 31]),
        # all() that stops early on a false element, then a bind
        ("object.containers.map(c, [c.xs.all(x, x > 5), cel.bind(n, c.name, n)])",
         [[False, "a"], [False, "b"], [True, "c"]]),
        # the null-safety rewrite's binding of a non-optional orValue receiver
        ("object.containers.all(c, c.xs.exists(x, x > 0) && c.v.orValue(0) == c.v)", True),
        ("object.containers.map(c, [c.xs.exists(x, x > 0), c.name.orValue('')])",
         [[True, "a"], [True, "b"], [True, "c"]]),
        # optMap / optFlatMap expand to a bind in cel-cpp
        ("object.containers.map(c, [c.xs.exists(x, x > 0), optional.of(c.name).optMap(n, n + '!').value()])",
         [[True, "a!"], [True, "b!"], [True, "c!"]]),
        ("object.containers.map(c, [c.xs.exists(x, x > 0), c.opt.?k.optMap(k, k + '!').orValue('none')])",
         [[True, "a-k!"], [True, "b-k!"], [True, "none"]]),
        ("object.containers.map(c, [c.xs.exists(x, x > 0), "
         "optional.of(c.name).optFlatMap(n, n == 'b' ? optional.none() : optional.of(n)).orValue('-')])",
         [[True, "a"], [True, "-"], [True, "c"]]),
    ],
)
def test_bindings_after_an_early_stopping_comprehension_read_their_own_value(expression: str, expected: Any) -> None:
    assert ev(expression) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("cel.bind(a, 2, a * a)", 4),
        ("cel.bind(a, 2, cel.bind(b, a + 1, a * b))", 6),
        # shadowing: the inner binding wins inside its body, the outer one is visible again after it
        ("cel.bind(a, 1, [cel.bind(a, 2, a), a])", [2, 1]),
        ("cel.bind(xs, [1, 2, 3], xs.map(x, x * 2).filter(y, y > 2).size())", 2),
        ("object.containers.map(c, cel.bind(c, c.name, c))", ["a", "b", "c"]),
        # a binding whose body never reads the name does not evaluate the initialiser (cel-go binds lazily)
        ("cel.bind(unused, 1 / 0, 'ok')", "ok"),
        ("optional.none().optMap(v, 1 / 0)", None),
        ("optional.of(3).optMap(v, v * 2).value()", 6),
    ],
)
def test_bindings_keep_cel_go_semantics(expression: str, expected: Any) -> None:
    assert ev(expression) == expected


def test_a_bound_initialiser_that_fails_fails_the_binding() -> None:
    with pytest.raises(CelEvalError):
        ev("cel.bind(a, 1 / 0, a + 1)")


def test_no_rewrite_emits_cel_bind() -> None:
    for source in (
        "object.spec.volumes.orValue([])",
        "f(x).orValue(1)",
        "cel.bind(a, object.spec, a.?x.orValue(a.y.orValue(2)))",
        "object.?spec.optMap(s, s.replicas).orValue(1)",
        "object.?spec.optFlatMap(s, s.?replicas)",
    ):
        rewritten = rewrite_bindings(rewrite_null_safety(source))
        assert "cel.bind" not in rewritten and "optMap" not in rewritten and "optFlatMap" not in rewritten, rewritten


def test_bindings_in_strings_and_non_macro_shapes_are_left_alone() -> None:
    for source in ("'cel.bind(a, 1, a)'", "x.bind(a, 1, a)", "cel.bind(a.b, 1, 2)", "'o.optMap(v, v)'"):
        assert rewrite_bindings(source) == source


def test_cel_bind_needs_the_bindings_library() -> None:
    bare = CelEnvironment(["object"], libraries=("ext.optional", "compat"))
    with pytest.raises(Exception):
        bare.compile("cel.bind(a, 1, a)")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("cel.bind(a, cel.bind(b, 2, b + 1), a * 10)", 30),
        # the inner name is free in the outer body: it must keep meaning the outer b there
        ("cel.bind(b, 100, cel.bind(a, cel.bind(b, 2, b + 1), a + b))", 103),
        ("cel.bind(s, cel.bind(s, 'ab', s + s), s + '!')", "abab!"),
    ],
)
def test_bindings_in_initialisers_keep_their_scopes(expression: str, expected: Any) -> None:
    assert ev(expression) == expected


def test_a_long_chain_of_bindings_in_initialisers_still_parses() -> None:
    expression = "'ab'"
    for _ in range(11):
        expression = f"cel.bind(s, {expression}, s + s)"
    assert ev(f"{expression}.size()") == 2 * 2**11
