from __future__ import annotations

from stockade.cel.rewrite import rewrite_struct_literals


def test_nested_struct_literals_become_map_literals() -> None:
    source = "Object{metadata: Object.metadata{labels: {'a': x}, ?annotations: optional.none()}, spec: f(a, b)}"
    expected = ("dyn({\"metadata\": dyn({\"labels\": {'a': x}, ?\"annotations\": optional.none()}), "
                "\"spec\": f(a, b)})")
    assert rewrite_struct_literals(source) == expected


def test_map_literals_strings_and_in_operator_are_untouched() -> None:
    for source in ("x in {a: 1}", "'Object{a: 1}' + y", "{k: v, 'j': [a, b]}", "object.spec.containers.all(c, c.x)"):
        assert rewrite_struct_literals(source) == source


def test_ternaries_inside_struct_fields_keep_their_colons() -> None:
    source = "JSONPatch{op: 'add', value: [p, q ? 1 : 2]}"
    assert rewrite_struct_literals(source) == "dyn({\"op\": 'add', \"value\": [p, q ? 1 : 2]})"
