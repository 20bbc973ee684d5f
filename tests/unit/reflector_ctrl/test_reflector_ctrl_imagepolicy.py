"""ImagePolicy reconcile: selection, digest reflection matrix, events, failures that keep latestRef, migration."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.images.registry import RegistryError
from stockade.reflector.imagepolicy import ImagePolicyReconciler, ready_message
from stockade.reflector.models import ImageRef, ObjectKey, condition
from stockade.reflector.repository import ImageRepositoryReconciler

IMAGE = "ghcr.io/org/podinfo"
PATH = "org/podinfo"


def digest(n: int) -> str:
    return "sha256:" + f"{n:x}".rjust(64, "0")


def repository(image: str = IMAGE, namespace: str = "apps", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImageRepository",
        "metadata": {"name": "podinfo", "namespace": namespace},
        "spec": {"image": image, "interval": "1m", **spec},
    }


def policy(policy_spec: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImagePolicy",
        "metadata": {"name": "podinfo", "namespace": "apps", "generation": 2},
        "spec": {"imageRepositoryRef": {"name": "podinfo"}, "policy": policy_spec or {"semver": {"range": "v1.x"}}, **spec},
    }


class World:
    """A scanned repository in a store plus a policy reconciler sharing the fake registry."""

    def __init__(self, store, registry, clock, tags: list[str], repo: dict[str, Any] | None = None) -> None:  # type: ignore[no-untyped-def]
        self.store, self.registry, self.clock = store, registry, clock
        for number, tag in enumerate(tags, start=1):
            registry.push(PATH, tag, digest(number))
        self.repo = repo or repository()
        self.scan()
        self.policies = ImagePolicyReconciler(store, self.lookup, client_factory=registry.factory, clock=clock)

    def lookup(self, key: ObjectKey) -> dict[str, Any] | None:
        return self.repo if key == ObjectKey("apps", "podinfo") else None

    def scan(self) -> None:
        self.repo = ImageRepositoryReconciler(self.store, client_factory=self.registry.factory, clock=self.clock).reconcile(self.repo, force=True).object

    def repush(self, offset: int = 100) -> None:
        for key in list(self.registry.digests):
            self.registry.digests[key] = digest(int(self.registry.digests[key].split(":")[1], 16) + offset)


TAGS = ["v1.0.0", "v1.1.0", "v1.1.1", "v2.0.0"]


@pytest.fixture()
def world(store, registry, clock) -> World:  # type: ignore[no-untyped-def]
    return World(store, registry, clock, TAGS)


def latest(result) -> ImageRef | None:  # type: ignore[no-untyped-def]
    return ImageRef.from_dict(result.status.get("latestRef"))


def previous(result) -> ImageRef | None:  # type: ignore[no-untyped-def]
    return ImageRef.from_dict(result.status.get("observedPreviousRef"))


def test_semver_policy_resolves_without_digest_by_default(world: World) -> None:
    result = world.policies.reconcile(policy())
    assert result.ready and latest(result) == ImageRef(IMAGE, "v1.1.1")
    assert "digest" not in result.status["latestRef"]
    assert condition(result.object, "Ready")["message"] == f"Latest image tag for {IMAGE} resolved to v1.1.1"
    assert world.registry.digest_calls == []
    assert result.status["observedGeneration"] == 2 and result.requeue_after is None


def test_digest_is_fetched_for_the_elected_tag_only(world: World) -> None:
    result = world.policies.reconcile(policy(digestReflectionPolicy="IfNotPresent"))
    assert latest(result) == ImageRef(IMAGE, "v1.1.1", digest(3))
    assert world.registry.digest_calls == [f"{PATH}:v1.1.1"]
    assert condition(result.object, "Ready")["message"].endswith(f"resolved to v1.1.1 with digest {digest(3)}")


# Flux's two-pass matrix: (first policy, second policy, second range) -> expectations after a re-push.
@pytest.mark.parametrize(
    "first, second, second_range, want_digest, want_previous",
    [
        ("Never", "Never", "v1.x", "", None),
        ("Always", "Always", "v1.x", digest(103), ("v1.1.1", digest(3))),
        ("IfNotPresent", "IfNotPresent", "v2.x", digest(104), ("v1.1.1", digest(3))),
        ("IfNotPresent", "IfNotPresent", "v1.x", digest(3), None),
        ("Never", "IfNotPresent", "v1.x", digest(103), ("v1.1.1", "")),
        ("Always", "Never", "v1.x", "", ("v1.1.1", digest(3))),
        ("IfNotPresent", "Never", "v1.x", "", ("v1.1.1", digest(3))),
        ("IfNotPresent", "Always", "v1.x", digest(103), ("v1.1.1", digest(3))),
        ("Always", "IfNotPresent", "v1.x", digest(3), None),
    ],
)
def test_digest_reflection_two_pass_matrix(world: World, first: str, second: str, second_range: str, want_digest: str, want_previous) -> None:  # type: ignore[no-untyped-def]
    def spec(mode: str, rng: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"digestReflectionPolicy": mode}
        if mode == "Always":
            extra["interval"] = "10m"
        return policy({"semver": {"range": rng}}, **extra)

    one = world.policies.reconcile(spec(first, "v1.x"))
    assert one.ready
    world.repush()
    obj = spec(second, second_range)
    obj["status"] = copy.deepcopy(one.status)
    two = world.policies.reconcile(obj)
    assert two.ready
    assert (latest(two).digest if latest(two) else None) == want_digest
    got_previous = previous(two)
    assert (None if got_previous is None else (got_previous.tag, got_previous.digest)) == want_previous
    if second == "Always":
        assert two.requeue_after == 600


def test_digest_change_under_same_tag_is_a_normal_event(world: World) -> None:
    spec = policy(digestReflectionPolicy="Always", interval="1m")
    one = world.policies.reconcile(spec)
    unchanged = world.policies.reconcile({**spec, "status": one.status})
    assert unchanged.events[-1].type == "Trace"
    world.repush()
    two = world.policies.reconcile({**spec, "status": unchanged.status})
    event = two.events[-1]
    assert event.type == "Normal" and event.reason == "Succeeded"
    assert event.message == (
        f"Latest image tag for {IMAGE} resolved to v1.1.1 with digest {digest(103)} (previously {IMAGE}:v1.1.1@{digest(3)})"
    )


def test_ready_message_omits_previous_when_equal() -> None:
    ref = ImageRef("img", "1", "")
    assert ready_message(ref, ref) == "Latest image tag for img resolved to 1"
    assert ready_message(ImageRef("a", "2"), ImageRef("b", "1", "sha256:x")) == "Latest image tag for a resolved to 2 (previously b:1@sha256:x)"


def test_always_without_interval_stalls(world: World) -> None:
    result = world.policies.reconcile(policy(digestReflectionPolicy="Always"))
    assert result.stalled and condition(result.object, "Stalled")["reason"] == "IntervalNotConfigured"
    assert "spec.interval must be set" in condition(result.object, "Ready")["message"]
    assert result.requeue_after is None


@pytest.mark.parametrize("spec", [{"interval": "1m"}, {"interval": "1m", "digestReflectionPolicy": "Never"},
                                  {"interval": "1m", "digestReflectionPolicy": "IfNotPresent"}])
def test_interval_without_always_is_ignored_with_flux_wording(world: World, spec: dict[str, Any]) -> None:
    """Flux's reconciler only reads spec.interval under Always (GetInterval is 0 otherwise): no stall, no requeue."""
    result = world.policies.reconcile(policy(**spec))
    assert result.ready and not result.stalled
    assert result.requeue_after is None
    assert result.warnings == ["spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"]


