"""The webhook configurations have the shape Kyverno's webhook controller gives them.

Expectations follow Kyverno's documented/observable behaviour (its e2e suite asserts these shapes): ClusterPolicy rules
fold to (group, version, scope) with the resources sharing operations, namespaced resources are registered with
scope Namespaced, generate rules also register the generated kinds, exclusions that only name kinds/operations take
operations away, and each CEL policy kind gets its own webhooks whose paths name the policies."""

from __future__ import annotations

from typing import Any

import yaml

from stockade.celpolicy.model import CelPolicy
from stockade.controllers.webhookconfig import KYVERNO_NAMING, WebhookTarget, build_configurations, selector_key, static_resolver
from stockade.policy.model import KyvernoPolicy

TARGET = WebhookTarget(service_name="kyverno-svc", service_namespace="kyverno")


def cluster_policy(rules: list[dict[str, Any]], **spec: Any) -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": spec.pop("name", "p")}, "spec": {"rules": rules, **spec}})


def cel_policy(text: str) -> CelPolicy:
    return CelPolicy(yaml.safe_load(text))


def configurations(policies: list[KyvernoPolicy], cel: list[CelPolicy] = ()) -> tuple[dict[str, Any], dict[str, Any]]:  # type: ignore[assignment]
    return build_configurations(policies, TARGET, b"ca", static_resolver(), cel_policies=list(cel), naming=KYVERNO_NAMING)


DENY = {"message": "m", "deny": {}}


def test_pod_rule_is_namespaced_with_ephemeral_containers_and_all_operations() -> None:
    policy = cluster_policy(
        [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": DENY}],
        # no pod-controller rules, to see the Pod entry alone
        **{"name": "only-pod"},
    )
    policy.raw["metadata"]["annotations"] = {"pod-policies.kyverno.io/autogen-controllers": "none"}
    _, validating = configurations([policy])
    (webhook,) = validating["webhooks"]
    assert webhook["name"] == "validate.kyverno.svc-fail"
    assert webhook["clientConfig"]["service"] == {"name": "kyverno-svc", "namespace": "kyverno", "path": "/validate/fail", "port": 443}
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CONNECT", "CREATE", "DELETE", "UPDATE"],
            "resources": ["pods", "pods/ephemeralcontainers"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["objectSelector"] == {} and webhook["matchPolicy"] == "Equivalent" and webhook["timeoutSeconds"] == 10


def test_wildcard_kinds_keep_the_policy_scope_and_a_broader_entry_absorbs_narrower_ones() -> None:
    policy = cluster_policy(
        [
            {"name": "all", "match": {"any": [{"resources": {"kinds": ["*"]}}]}, "validate": DENY},
            {"name": "cm", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}, "validate": DENY},
        ]
    )
    _, validating = configurations([policy])
    assert validating["webhooks"][0]["rules"] == [
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CONNECT", "CREATE", "DELETE", "UPDATE"], "resources": ["*", "pods/ephemeralcontainers"], "scope": "*"}
    ]


def test_listed_operations_group_resources_and_exclusions_remove_operations() -> None:
    policy = cluster_policy(
        [
            {
                "name": "r",
                "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}, {"resources": {"kinds": ["*/scale"], "operations": ["CREATE"]}}]},
                "exclude": {"any": [{"resources": {"kinds": ["ConfigMap"], "operations": ["DELETE"]}}]},
                "validate": DENY,
            }
        ]
    )
    _, validating = configurations([policy])
    assert validating["webhooks"][0]["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT", "CREATE", "UPDATE"], "resources": ["configmaps"], "scope": "Namespaced"},
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["*/scale"], "scope": "*"},
    ]


def test_generate_rules_register_the_generated_kind_too() -> None:
    policy = cluster_policy(
        [
            {
                "name": "g",
                "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                "generate": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x", "namespace": "{{request.object.metadata.name}}", "data": {}},
            }
        ]
    )
    mutating, validating = configurations([policy])
    assert mutating["webhooks"] == []
    by_resource = {tuple(r["resources"]): r for r in validating["webhooks"][0]["rules"]}
    assert by_resource[("namespaces",)]["operations"] == ["CONNECT", "CREATE", "DELETE", "UPDATE"]
    assert by_resource[("namespaces",)]["scope"] == "*"  # cluster-scoped
    assert by_resource[("configmaps",)]["operations"] == ["CREATE", "DELETE", "UPDATE"]


