"""Subresource reviews are matched the way Kyverno matches them: by the kind served at ``request.resource`` (its
top-level GVK, found through discovery) plus ``request.subResource``, not by ``request.kind``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from stockade.controllers.registration import NamespaceLabelCache, ServedKinds
from stockade.engine.engine import Engine
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionEvaluator, kind_lookup_pending, labels_namespace, parse_review, top_level_kind

RESTRICT_SCALE = KyvernoPolicy(
    yaml.safe_load(
        """
apiVersion: kyverno.io/v2beta1
kind: ClusterPolicy
metadata: {name: restrict-scale}
spec:
  validationFailureAction: Enforce
  background: false
  rules:
  - name: scale-max-eight
    match: {any: [{resources: {kinds: [Deployment/scale]}}]}
    validate:
      message: The replica count for this Deployment may not exceed 8.
      pattern:
        (status):
          (selector): "*type=monitoring*"
        spec:
          replicas: <9
"""
    )
)


def deny_kinds(*kinds: str) -> KyvernoPolicy:
    return KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "block-ephemeral-containers"},
            "spec": {"rules": [{"name": "deny-debug", "match": {"any": [{"resources": {"kinds": list(kinds)}}]}, "validate": {"failureAction": "Enforce", "deny": {}}}]},
        }
    )


def scale(replicas: int, selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "labelled-deployment", "namespace": "test-anchors"},
        "spec": {"replicas": replicas},
        "status": {"replicas": 1, "selector": selector},
    }


def scale_review(replicas: int, selector: str = "app=busybox,type=monitoring") -> dict[str, Any]:
    """What the API server sends for ``kubectl scale deployment labelled-deployment --replicas N``."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "subResource": "scale",
            "requestKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "name": "labelled-deployment",
            "namespace": "test-anchors",
            "operation": "UPDATE",
            "userInfo": {"username": "admin"},
            "object": scale(replicas, selector),
            "oldObject": scale(1, selector),
        },
    }


def debug_review() -> dict[str, Any]:
    """``kubectl debug --image=busybox foo``: an UPDATE of pods/ephemeralcontainers whose kind is Pod."""
    old = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foo", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    new = {**old, "spec": {**old["spec"], "ephemeralContainers": [{"name": "debugger", "image": "busybox"}]}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u2",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "ephemeralcontainers",
            "name": "foo",
            "namespace": "default",
            "operation": "UPDATE",
            "userInfo": {"username": "admin"},
            "object": new,
            "oldObject": old,
        },
    }


SERVED = {("apps", "v1", "deployments"): "Deployment", ("", "v1", "pods"): "Pod"}


def served(group: str, version: str, plural: str) -> str | None:
    return SERVED.get((group, version, plural))


def test_scale_review_matches_deployment_scale_by_its_resource() -> None:
    """Kyverno's withTopLevelGVK: a deployments/scale review (kind autoscaling/v1 Scale) matches `Deployment/scale`;
    the old Scale object does not (Kyverno re-matches it with no subresource), so the violation is not 'pre-existing'."""
    evaluator = AdmissionEvaluator(Engine(), [RESTRICT_SCALE], kind_resolver=served)
    denied = evaluator.validate(parse_review(scale_review(9)))
    assert not denied.allowed and "scale-max-eight failed at path /spec/replicas/" in denied.message
    assert evaluator.validate(parse_review(scale_review(2))).allowed
    assert evaluator.validate(parse_review(scale_review(9, selector="app=busybox"))).allowed  # conditional anchor unmet


def test_without_discovery_the_review_keeps_its_own_kind() -> None:
    request = parse_review(scale_review(9))
    assert top_level_kind(request, None).kind == "Scale"
    assert AdmissionEvaluator(Engine(), [RESTRICT_SCALE]).validate(request).allowed


@pytest.mark.parametrize("kind", ["Pod/ephemeralcontainers", "*/ephemeralcontainers"])
def test_kubectl_debug_is_denied_by_ephemeral_container_policies(kind: str) -> None:
    evaluator = AdmissionEvaluator(Engine(), [deny_kinds(kind)], kind_resolver=served)
    decision = evaluator.validate(parse_review(debug_review()))
    assert not decision.allowed and "deny-debug" in decision.message


def test_namespace_review_looks_up_no_namespace_labels() -> None:
    """Kyverno reads namespace labels only for namespaced kinds other than Namespace: a Namespace review names
    itself as namespace, and on CREATE that namespace does not exist yet."""
    looked_up: list[str] = []

    def labels(namespace: str) -> dict[str, str]:
        looked_up.append(namespace)
        return {}

    namespace_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh", "labels": {"team": "a"}}}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u3",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "fresh",
            "namespace": "fresh",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": namespace_object,
        },
    }
    request = parse_review(body)
    assert labels_namespace(request) == ""
    evaluator = AdmissionEvaluator(Engine(), [deny_kinds("ConfigMap")], labels)
    assert evaluator.validate(request).allowed and looked_up == []


class FakeApiClient:
    """The two calls ``get_json`` makes, answering discovery of apps/v1 and counting GETs."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def request(self, method: str, path: str, **_: Any) -> Any:
        import json

        self.paths.append(path)
        listing = {"resources": [{"name": "deployments", "kind": "Deployment"}, {"name": "deployments/scale", "kind": "Scale"}]}

        class Response:
            status = 200 if path == "/apis/apps/v1" else 404
            reason = ""
            headers: dict[str, str] = {}
            data = json.dumps(listing).encode()

        return Response()


def test_served_kinds_fetches_one_group_version_once() -> None:
    api = FakeApiClient()
    kinds = ServedKinds(api, refresh_seconds=3600)
    request = parse_review(scale_review(9))
    assert kind_lookup_pending(request, kinds)
    assert top_level_kind(request, kinds).kind == "Deployment"
    assert not kind_lookup_pending(request, kinds)
    assert kinds("apps", "v1", "deployments") == "Deployment" and kinds("apps", "v1", "nope") is None
    assert kinds("example.io", "v1", "widgets") is None and kinds("example.io", "v1", "widgets") is None
    assert api.paths == ["/apis/apps/v1", "/apis/example.io/v1"]


def test_missing_namespace_is_a_debug_line_without_the_http_dump(caplog: pytest.LogCaptureFixture) -> None:
    from tests.unit.kubefake import FakeKube

    cache = NamespaceLabelCache(None)
    cache.client = FakeKube()  # type: ignore[assignment]  # holds no Namespace: GET answers NotFound
    with caplog.at_level(logging.DEBUG, logger="stockade.controllers"):
        assert cache("gone") == {"kubernetes.io/metadata.name": "gone"}
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.DEBUG, "namespace gone not found; matching with its name label only")]
