"""Kyverno's deferred context loading: an entry is read only when an evaluated expression names it."""

from typing import Any

from stockade.engine.context import EngineContext
from stockade.engine.contextloader import ContextLoader, ContextLoadError, ContextProviders
from stockade.engine.engine import Engine, Request
from stockade.policy.model import KyvernoPolicy

MISSING = {"name": "nothere", "apiCall": {"method": "GET", "urlPath": "/api/v1/namespaces/missing/configmaps/nothere"}}


def failing_api_calls(calls: list[str]) -> ContextProviders:
    def api_call(call: dict[str, Any], _ctx: Any) -> Any:
        calls.append(str(call.get("urlPath")))
        raise ContextLoadError(f"failed to call GET {call.get('urlPath')}: HTTP 404: not found")

    return ContextProviders(api_calls=api_call)


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def policy(rule: dict[str, Any]) -> KyvernoPolicy:
    return KyvernoPolicy(
        {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "preconditions"}, "spec": {"validationFailureAction": "Enforce", "rules": [rule]}}
    )


def conditions(kind: str) -> dict[str, Any]:
    return {
        kind: [
            {"key": "{{ request.object.metadata.name }}", "operator": "Equals", "value": "test"},
            {"key": "{{ nothere }}", "operator": "Equals", "value": "hello"},
        ]
    }


def status(rule: dict[str, Any], name: str, calls: list[str]) -> str:
    engine = Engine(providers=failing_api_calls(calls))
    response = engine.validate(engine.policy_context(policy(rule), Request(resource=pod(name))))
    return response.rules[0].status


def test_preconditions_any_short_circuit_never_loads_the_entry() -> None:
    """Kyverno e2e lazyload/conditions: with `any`, a first true condition means the failing apiCall is never made."""
    rule = {
        "name": "test",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "context": [MISSING],
        "preconditions": conditions("any"),
        "validate": {"pattern": {"metadata": {"name": "*"}}},
    }
    calls: list[str] = []
    assert status(rule, "test", calls) == "pass"
    assert calls == []
    assert status(rule, "other", calls) == "error"
    assert calls == ["/api/v1/namespaces/missing/configmaps/nothere"]


def test_deny_all_loads_the_entry_only_when_the_first_condition_holds() -> None:
    rule = {
        "name": "test",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "context": [MISSING],
        "validate": {"deny": {"conditions": conditions("all")}},
    }
    calls: list[str] = []
    assert status(rule, "other", calls) == "pass"
    assert calls == []
    assert status(rule, "test", calls) == "error"


def test_entries_match_as_words_and_load_earlier_entries_they_use() -> None:
    """Kyverno's matcher: ``ns`` is wanted by ``ns.x`` or ``to_string(ns)`` but not by ``request.ns`` or ``nsx``;
    an entry may use entries declared before it."""
    ctx = EngineContext({"request": {"ns": "r"}, "nsx": 1})
    loader = ContextLoader()
    entries = [
        {"name": "ns", "variable": {"value": {"x": "team"}}},
        {"name": "label", "variable": {"value": "{{ ns.x }}-a"}},
    ]
    loader.load(entries, ctx, "rule")
    assert ctx.query("request.ns") == "r" and ctx.query("nsx") == 1
    assert not ctx.has("ns")
    assert ctx.query("label") == "team-a"
    assert ctx.get("ns") == {"x": "team"}


def test_a_later_entry_of_the_same_name_wins() -> None:
    ctx = EngineContext()
    ContextLoader().load([{"name": "v", "variable": {"value": 1}}, {"name": "v", "variable": {"value": "{{ v }}"}}], ctx, "rule")
    assert ctx.query("v") == 1
    ctx2 = EngineContext()
    ContextLoader().load([{"name": "v", "variable": {"value": 1}}, {"name": "v", "variable": {"value": 2}}], ctx2, "rule")
    assert ctx2.query("v") == 2


def test_a_variable_between_two_definitions_of_a_name_sees_the_first_one() -> None:
    """Kyverno's deferred/resolve-overriden-variable: ``one`` (jmesPath ``foo``) is registered between ``foo: foo`` and
    ``foo: baz``, so it resolves to ``foo``; a later top-level query of ``foo`` still gets the last definition."""
    ctx = EngineContext({})
    loader = ContextLoader(ContextProviders())
    loader.load(
        [
            {"name": "foo", "variable": {"value": "foo"}},
            {"name": "one", "variable": {"jmesPath": "foo"}},
            {"name": "foo", "variable": {"value": "baz"}},
        ],
        ctx,
        "rule",
    )
    assert ctx.query("one") == "foo"
    assert ctx.query("foo") == "baz"


def test_variable_jmespath_resolving_to_a_list_is_an_error_not_a_crash() -> None:
    """Kyverno e2e invalid-jmespath-variable-substitution: a variable whose ``jmesPath`` substitutes to a list fails
    the rule with "jmespath value must be a string" (Enforce then denies) instead of evaluating the list."""
    rule = {
        "name": "test-panic",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "context": [{"name": "image", "variable": {"jmesPath": "{{ request.object.spec.containers[].image }}"}}],
        "validate": {"deny": {"conditions": {"all": [{"key": "{{ image }}", "operator": "AnyNotIn", "value": ["x"]}]}}},
    }
    engine = Engine()
    response = engine.validate(engine.policy_context(policy(rule), Request(resource=pod("test"))))
    assert response.rules[0].status == "error"
    assert "jmespath value must be a string image" in response.rules[0].message
