"""request.roles / request.clusterRoles: which bindings count, caching, and use by match blocks and variables."""

from __future__ import annotations

from typing import Any

from stockade.controllers.userroles import RoleResolver, roles_for
from stockade.engine.engine import Engine
from stockade.engine.match import RequestInfo
from stockade.policy.model import KyvernoPolicy
from stockade.webhook.admission import AdmissionEvaluator, parse_review
from tests.unit.kubefake import FakeKube


def binding(namespace: str, kind: str, role: str, *subjects: dict[str, str]) -> dict[str, Any]:
    metadata = {"name": f"{role}-binding", **({"namespace": namespace} if namespace else {})}
    return {"metadata": metadata, "roleRef": {"kind": kind, "name": role}, "subjects": list(subjects)}


ALICE = RequestInfo(username="alice", groups=("devs", "system:authenticated"))
ROBOT = RequestInfo(username="system:serviceaccount:ci:builder")
ROLE_BINDINGS = [
    binding("team-a", "Role", "editor", {"kind": "User", "name": "alice"}),
    binding("team-b", "Role", "viewer", {"kind": "Group", "name": "devs"}),
    binding("team-a", "ClusterRole", "admin", {"kind": "User", "name": "alice"}),
    binding("team-b", "ClusterRole", "edit", {"kind": "User", "name": "alice"}),
    binding("ci", "Role", "deployer", {"kind": "ServiceAccount", "name": "builder"}),
    binding("team-a", "Role", "pusher", {"kind": "ServiceAccount", "name": "builder", "namespace": "ci"}),
    binding("team-a", "Role", "other", {"kind": "User", "name": "bob"}),
]
CLUSTER_ROLE_BINDINGS = [
    binding("", "ClusterRole", "cluster-viewer", {"kind": "Group", "name": "system:authenticated"}),
    binding("", "ClusterRole", "sa-reader", {"kind": "ServiceAccount", "name": "builder", "namespace": "ci"}),
]


def test_roles_follow_kyverno_binding_rules() -> None:
    roles, cluster_roles = roles_for(ALICE, "team-a", ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)
    assert roles == ("team-a:editor", "team-b:viewer")
    # a RoleBinding's ClusterRole counts only in the request's namespace
    assert cluster_roles == ("admin", "cluster-viewer")
    assert roles_for(ROBOT, "ci", ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS) == (("ci:deployer", "team-a:pusher"), ("sa-reader",))
    assert roles_for(RequestInfo(username="nobody"), "team-a", ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS) == ((), ())


ROLE_BINDINGS_PATH = "/apis/rbac.authorization.k8s.io/v1/rolebindings"  # every namespace


def fake_rbac() -> FakeKube:
    kube = FakeKube()
    kube.on("GET", ROLE_BINDINGS_PATH, {"kind": "RoleBindingList", "items": ROLE_BINDINGS})
    kube.on("GET", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {"kind": "ClusterRoleBindingList", "items": CLUSTER_ROLE_BINDINGS})
    return kube


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_resolver_caches_bindings_for_its_ttl() -> None:
    kube, clock = fake_rbac(), ManualClock()
    resolver = RoleResolver(None, ttl_seconds=10, client=kube, clock=clock)
    assert resolver.needs_fetch("team-a")
    assert resolver(ALICE, "team-a") == (("team-a:editor", "team-b:viewer"), ("admin", "cluster-viewer"))
    kube.on("GET", ROLE_BINDINGS_PATH, {"kind": "RoleBindingList", "items": []})  # revoked, but still cached
    clock.now = 5
    assert not resolver.needs_fetch("team-a")
    assert resolver(ALICE, "team-a")[0] == ("team-a:editor", "team-b:viewer") and len(kube.sent("GET", ROLE_BINDINGS_PATH)) == 1
    clock.now = 11
    assert resolver.needs_fetch("team-a")
    assert resolver(ALICE, "team-a")[0] == () and len(kube.sent("GET", ROLE_BINDINGS_PATH)) == 2


POLICIES = [
    KyvernoPolicy(
        {
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "editors-only-block"},
            "spec": {
                "validationFailureAction": "Enforce",
                "rules": [
                    {
                        "name": "editors-need-owner",
                        "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}, "roles": ["team-a:editor"]}]},
                        "validate": {"message": "editors must set owner; roles {{ request.roles }}", "pattern": {"metadata": {"labels": {"owner": "?*"}}}},
                    }
                ],
            },
        }
    )
]


def config_map_review(user: str, namespace: str = "team-a") -> Any:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}}
    return parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "namespace": namespace,
                "name": "c",
                "userInfo": {"username": user, "groups": ["devs"]},
                "object": obj,
            },
        }
    )


def test_evaluator_fills_roles_for_match_blocks_and_variables() -> None:
    lookups: list[tuple[str, str]] = []

    def resolver(user: RequestInfo, namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        lookups.append((user.username, namespace))
        return roles_for(user, namespace, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)

    evaluator = AdmissionEvaluator(Engine(), POLICIES, role_resolver=resolver)
    assert evaluator.needs_roles
    denied = evaluator.validate(config_map_review("alice"))
    assert denied.allowed is False and 'roles ["team-a:editor","team-b:viewer"]' in denied.message
    assert evaluator.validate(config_map_review("bob")).allowed is True
    assert lookups == [("alice", "team-a"), ("bob", "team-a")]
    # without a resolver, the role filter cannot match: the request is admitted
    assert AdmissionEvaluator(Engine(), POLICIES).validate(config_map_review("alice")).allowed is True


def test_roles_are_not_looked_up_when_no_policy_uses_them() -> None:
    plain = KyvernoPolicy({**POLICIES[0].raw, "spec": {"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]}, "validate": {"pattern": {"metadata": {"name": "?*"}}}}]}})

    def resolver(user: RequestInfo, namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        raise AssertionError("roles looked up although no policy uses them")

    evaluator = AdmissionEvaluator(Engine(), [plain], role_resolver=resolver)
    assert not evaluator.needs_roles
    assert evaluator.validate(config_map_review("alice")).allowed is True
