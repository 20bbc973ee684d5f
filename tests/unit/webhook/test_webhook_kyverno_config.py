"""Kyverno's UPDATE semantics and its dynamic ConfigMap, seen through the webhook: AdmissionEvaluator decisions,
the request filter (also over HTTPS), webhook configuration rendering and success Events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from stockade.controllers.events import ACTION_MUTATED, ACTION_PASSED, REASON_POLICY_APPLIED, admission_events
from stockade.controllers.kyvernoconfigwatch import ConfigMapWatch, InvalidConfigMapReference, LiveKyvernoConfig, parse_configmap_reference
from stockade.controllers.webhookconfig import MANAGED_BY_LABEL, WebhookTarget, build_configurations, build_policy_validation_configuration, static_resolver
from stockade.engine.engine import Engine
from stockade.engine.handlers.existing import PRE_EXISTING_VIOLATION_MESSAGE
from stockade.engine.kyvernoconfig import KyvernoConfig, parse_kyverno_config
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionEvaluator, parse_review
from stockade.webhook.certs import CertificateManager
from stockade.webhook.configfilter import configuration_skip_reason

from webhook_helpers import pod, review, start_server

REQUIRE_TEAM = KyvernoPolicy(yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "label 'team' is required"
      pattern: {metadata: {labels: {team: "?*"}}}
"""))

STRICT = KyvernoPolicy(yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: strict}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match: {any: [{resources: {kinds: [Pod], selector: {matchLabels: {checked: "yes"}}}}]}
    validate:
      allowExistingViolations: false
      pattern: {metadata: {labels: {team: "?*"}}}
"""))


def evaluator(*policies: KyvernoPolicy) -> AdmissionEvaluator:
    return AdmissionEvaluator(Engine(), list(policies))


def test_update_keeping_a_pre_existing_violation_is_admitted_like_kyverno() -> None:
    old = pod(labels={"app": "web"})
    new = pod(labels={"app": "web", "version": "2"})
    decision = evaluator(REQUIRE_TEAM).validate(parse_review(review(new, "UPDATE", old)))
    assert decision.allowed
    [rule] = decision.responses[0].rules
    assert (rule.status, rule.message) == ("skip", PRE_EXISTING_VIOLATION_MESSAGE)
    # the object did comply before: the update that breaks it is denied
    denied = evaluator(REQUIRE_TEAM).validate(parse_review(review(new, "UPDATE", pod(labels={"team": "a"}))))
    assert not denied.allowed and "require-team" in denied.message and "check-team" in denied.message


def test_update_is_matched_on_the_new_object_only() -> None:
    # only the old Pod carries the selector label: Kyverno does not apply the rule
    old = pod(labels={"checked": "yes"})
    new = pod(labels={})
    assert evaluator(STRICT).validate(parse_review(review(new, "UPDATE", old))).allowed
    # the new Pod carries it: denied, and allowExistingViolations: false keeps denying a pre-existing violation
    assert not evaluator(STRICT).validate(parse_review(review(old, "UPDATE", old))).allowed


def test_configuration_filter_decision() -> None:
    config = parse_kyverno_config({"resourceFilters": "[Pod,kube-system,*][Event,*,*]", "excludeGroups": "system:nodes", "excludeClusterRoles": "ops"})
    plain = parse_review(review(pod()))
    assert configuration_skip_reason(config, plain) is None
    assert configuration_skip_reason(None, plain) is None
    in_kube_system = review(pod())
    in_kube_system["request"]["namespace"] = "kube-system"
    assert "resource filters" in str(configuration_skip_reason(config, parse_review(in_kube_system)))
    from_node = review(pod())
    from_node["request"]["userInfo"] = {"username": "system:node:n1", "groups": ["system:nodes"]}
    assert "excluded" in str(configuration_skip_reason(config, parse_review(from_node)))
    # cluster roles are looked up only because the configuration excludes by role
    looked_up: list[str] = []

    def roles(info: Any, namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        looked_up.append(info.username)
        return (), ("ops",)

    assert configuration_skip_reason(config, plain, roles) is not None and looked_up == ["alice"]
    assert configuration_skip_reason(parse_kyverno_config({"excludeGroups": "x"}), plain, roles) is None and looked_up == ["alice"]


def test_server_admits_filtered_requests_without_evaluating(tmp_path: Path) -> None:
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    (policy_dir / "p.yaml").write_text(yaml.safe_dump(REQUIRE_TEAM.raw))
    running = start_server(policy_dir, CertificateManager(hosts=["localhost", "127.0.0.1"], directory=tmp_path / "certs"))
    live = LiveKyvernoConfig()
    running.server.state.kyverno_config = live
    client = running.client()
    try:
        unlabeled = review(pod())
        assert client.post_review("/validate/fail", unlabeled)["response"]["allowed"] is False
        live.load({"excludeUsernames": "alice"})
        assert client.post_review("/validate/fail", unlabeled)["response"] == {"uid": unlabeled["request"]["uid"], "allowed": True}
        live.load({"excludeUsernames": "!alice", "excludeGroups": "system:authenticated"})  # an inclusion wins
        assert client.post_review("/validate/fail", unlabeled)["response"]["allowed"] is False
        live.load({"resourceFilters": "[Pod,default,web]"})
        assert client.post_review("/validate/fail", unlabeled)["response"]["allowed"] is True
        live.load(None)
        assert client.post_review("/validate/fail", unlabeled)["response"]["allowed"] is False
    finally:
        client.close()
        running.stop()


def test_webhook_configurations_take_selectors_conditions_labels_and_annotations() -> None:
    config = parse_kyverno_config(
        {
            "webhooks": json.dumps({"namespaceSelector": {"matchLabels": {"policy": "on"}}, "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}),
            "matchConditions": json.dumps([{"name": "no-leases", "expression": "request.resource.resource != 'leases'"}]),
            "webhookLabels": json.dumps({"team": "platform", MANAGED_BY_LABEL: "someone-else"}),
            "webhookAnnotations": json.dumps({"admissions.enforcer/disabled": "true"}),
        }
    )
    target = WebhookTarget(url="https://127.0.0.1:9443")
    _, validating = build_configurations([REQUIRE_TEAM], target, b"ca", static_resolver(), kyverno_config=config)
    assert validating["metadata"]["labels"] == {"team": "platform", MANAGED_BY_LABEL: "stockade"}
    assert validating["metadata"]["annotations"] == {"admissions.enforcer/disabled": "true"}
    [webhook] = validating["webhooks"]
    assert webhook["namespaceSelector"] == {"matchLabels": {"policy": "on"}}  # replaces the excluded-namespaces one
    assert webhook["objectSelector"] == {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}
    assert webhook["matchConditions"] == [{"name": "no-leases", "expression": "request.resource.resource != 'leases'"}]
    policy_validation = build_policy_validation_configuration(target, b"ca", kyverno_config=config)
    assert policy_validation["metadata"]["annotations"] == {"admissions.enforcer/disabled": "true"}
    assert "namespaceSelector" not in policy_validation["webhooks"][0]
    # without the ConfigMap (or without those keys) nothing changes
    _, plain = build_configurations([REQUIRE_TEAM], target, b"ca", static_resolver(), kyverno_config=KyvernoConfig())
    _, default = build_configurations([REQUIRE_TEAM], target, b"ca", static_resolver())
    assert plain == default
    # Kyverno writes an empty objectSelector (everything), as the apiserver would default it
    assert default["webhooks"][0]["objectSelector"] == {} and "matchConditions" not in default["webhooks"][0]
    assert default["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def test_success_events_follow_generate_success_events() -> None:
    labeled = pod(labels={"team": "a"})
    request = parse_review(review(labeled))
    decision = evaluator(REQUIRE_TEAM).validate(request)
    assert decision.allowed
    assert admission_events(request, decision, KyvernoConfig()) == []
    [event] = admission_events(request, decision, parse_kyverno_config({"generateSuccessEvents": "true"}))
    assert (event.reason, event.type, event.action, event.message) == (REASON_POLICY_APPLIED, "Normal", ACTION_PASSED, "Pod default/web: pass")
    assert event.regarding_dict["name"] == "require-team"
    only_mutations = parse_kyverno_config({"generateSuccessEvents": "true", "successEventActions": ACTION_MUTATED})
    assert admission_events(request, decision, only_mutations) == []


def test_default_registry_settings_reach_the_images_variable() -> None:
    from stockade.engine.engine import Request

    rule_policy = KyvernoPolicy(yaml.safe_load("""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: registry}
