"""MutatingPolicies in the admission webhook: what mutates the request, what is left to the mutateExisting
controller, background requests, cluster-answered CEL libraries, and the reviews reported to the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook_helpers import pod, review

from stockade.webhook.admission import PolicyScope, parse_review, parse_route
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.server import _submit_mutating

BACKGROUND_USER = "system:serviceaccount:kyverno:kyverno-background-controller"

MPOL = """
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata:
  name: {name}
spec:
{extra}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{{op: "add", path: "/metadata/labels/{name}", value: "yes"}}]'
"""


def store(tmp_path: Path, **policies: str) -> PolicyStore:
    directory = tmp_path / "mpol"
    directory.mkdir()
    for name, extra in policies.items():
        (directory / f"{name}.yaml").write_text(MPOL.format(name=name, extra=extra or "  # no extra settings"))
    return PolicyStore([str(directory)], evaluator_options={"background_username": BACKGROUND_USER})


def patched_labels(evaluator: Any, user: str = "alice") -> set[str]:
    body = review(pod(labels={"app": "x"}))
    body["request"]["userInfo"]["username"] = user
    decision = evaluator.mutate(parse_review(body))
    return {op["path"].rsplit("/", 1)[-1] for op in decision.patch}


def test_policies_with_target_constraints_leave_the_request_alone(tmp_path: Path) -> None:
    """Kyverno's NoTargetMatchConstraintPolicy: a policy that names targets mutates existing objects only."""
    targets = "  evaluation: {mutateExisting: {enabled: true}}\n  targetMatchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], resources: [configmaps]}"
    snapshot = store(tmp_path, own="", targeted=targets).load()
    assert patched_labels(snapshot.evaluator) == {"own"}


def test_background_requests_skip_policies_unless_they_opt_in(tmp_path: Path) -> None:
    """skipBackgroundRequests (default true): the background controller's requests are not mutated."""
    snapshot = store(tmp_path, skipping="", opted="  evaluation: {skipBackgroundRequests: false}").load()
    assert patched_labels(snapshot.evaluator) == {"skipping", "opted"}
    assert patched_labels(snapshot.evaluator, BACKGROUND_USER) == {"opted"}


def test_cluster_providers_reach_the_cel_evaluator(tmp_path: Path) -> None:
    """``resource.Get`` in a MutatingPolicy is answered by the providers the server wires in (the cluster)."""

    class Resources:
        def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
            return {"data": {"tier": "gold"}}

    directory = tmp_path / "p"
    directory.mkdir()
    (directory / "p.yaml").write_text(
        MPOL.format(name="tier", extra="  # no extra settings").replace(
            '"yes"', 'resource.Get("v1", "configmaps", object.metadata.namespace, "settings").data.tier'
        )
    )
    snapshot = PolicyStore([str(directory)], cel_providers={"resource": Resources()}).load()
    decision = snapshot.evaluator.mutate(parse_review(review(pod(labels={"app": "x"}))))
    assert decision.allowed and decision.patch == [{"op": "add", "path": "/metadata/labels/tier", "value": "gold"}]


def test_mutating_webhook_reviews_go_to_the_mutate_existing_controller() -> None:
    submitted: list[tuple[tuple[str, ...] | None, bool | None]] = []

    class Generator:
        def submit_mutating(self, review: Any, policies: tuple[str, ...] | None, namespaced: bool | None) -> None:
            submitted.append((policies, namespaced))

    request = parse_review(review(pod()))
    for path in ("/mpol/b/a", "/nmpol/ns/x", "/mutate", "/vpol/a", "/mutate/fail"):
        route = parse_route(path)
        assert route is not None
        _submit_mutating(Generator(), route, request)
    assert submitted == [(("a", "b"), False), (("ns", "x"), True), (None, None)]
    assert PolicyScope().family == "all"


def test_match_conditions_the_api_server_cannot_compile_stay_out_of_the_webhook() -> None:
    """Kyverno's validConditions: a CEL policy's matchConditions go into its webhook only when the API server's
    environment compiles every one; request.object, variables or Kyverno's libraries keep all of them out."""
    from stockade.controllers.webhookconfig import webhook_compatible_condition, webhook_match_conditions

    assert webhook_compatible_condition("request.namespace == 'dev' && object.metadata.labels['a'] == 'b'")
    assert webhook_compatible_condition("object.spec.containers.all(c, c.image.startsWith('x'))")
    assert webhook_compatible_condition("object.metadata.name == 'variables.x'")  # inside a string literal
    for expression in (
        "has(request.object.metadata.labels)",
        "variables.env == 'production'",
        "namespaceObject.metadata.name == 'x'",
        "object.spec.containers.all(c, string(c.image) in exceptions.allowedImages)",
        "image(object.spec.containers[0].image).registry() == 'x'",
    ):
        assert not webhook_compatible_condition(expression), expression
    good = {"name": "ns", "expression": "request.namespace == 'dev'"}
    assert webhook_match_conditions([good]) == [good]
    assert webhook_match_conditions([good, {"name": "v", "expression": "variables.x"}]) == []
