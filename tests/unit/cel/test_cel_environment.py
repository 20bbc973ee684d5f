from __future__ import annotations

from typing import Any

import pytest

from stockade.cel import CelActivation, CelCompileError, CelEnvironment, CelError, CelEvalError


def test_compile_once_evaluate_many_activations(cel_env: CelEnvironment) -> None:
    program = cel_env.compile("object.spec.replicas <= 5 && object.metadata.name.startsWith('a')")
    good = CelActivation({"object": {"spec": {"replicas": 3}, "metadata": {"name": "abc"}}})
    bad = CelActivation({"object": {"spec": {"replicas": 9}, "metadata": {"name": "abc"}}})
    assert program.evaluate(good) is True
    assert program.evaluate(bad) is False
    assert cel_env.compile("object.spec.replicas <= 5 && object.metadata.name.startsWith('a')") is program


def test_activation_is_shared_between_environments() -> None:
    first = CelEnvironment(["object"])
    second = CelEnvironment(["object", "request"])
    activation = CelActivation({"object": {"x": 1}, "request": {"uid": "u"}})
    assert first.compile("object.x + 1").evaluate(activation) == 2
    assert second.compile("request.uid").evaluate(activation) == "u"


def test_results_are_plain_python(ev: Any) -> None:
    assert ev("{'a': [1, 2.5, 'x', true, null, b'hi']}") == {"a": [1, 2.5, "x", True, None, b"hi"]}
    assert ev("object.items.map(i, i * 2)", object={"items": [1, 2]}) == [2, 4]


def test_compile_error_names_expression_and_position(cel_env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError) as caught:
        cel_env.compile("object.a +")
    assert caught.value.expression == "object.a +"
    assert caught.value.line == 1 and caught.value.column is not None
    assert "object.a +" in str(caught.value)


def test_unknown_function_and_variable_are_compile_errors(cel_env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError, match="undeclared reference to 'nosuch'"):
        cel_env.compile("nosuch(1)")
    with pytest.raises(CelCompileError, match="params"):
        cel_env.compile("params.x")
    with pytest.raises(CelCompileError):
        cel_env.compile("   ")


def test_runtime_errors(ev: Any) -> None:
    with pytest.raises(CelEvalError, match="nope"):
        ev("object.nope", object={"a": 1})
    with pytest.raises(CelEvalError, match="divide by zero"):
        ev("object.a / 0", object={"a": 1})
    with pytest.raises(CelError):
        ev("object.list[5]", object={"list": [1]})


def test_errors_are_absorbed_by_logical_operators(ev: Any) -> None:
    assert ev("has(object.a) && object.a > 0 || true", object={}) is True
    assert ev("object.nope == 1 || true", object={}) is True


def test_optional_syntax(ev: Any) -> None:
    pod = {"spec": {"containers": [{"name": "a"}]}}
    assert ev("object.spec.?initContainers.orValue([]).size()", object=pod) == 0
    assert ev("object.?spec.?containers.hasValue()", object=pod) is True
    assert ev("optional.none().orValue(7)") == 7
    assert ev("optional.of(3).value()") == 3
    # A top-level optional result is unwrapped: absent becomes None.
    assert ev("object.?metadata") is None
    assert ev("object.?spec.?containers", object=pod) == [{"name": "a"}]
    assert ev("[?optional.none(), 1]") == [1]
    assert ev("{?'a': optional.none(), 'b': 1}") == {"b": 1}


def test_standard_extensions(ev: Any) -> None:
    assert ev("'ABC'.lowerAscii()") == "abc"
    assert ev("'a,b,c'.split(',')") == ["a", "b", "c"]
    assert ev("['a', 'b'].join('-')") == "a-b"
    assert ev("'%s has %d'.format(['pod', 2])") == "pod has 2"
    assert ev("strings.quote('x')") == '"x"'
    assert ev("'abc'.reverse()") == "cba"
    assert ev("math.greatest(1, 5, 3)") == 5
    assert ev("base64.encode(b'hi')") == "aGk="
    assert ev("cel.bind(x, 2, x * x)") == 4
    assert ev("' a '.trim() + 'abc'.substring(1) + 'abc'.charAt(0)") == "abca"


def test_struct_literals_become_maps(ev: Any) -> None:
    result = ev("Object{metadata: Object.metadata{labels: {'a': 'b'}}, spec: Object.spec{replicas: 2}}")
    assert result == {"metadata": {"labels": {"a": "b"}}, "spec": {"replicas": 2}}
    patch = ev("[JSONPatch{op: 'add', path: '/x', value: object.v}]", object={"v": 3})
    assert patch == [{"op": "add", "path": "/x", "value": 3}]


def test_time_limit_reports_runaway_evaluation() -> None:
    env = CelEnvironment(["object"], time_limit_seconds=0.0)
    program = env.compile("object.items.all(a, a >= 0)")
    with pytest.raises(CelEvalError, match="cost limit"):
        program.evaluate(CelActivation({"object": {"items": list(range(500))}}))


def test_iteration_budget_stops_runaway_comprehensions(cel_env: CelEnvironment) -> None:
    program = cel_env.compile("object.items.all(a, object.items.all(b, a + b >= 0))")
    assert program.evaluate(CelActivation({"object": {"items": list(range(20))}})) is True
    with pytest.raises(CelEvalError, match="cost limit exceeded"):
        program.evaluate(CelActivation({"object": {"items": list(range(300))}}))


def test_unknown_library_and_provider_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown CEL library"):
        CelEnvironment(["object"], libraries=["ext.strings", "nope"])
    with pytest.raises(ValueError, match="unknown CEL providers"):
        CelActivation({}, providers={"nope": object()})


def test_restricted_library_set() -> None:
    env = CelEnvironment(["object"], libraries=["ext.strings"])
    assert env.compile("'A'.lowerAscii()").evaluate(CelActivation({"object": {}})) == "a"
    with pytest.raises(CelCompileError):
        env.compile("quantity('1')")


def test_struct_literals_mix_with_null_in_ternaries(ev: Any) -> None:
    expression = "object.patch ? JSONPatch{op: 'add', path: '/a', value: {'x': {'y': 'z'}}} : null"
    assert ev(expression, object={"patch": True}) == {"op": "add", "path": "/a", "value": {"x": {"y": "z"}}}
    assert ev(expression, object={"patch": False}) is None
