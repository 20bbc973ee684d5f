"""Kyverno's dynamic configuration ConfigMap: parsing rules, defaults and the admission filter decision."""

import json

from stockade.engine.kyvernoconfig import KyvernoConfig, ResourceFilter, parse_kyverno_config, parse_resource_filters
from stockade.engine.match import RequestInfo, ResourceKind

# the entries Kyverno's Helm chart writes by default (a sample), joined without separators as the chart does
CHART_FILTERS = "[Event,*,*][*/*,kube-system,*][*/*,kube-public,*][Node,*,*][Node/?*,*,*][Pod/binding,*,*][ReplicaSet,*,*][ReplicaSet/?*,*,*]"

POD = ResourceKind("", "v1", "Pod")
DEPLOYMENT = ResourceKind("apps", "v1", "Deployment")


def test_defaults_without_a_configmap_match_kyverno() -> None:
    config = parse_kyverno_config(None)
    assert config == KyvernoConfig()
    assert config.default_registry == "docker.io" and config.enable_default_registry_mutation
    assert not config.generate_success_events and config.update_request_threshold == 1000
    assert config.max_context_size == 2 * 1024 * 1024
    assert config.admission_skip_reason(POD, "default", "web", RequestInfo(username="alice")) is None


def test_resource_filters_in_the_chart_format() -> None:
    config = parse_kyverno_config({"resourceFilters": CHART_FILTERS})
    assert config.errors == ()
    assert config.is_filtered(ResourceKind("", "v1", "Event"), "default", "e1")
    assert config.is_filtered(DEPLOYMENT, "kube-system", "coredns")
    assert config.is_filtered(ResourceKind("", "v1", "Pod", "binding"), "default", "web")
    assert config.is_filtered(ResourceKind("", "v1", "Node", "status"), "", "n1")
    assert not config.is_filtered(POD, "default", "web")
    assert not config.is_filtered(ResourceKind("", "v1", "Pod", "status"), "default", "web")
    # [*/*,kube-system,*] covers the Namespace object itself: its name is matched against the namespace pattern
    assert config.is_filtered(ResourceKind("", "v1", "Namespace"), "", "kube-system")
    assert not config.is_filtered(ResourceKind("", "v1", "Namespace"), "", "team-a")


def test_resource_filter_kind_forms_and_missing_parts() -> None:
    filters, errors = parse_resource_filters("[apps/v1/Deployment,prod,web-*][Secret][ConfigMap,default][a,b,c,d]")
    assert filters[0] == ResourceFilter("apps", "v1", "Deployment", "", "prod", "web-*")
    assert filters[1] == ResourceFilter("*", "*", "Secret", "", "", "")
    assert filters[2] == ResourceFilter("*", "*", "ConfigMap", "", "default", "")
    assert len(filters) == 3
    assert [e.key for e in errors] == ["resourceFilters"] and "[a,b,c,d]" in str(errors[0])
    config = KyvernoConfig(resource_filters=filters)
    assert config.is_filtered(DEPLOYMENT, "prod", "web-1")
    assert not config.is_filtered(DEPLOYMENT, "prod", "api")
    assert not config.is_filtered(ResourceKind("", "v1", "Secret"), "default", "s")  # namespace part is empty
    assert config.is_filtered(ResourceKind("", "v1", "ConfigMap"), "default", "")


def test_exclusions_and_bang_inclusions() -> None:
    config = parse_kyverno_config({"excludeGroups": "system:nodes, system:serviceaccounts:*", "excludeUsernames": "!system:serviceaccount:kube-system:replicaset-controller, system:serviceaccount:kube-system:*"})
    assert config.exclusions.groups == ("system:nodes", "system:serviceaccounts:*")
    assert config.inclusions.usernames == ("system:serviceaccount:kube-system:replicaset-controller",)
    assert config.is_excluded(RequestInfo(username="node-1", groups=("system:nodes",)))
    assert config.is_excluded(RequestInfo(username="system:serviceaccount:kube-system:job-controller"))
    # an inclusion wins over every exclusion
    assert not config.is_excluded(RequestInfo(username="system:serviceaccount:kube-system:replicaset-controller", groups=("system:nodes",)))
    assert not config.is_excluded(RequestInfo(username="alice", groups=("devs",)))
    reason = config.admission_skip_reason(POD, "default", "web", RequestInfo(username="n", groups=("system:nodes",)))
    assert reason is not None and "excluded" in reason


def test_role_exclusions_need_roles() -> None:
    config = parse_kyverno_config({"excludeRoles": "team-a:admin", "excludeClusterRoles": "cluster-admin"})
    assert config.needs_roles
    assert config.is_excluded(RequestInfo(username="bob", cluster_roles=("cluster-admin",)))
    assert config.is_excluded(RequestInfo(username="bob", roles=("team-a:admin",)))
    assert not config.is_excluded(RequestInfo(username="bob", roles=("team-b:admin",)))
    assert not parse_kyverno_config({"excludeGroups": "system:nodes"}).needs_roles


