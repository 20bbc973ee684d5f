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


def test_null_safety_rewrite_evaluates_receivers_once_and_leaves_plain_code_alone() -> None:
    from stockade.cel.rewrite import rewrite_null_safety

    assert rewrite_null_safety("object.spec.replicas > 1") == "object.spec.replicas > 1"
    rewritten = rewrite_null_safety("f(x).?a")
    assert rewritten == "optional.ofNonZeroValue(f(x)).?a"
    # optional receivers of orValue are not wrapped; optional list elements are not selections
    assert rewrite_null_safety("[?optional.none(), 1]") == "[?optional.none(), 1]"
    assert "type(" not in rewrite_null_safety("optional.of(1).orValue(2)")
    # strings are never rewritten
    assert rewrite_null_safety("'a.?b' + 'x.orValue(1)'") == "'a.?b' + 'x.orValue(1)'"


def test_variable_references_are_replaced_only_where_they_are_references() -> None:
    from stockade.cel.rewrite import replace_variable_references

    source = "variables.a + x.variables.a + variables.b + variables . a + 'variables.a' // variables.a"
    replaced, used = replace_variable_references(source, {"a": "A"})
    # a member named variables, a name not mapped, a string literal and a comment are left alone
    assert replaced == "A + x.variables.a + variables.b + A + 'variables.a' // variables.a"
    assert used == ["a"]
    without_comments, _ = replace_variable_references("variables.a // note", {"a": "A"}, keep_comments=False)
    assert without_comments.strip() == "A"
    assert replace_variable_references("1 + 2 // c", {"a": "A"}, keep_comments=False) == ("1 + 2 ", [])
    assert replace_variable_references("variables.b", {"a": "A"}) == ("variables.b", [])