spec:
  validationFailureAction: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      deny: {conditions: {any: [{key: "{{ images.containers.c.registry }}", operator: NotEquals, value: "mirror.example.com"}]}}
"""))

    def status(engine: Engine) -> str:
        return engine.validate(engine.policy_context(rule_policy, Request(resource=pod(image="nginx:1.27")))).rules[0].status

    assert status(Engine()) == "fail"
    assert status(Engine(default_registry="mirror.example.com")) == "pass"
    assert status(Engine(default_registry="mirror.example.com", registry_mutation=False)) == "fail"  # registry ""


def test_configmap_watch_events_and_reference_parsing() -> None:
    live = LiveKyvernoConfig()
    seen: list[KyvernoConfig] = []
    live.listeners.append(seen.append)
    watch = ConfigMapWatch(None, live, "kyverno", "kyverno")
    assert watch.apply_event("ADDED", {"metadata": {"name": "kyverno"}, "data": {"excludeGroups": "system:nodes"}})
    assert live().exclusions.groups == ("system:nodes",) and live.fingerprint() == 1
    assert not watch.apply_event("MODIFIED", {"metadata": {"name": "kyverno"}, "data": {"excludeGroups": "system:nodes"}})  # unchanged
    assert not watch.apply_event("MODIFIED", {"metadata": {"name": "other"}, "data": {}})
    assert watch.apply_event("DELETED", {"metadata": {"name": "kyverno"}})
    assert live() == KyvernoConfig() and len(seen) == 2 and live.fingerprint() == 2 and live.documents() == []
    assert parse_configmap_reference("kyverno/kyverno") == ("kyverno", "kyverno")
    for bad in ("kyverno", "/x", "a/", "a/b/c"):
        try:
            parse_configmap_reference(bad)
        except InvalidConfigMapReference as exc:
            assert "NAMESPACE/NAME" in str(exc)
        else:
            raise AssertionError(bad)


def test_unreadable_configmap_leaves_defaults_without_blocking_start_up() -> None:
    class Unreachable:
        """An API client whose every call fails, like a missing RBAC grant."""

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("forbidden")

    live = LiveKyvernoConfig()
    watch = ConfigMapWatch(Unreachable(), live, "kyverno", "kyverno", max_backoff=0.05)
    watch.start()
    try:
        assert watch.wait_synced(timeout=20)
        assert live() == KyvernoConfig()
    finally:
        watch.stop()