def test_policy_with_its_own_match_conditions_gets_a_fine_grained_webhook() -> None:
    shared = cluster_policy([{"name": "r", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}, "validate": DENY}], name="shared")
    own = cluster_policy(
        [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Secret"]}}]}, "validate": DENY}],
        name="own",
        failurePolicy="Ignore",
        webhookConfiguration={"matchConditions": [{"name": "only-a", "expression": "object.metadata.name == 'a'"}]},
    )
    _, validating = configurations([shared, own])
    names = [w["name"] for w in validating["webhooks"]]
    assert names == ["validate.kyverno.svc-fail", "validate.kyverno.svc-ignore-finegrained-own"]
    fine = validating["webhooks"][1]
    assert fine["clientConfig"]["service"]["path"] == "/validate/ignore/finegrained/own"
    assert fine["matchConditions"] == [{"name": "only-a", "expression": "object.metadata.name == 'a'"}]
    assert [r["resources"] for r in fine["rules"]] == [["secrets"]]
    assert [r["resources"] for r in validating["webhooks"][0]["rules"]] == [["configmaps"]]


VPOL = """
apiVersion: policies.kyverno.io/v1beta1
kind: {kind}
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  autogen: {{podControllers: {{controllers: []}}}}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: "true"
"""


def test_validating_policies_share_a_webhook_whose_path_names_them() -> None:
    first = cel_policy(VPOL.format(kind="ValidatingPolicy", name="zeta", namespace="''"))
    second = cel_policy(VPOL.format(kind="ValidatingPolicy", name="alpha", namespace="''"))
    _, validating = configurations([], [first, second])
    (webhook,) = validating["webhooks"]
    assert webhook["name"] == "vpol.validate.kyverno.svc-fail"
    assert webhook["clientConfig"]["service"]["path"] == "/vpol/alpha/zeta"
    assert webhook["rules"] == [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
    assert "timeoutSeconds" not in webhook  # the apiserver's default, as Kyverno leaves it


def test_match_conditions_make_a_cel_policy_fine_grained_and_namespaced_ones_see_their_namespace() -> None:
    text = VPOL.format(kind="ValidatingPolicy", name="cond", namespace="''").replace(
        "  validations:", "  matchConditions:\n  - {name: c, expression: \"object.metadata.name != 'x'\"}\n  validations:"
    )
    namespaced = cel_policy(VPOL.format(kind="NamespacedValidatingPolicy", name="mine", namespace="team"))
    _, validating = configurations([], [cel_policy(text), namespaced])
    by_name = {w["name"]: w for w in validating["webhooks"]}
    assert set(by_name) == {"vpol.validate.kyverno.svc-fail-finegrained-cond", "nvpol.validate.kyverno.svc-fail"}
    fine = by_name["vpol.validate.kyverno.svc-fail-finegrained-cond"]
    assert fine["clientConfig"]["service"]["path"] == "/vpol/cond"
    assert fine["matchConditions"] == [{"name": "c", "expression": "object.metadata.name != 'x'"}]
    own_namespace = by_name["nvpol.validate.kyverno.svc-fail"]["namespaceSelector"]["matchExpressions"][0]
    assert own_namespace == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team"]}


def test_match_conditions_the_apiserver_cannot_compile_stay_out_of_the_webhook() -> None:
    """Kyverno's libraries (image(), ...) are unknown to kube-apiserver: Kyverno then builds the policy's webhook
    without matchConditions (a shared one) and evaluates them itself."""
    text = VPOL.format(kind="ValidatingPolicy", name="libs", namespace="''").replace(
        "  validations:", "  matchConditions:\n  - {name: c, expression: \"object.spec.containers.exists(c, image(c.image).registry() == 'corp.reg.com')\"}\n  validations:"
    )
    _, validating = configurations([], [cel_policy(text)])
    (webhook,) = validating["webhooks"]
    assert webhook["name"] == "vpol.validate.kyverno.svc-fail" and "matchConditions" not in webhook
    assert webhook["clientConfig"]["service"]["path"] == "/vpol/libs"


def test_policies_with_different_selectors_get_webhooks_suffixed_by_the_selector_digest() -> None:
    plain = cel_policy(VPOL.format(kind="ValidatingPolicy", name="plain", namespace="''"))
    labelled = cel_policy(VPOL.format(kind="ValidatingPolicy", name="labelled", namespace="''"))
    labelled.raw["spec"]["matchConstraints"]["objectSelector"] = {"matchLabels": {"tier": "web"}}
    _, validating = configurations([], [plain, labelled])
    names = sorted(w["name"] for w in validating["webhooks"])
    assert len(names) == 2 and all(n.startswith("vpol.validate.kyverno.svc-fail-") for n in names)
    suffixes = {n.rsplit("-", 1)[1] for n in names}
    assert len(suffixes) == 2 and all(len(s) == 8 for s in suffixes)
    assert selector_key(None, None) == selector_key(None, None) != selector_key(None, {"matchLabels": {"tier": "web"}})


def test_generating_policies_are_ignore_and_register_every_operation() -> None:
    gpol = cel_policy(
        """
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata: {name: zk}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [namespaces]
  generate:
  - expression: "true"
"""
    )
    _, validating = configurations([], [gpol])
    (webhook,) = validating["webhooks"]
    assert webhook["name"] == "gpol.validate.kyverno.svc-ignore" and webhook["failurePolicy"] == "Ignore"
    assert webhook["clientConfig"]["service"]["path"] == "/gpol/zk"
    assert webhook["rules"][0]["operations"] == ["CONNECT", "CREATE", "DELETE", "UPDATE"]


def test_verify_images_reaches_the_validating_webhook_only_with_checks_to_make() -> None:
    """Kyverno registers a verifyImages rule in the validating webhook only when it has checks to make after mutation
    (``verifyDigest`` or ``required``, both on by default); the mutating webhook always gets it."""

    def verify(**entry: Any) -> KyvernoPolicy:
        rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [{"imageReferences": ["*"], **entry}]}
        return cluster_policy([rule], name="verify")

    def registered(policy: KyvernoPolicy) -> tuple[bool, bool]:
        mutating, validating = configurations([policy])
        return bool(mutating["webhooks"]), bool(validating["webhooks"])

    assert registered(verify()) == (True, True)
    assert registered(verify(verifyDigest=False)) == (True, True)
    assert registered(verify(verifyDigest=False, required=False)) == (True, False)


MATCH_POLICY_EXACT = """
apiVersion: policies.kyverno.io/v1beta1
kind: {kind}
metadata: {{name: exact}}
spec:
  matchConstraints:
    matchPolicy: Exact
    resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]
{body}
"""


def test_cel_mutating_webhooks_leave_match_policy_to_the_api_server_default() -> None:
    """Kyverno builds the CEL mutating webhooks (MutatingPolicy, ImageValidatingPolicy digest mutation) as validating
    ones and copies them without matchPolicy, so ``matchPolicy: Exact`` reaches the validating webhook only (e2e
    image-validating-policies/webhook-configuration/fine-grained/match-constraints)."""
    ivpol = cel_policy(MATCH_POLICY_EXACT.format(kind="ImageValidatingPolicy", body="  matchImageReferences: [{glob: 'ghcr.io/*'}]\n  attestors: [{name: a, cosign: {key: {data: k}}}]\n  validations: [{expression: 'true'}]"))
    mpol = cel_policy(
        MATCH_POLICY_EXACT.format(kind="MutatingPolicy", body="  mutations: [{patchType: ApplyConfiguration, applyConfiguration: {expression: 'Object{}'}}]").replace("name: exact", "name: exact-m")
    )
    mutating, validating = configurations([], [ivpol, mpol])
    by_name = {w["name"]: w for w in mutating["webhooks"]}
    assert set(by_name) == {"ivpol.mutate.kyverno.svc-fail-finegrained-exact", "mpol.validate.kyverno.svc-fail-finegrained-exact-m"}  # Kyverno names it so
    assert all("matchPolicy" not in webhook for webhook in by_name.values())
    (fine,) = [w for w in validating["webhooks"] if w["name"] == "ivpol.validate.kyverno.svc-fail-finegrained-exact"]
    assert fine["matchPolicy"] == "Exact"