def test_unknown_reflection_mode_stalls(world: World) -> None:
    result = world.policies.reconcile(policy(digestReflectionPolicy="Sometimes"))
    assert result.stalled and condition(result.object, "Ready")["reason"] == "InvalidPolicy"


def test_no_tags_waits_for_the_repository(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    world = World(store, registry, clock, [])
    result = world.policies.reconcile(policy())
    assert condition(result.object, "Ready")["reason"] == "DependencyNotReady"
    assert "no tags in database" in result.error and result.requeue_after == 30


def test_missing_repository_is_dependency_not_ready(world: World) -> None:
    obj = policy()
    obj["spec"]["imageRepositoryRef"] = {"name": "nope"}
    result = world.policies.reconcile(obj)
    assert condition(result.object, "Ready")["reason"] == "DependencyNotReady" and not result.stalled


def test_invalid_repository_image_stalls_policy_but_keeps_latest_ref(world: World) -> None:
    good = world.policies.reconcile(policy())
    world.repo["spec"]["image"] = "oci://ghcr.io/org/podinfo"
    result = world.policies.reconcile({**policy(), "status": good.status})
    assert result.stalled and condition(result.object, "Stalled")["reason"] == "ImageURLInvalid"
    assert latest(result) == ImageRef(IMAGE, "v1.1.1")


def test_failing_repository_scan_keeps_policy_on_stored_tags(world: World) -> None:
    world.registry.fail_with = RegistryError("connection refused")
    world.scan()
    assert condition(world.repo, "Ready")["reason"] == "ReadOperationFailed"
    result = world.policies.reconcile(policy())
    assert result.ready and latest(result) == ImageRef(IMAGE, "v1.1.1")


def test_digest_failure_keeps_previous_latest_ref(world: World) -> None:
    good = world.policies.reconcile(policy(digestReflectionPolicy="IfNotPresent"))
    world.registry.push(PATH, "v1.2.0", digest(50))
    world.scan()
    world.registry.fail_with = RegistryError("HTTP 500")
    result = world.policies.reconcile({**policy(digestReflectionPolicy="IfNotPresent"), "status": good.status})
    assert condition(result.object, "Ready")["reason"] == "Failed"
    assert result.error.startswith(f"failed fetching digest of {IMAGE}:v1.2.0: ")
    assert latest(result) == ImageRef(IMAGE, "v1.1.1", digest(3))
    assert result.events[-1].type == "Warning"


@pytest.mark.parametrize(
    "policy_spec, filter_tags, message",
    [({"semver": {"range": "not a range"}}, None, "invalid policy"), ({"semver": {"range": "*"}}, {"pattern": "^test-(.*"}, "failed to filter tags"), ({}, None, "ImagePolicyChoice")],
)
def test_invalid_policy_stalls(world: World, policy_spec, filter_tags, message) -> None:  # type: ignore[no-untyped-def]
    extra = {"filterTags": filter_tags} if filter_tags else {}
    obj = policy(policy_spec, **extra)
    obj["spec"]["policy"] = policy_spec
    result = world.policies.reconcile(obj)
    assert result.stalled and condition(result.object, "Ready")["reason"] == "InvalidPolicy"
    assert message in condition(result.object, "Ready")["message"]


def test_numerical_with_non_numbers_fails_and_keeps_latest(world: World) -> None:
    good = world.policies.reconcile(policy())
    result = world.policies.reconcile({**policy({"numerical": {"order": "asc"}}), "status": good.status})
    assert condition(result.object, "Ready")["reason"] == "Failure" and not result.stalled
    assert "failed to parse invalid numeric value" in result.error
    assert latest(result) == ImageRef(IMAGE, "v1.1.1")


def test_no_matching_tag_is_a_failure(world: World) -> None:
    result = world.policies.reconcile(policy({"semver": {"range": ">=5.0.0"}}))
    assert result.error == "unable to determine latest version from provided list"


# Flux controller test vectors (filterTags + extract across the three policy kinds).
@pytest.mark.parametrize(
    "tags, policy_spec, filter_tags, expected",
    [
        (["test-0.1.0", "test-0.1.1", "dev-0.2.0", "1.0.0", "1.0.1", "1.0.2", "1.1.0-alpha"], {"semver": {"range": ">=0.x"}}, {"pattern": "^test-(.*)$", "extract": "$1"}, "test-0.1.1"),
        (["1.0.0", "1.0.0-rc.1", "1.0.0-rc.2", "1.0.0-rc.3", "1.0.1-rc.2"], {"numerical": {"order": "asc"}}, {"pattern": "1.0.0-rc\\.(?P<num>[0-9]+)", "extract": "$num"}, "1.0.0-rc.3"),
        (["foo-aaa", "bar-bbb", "foo-zzz", "baz-nnn", "foo-ooo"], {"alphabetical": {"order": "asc"}}, {"pattern": "foo-(?P<word>[a-z]+)", "extract": "$word"}, "foo-zzz"),
        (["16.04", "16.04.1", "16.10", "20.04", "20.10"], {"alphabetical": {"order": "desc"}}, None, "16.04"),
    ],
)
def test_flux_filter_examples(store, registry, clock, tags, policy_spec, filter_tags, expected) -> None:  # type: ignore[no-untyped-def]
    world = World(store, registry, clock, tags)
    obj = policy(policy_spec, **({"filterTags": filter_tags} if filter_tags else {}))
    result = world.policies.reconcile(obj)
    assert result.ready and latest(result).tag == expected


def test_old_status_with_latest_image_migrates(world: World) -> None:
    obj = policy(digestReflectionPolicy="IfNotPresent")
    obj["status"] = {"latestImage": f"{IMAGE}:v1.1.0", "observedPreviousImage": f"{IMAGE}:v1.0.0"}
    result = world.policies.reconcile(obj)
    assert result.ready
    assert "latestImage" not in result.status and "observedPreviousImage" not in result.status
    assert latest(result) == ImageRef(IMAGE, "v1.1.1", digest(3))
    assert previous(result) == ImageRef(IMAGE, "v1.1.0")


def test_migrated_status_with_same_tag_is_not_a_change(world: World) -> None:
    obj = policy()
    obj["status"] = {"latestImage": f"{IMAGE}:v1.1.1"}
    result = world.policies.reconcile(obj)
    assert latest(result) == ImageRef(IMAGE, "v1.1.1") and previous(result) is None


def test_cross_namespace_needs_access_from(store, registry, clock) -> None:  # type: ignore[no-untyped-def]
    world = World(store, registry, clock, TAGS)
    obj = policy()
    obj["metadata"]["namespace"] = "team-a"
    obj["spec"]["imageRepositoryRef"] = {"name": "podinfo", "namespace": "apps"}
    denied = world.policies.reconcile(obj)
    assert condition(denied.object, "Ready")["reason"] == "AccessDenied"
    world.repo["spec"]["accessFrom"] = {"namespaceSelectors": [{"matchLabels": {}}]}
    assert world.policies.reconcile(obj).ready


def test_suspended_policy_is_untouched(world: World) -> None:
    result = world.policies.reconcile(policy(suspend=True))
    assert "latestRef" not in result.status and "conditions" not in result.status


def test_reconcile_request_is_marked_handled_even_when_failing(world: World) -> None:
    obj = policy()
    obj["metadata"]["annotations"] = {"reconcile.fluxcd.io/requestedAt": "2025-01-01T00:00:00Z"}
    assert world.policies.reconcile(obj).status["lastHandledReconcileAt"] == "2025-01-01T00:00:00Z"
    obj["spec"]["imageRepositoryRef"] = {"name": "nope"}
    failed = world.policies.reconcile(obj)
    assert not failed.ready and failed.status["lastHandledReconcileAt"] == "2025-01-01T00:00:00Z"
