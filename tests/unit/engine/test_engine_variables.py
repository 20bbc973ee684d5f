"""{{ }} substitution and the JSON context, from Kyverno's documented variable behaviour."""

import pytest

from stockade.engine.context import EngineContext, split_dotted_key
from stockade.engine.variables import SubstitutionError, substitute_all, unescape


@pytest.fixture
def ctx() -> EngineContext:
    return EngineContext(
        {
            "request": {
                "operation": "CREATE",
                "object": {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"replicas": 3}},
                "oldObject": {"metadata": {"name": "old-web"}},
            },
            "ref": "{{ request.object.metadata.name }}",
        }
    )


def test_whole_string_variable_keeps_json_type(ctx: EngineContext) -> None:
    assert substitute_all("{{ request.object.spec.replicas }}", ctx) == 3
    assert substitute_all("{{request.object.metadata.labels}}", ctx) == {"app": "web"}


def test_embedded_variable_is_rendered_like_go(ctx: EngineContext) -> None:
    assert substitute_all("name={{ request.object.metadata.name }} n={{ request.object.spec.replicas }}", ctx) == "name=web n=3"
    assert substitute_all("labels {{ request.object.metadata.labels }}", ctx) == 'labels {"app":"web"}'


def test_embedded_results_are_substituted_again(ctx: EngineContext) -> None:
    assert substitute_all("x-{{ ref }}", ctx) == "x-web"
    # a whole-string variable returns its value as is, like Kyverno
    assert substitute_all("{{ ref }}", ctx) == "{{ request.object.metadata.name }}"


def test_unknown_key_is_an_error_and_or_gives_default(ctx: EngineContext) -> None:
    with pytest.raises(SubstitutionError, match='Unknown key "missing"'):
        substitute_all("{{ request.object.metadata.missing }}", ctx)
    assert substitute_all("{{ request.object.metadata.missing || 'none' }}", ctx) == "none"


def test_delete_requests_read_the_old_object(ctx: EngineContext) -> None:
    assert substitute_all("{{ request.object.metadata.name }}", ctx, is_delete=True) == "old-web"


def test_at_sign_refers_to_the_current_path(ctx: EngineContext) -> None:
    assert substitute_all({"metadata": {"name": "{{@}}"}}, ctx) == {"metadata": {"name": "web"}}


def test_at_sign_under_keys_that_are_not_identifiers() -> None:
    """Label keys with dashes, dots and slashes are quoted in the path ``{{@}}`` reads, as Kyverno quotes them."""
    ctx = EngineContext({"request": {"object": {"metadata": {"labels": {"deploy-zone": "frankfurt", "corp.com/retention": "days_37"}}}}})
    labels = {"deploy-zone": "{{@}}", "corp.com/retention": "{{@}}"}
    assert substitute_all({"metadata": {"labels": labels}}, ctx) == {"metadata": {"labels": {"deploy-zone": "frankfurt", "corp.com/retention": "days_37"}}}


def test_innermost_variable_is_substituted_first() -> None:
    """``{{ to_upper('{{@}}') }}``: the inner ``{{@}}`` is the only token the variable pattern matches at first; its
    value is spliced in and the outer expression is evaluated on the next round."""
    ctx = EngineContext({"request": {"object": {"metadata": {"labels": {"deploy-zone": "frankfurt"}}}}})
    patch = {"metadata": {"labels": {"deploy-zone": "{{ to_upper('{{@}}') }}"}}}
    assert substitute_all(patch, ctx) == {"metadata": {"labels": {"deploy-zone": "FRANKFURT"}}}


def test_at_sign_inside_an_expression_is_the_jmespath_current_node(ctx: EngineContext) -> None:
    """Kyverno rewrites only a bare ``{{@}}`` to the current path; in ``x | to_string(@)`` (Kyverno's e2e csr
    mutate rule) the ``@`` is JMESPath's current node, so a label missing at the patch path does not turn it null."""
    patch = {"metadata": {"labels": {"name": "{{ request.object.metadata.name | to_string(@) }}"}}}
    assert substitute_all(patch, ctx) == {"metadata": {"labels": {"name": "web"}}}


def test_keys_and_lists_are_substituted(ctx: EngineContext) -> None:
    assert substitute_all({"{{ request.object.metadata.name }}": ["{{ request.operation }}"]}, ctx) == {"web": ["CREATE"]}


def test_escaped_braces_are_left_alone_then_unescaped(ctx: EngineContext) -> None:
    assert unescape(substitute_all("\\{{ literal }}", ctx)) == "{{ literal }}"


def test_checkpoints_isolate_rules(ctx: EngineContext) -> None:
    ctx.checkpoint()
    ctx.set("entry", 1)
    ctx.add_variable("request.object.metadata.name", "changed")
    assert ctx.query("entry") == 1
    assert ctx.query("request.object.metadata.name") == "changed"
    ctx.restore()
    assert not ctx.has("entry")
    assert ctx.query("request.object.metadata.name") == "web"
    ctx.reset()


def test_dotted_keys_with_quoted_segments() -> None:
    assert split_dotted_key('request.object.metadata.annotations."a.b/c"') == ["request", "object", "metadata", "annotations", "a.b/c"]
    ctx = EngineContext({"request": {"object": {"metadata": {"name": "x"}}}})
    ctx.add_variable('request.object.metadata.annotations."a.b/c"', "true")
    assert ctx.get("request")["object"]["metadata"] == {"name": "x", "annotations": {"a.b/c": "true"}}