def test_booleans_use_go_parse_bool_and_bad_values_keep_defaults() -> None:
    config = parse_kyverno_config({"generateSuccessEvents": "T", "enableDefaultRegistryMutation": "0"})
    assert config.generate_success_events and not config.enable_default_registry_mutation
    bad = parse_kyverno_config({"generateSuccessEvents": "yes", "enableDefaultRegistryMutation": "nope", "excludeGroups": "g"})
    assert not bad.generate_success_events and bad.enable_default_registry_mutation
    assert bad.exclusions.groups == ("g",)  # one bad key never discards the others
    assert {e.key for e in bad.errors} == {"generateSuccessEvents", "enableDefaultRegistryMutation"}
    assert "'yes' is not a boolean" in str(bad.errors[0]) or "'yes' is not a boolean" in str(bad.errors[1])


def test_default_registry_must_be_a_dns_host() -> None:
    assert parse_kyverno_config({"defaultRegistry": "reg.kyverno.io"}).default_registry == "reg.kyverno.io"
    assert parse_kyverno_config({"defaultRegistry": "mirror.example.com/library"}).default_registry == "mirror.example.com/library"
    for bad in ("localhost:5000", "10.0.0.1", "-bad", ""):
        config = parse_kyverno_config({"defaultRegistry": bad})
        assert config.default_registry == "docker.io", bad
        assert [e.key for e in config.errors] == ["defaultRegistry"], bad


def test_webhooks_annotations_labels_and_match_conditions() -> None:
    selectors = {
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
        "objectSelector": {"matchLabels": {"policy": "on"}},
    }
    conditions = [{"name": "not-nodes", "expression": "!('system:nodes' in request.userInfo.groups)"}]
    config = parse_kyverno_config(
        {
            "webhooks": json.dumps(selectors),
            "webhookAnnotations": '{"admissions.enforcer/disabled": "true"}',
            "webhookLabels": '{"argocd.argoproj.io/instance": "kyverno"}',
            "matchConditions": json.dumps(conditions),
        }
    )
    assert config.errors == ()
    assert config.webhook.namespace_selector == selectors["namespaceSelector"]
    assert config.webhook.object_selector == {"matchLabels": {"policy": "on"}}
    assert config.webhook_annotations == {"admissions.enforcer/disabled": "true"}
    assert config.webhook_labels == {"argocd.argoproj.io/instance": "kyverno"}
    assert config.match_conditions == tuple(conditions)


def test_malformed_json_values_are_reported_by_key() -> None:
    config = parse_kyverno_config(
        {
            "webhooks": '[{"namespaceSelector": {}}]',  # the pre-1.12 list form is rejected by Kyverno's parser too
            "webhookAnnotations": '{"a": 1}',
            "webhookLabels": "{not json",
            "matchConditions": '[{"name": "x"}]',
            "updateRequestThreshold": "1_000",
            "maxContextSize": "lots",
        }
    )
    assert config.webhook.namespace_selector is None and config.webhook_annotations is None and config.webhook_labels is None
    assert config.match_conditions is None and config.update_request_threshold == 1000 and config.max_context_size == 2 * 1024 * 1024
    assert sorted(e.key for e in config.errors) == ["matchConditions[0]", "maxContextSize", "updateRequestThreshold", "webhookAnnotations", "webhookLabels", "webhooks"]
    bad_operator = parse_kyverno_config({"webhooks": '{"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}'})
    assert [e.key for e in bad_operator.errors] == ["webhooks.objectSelector.matchExpressions[0]"]


def test_numbers_and_success_event_actions() -> None:
    config = parse_kyverno_config({"updateRequestThreshold": "50", "maxContextSize": "100Mi", "generateSuccessEvents": "true", "successEventActions": "Resource Mutated, Resource Generated,"})
    assert config.update_request_threshold == 50 and config.max_context_size == 100 * 1024 * 1024
    assert config.success_event_actions == frozenset({"Resource Mutated", "Resource Generated"})
    assert config.emits_success_event("Resource Mutated") and not config.emits_success_event("Resource Passed")
    assert parse_kyverno_config({"generateSuccessEvents": "true"}).emits_success_event("Resource Passed")
    assert not parse_kyverno_config({"successEventActions": "Resource Passed"}).emits_success_event("Resource Passed")


def test_non_string_values_are_errors() -> None:
    config = parse_kyverno_config({"generateSuccessEvents": True})
    assert not config.generate_success_events and [e.key for e in config.errors] == ["generateSuccessEvents"]
