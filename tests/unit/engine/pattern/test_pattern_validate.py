"""Tree validation: anchors, arrays, skip semantics, and Kyverno's exact failure paths and messages."""

from typing import Any

import pytest

from stockade.engine.pattern import PatternFailure, validate_pattern


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "frontend"}},
        "spec": {"containers": list(containers), **spec},
    }


NGINX_LATEST = {"name": "nginx", "image": "nginx:latest"}
NGINX_PINNED = {"name": "nginx", "image": "nginx:1.25"}
SIDECAR = {"name": "sidecar", "image": "busybox:1.36"}


# -- plain keys and messages -----------------------------------------------------------------------------------


def test_match_returns_none() -> None:
    assert validate_pattern(pod(NGINX_PINNED), {"spec": {"containers": [{"image": "!*:latest"}]}}) is None


def test_scalar_mismatch_message_and_path() -> None:
    failure = validate_pattern(pod(NGINX_PINNED, NGINX_LATEST), {"spec": {"containers": [{"image": "!*:latest"}]}})
    assert failure == PatternFailure(
        "/spec/containers/1/image/",
        "resource value 'nginx:latest' does not match '!*:latest' at path /spec/containers/1/image/",
    )


def test_missing_field_is_compared_as_nil() -> None:
    failure = validate_pattern(pod(NGINX_PINNED), {"spec": {"containers": [{"imagePullPolicy": "Always"}]}})
    assert failure is not None and not failure.skip
    assert failure.path == "/spec/containers/0/imagePullPolicy/"
    assert failure.message == (
        "resource value '<nil>' does not match 'Always' at path /spec/containers/0/imagePullPolicy/"
    )


def test_star_value_requires_presence() -> None:
    pattern = {"metadata": {"labels": {"team": "*"}}}
    failure = validate_pattern(pod(NGINX_PINNED), pattern)
    assert failure == PatternFailure("/metadata/labels/", "/metadata/labels//team not found")
    resource = pod(NGINX_PINNED)
    resource["metadata"]["labels"]["team"] = "a"
    assert validate_pattern(resource, pattern) is None


def test_number_in_message_is_rendered_like_go() -> None:
    resource = {"spec": {"replicas": 1}}
    failure = validate_pattern(resource, {"spec": {"replicas": ">1"}})
    assert failure is not None
    assert failure.message == "resource value '1' does not match '>1' at path /spec/replicas/"
    failure = validate_pattern(resource, {"spec": {"replicas": 2000000}})
    assert failure is not None
    assert failure.message == "resource value '1' does not match '2e+06' at path /spec/replicas/"


def test_map_pattern_against_scalar_reports_structure() -> None:
    failure = validate_pattern({"spec": "oops"}, {"spec": {"a": "b"}})
    assert failure == PatternFailure(
        "/spec/",
        "pattern and resource have different structures. Path: /spec/. "
        "Expected map[string]interface {}, found string",
    )


def test_list_pattern_against_map() -> None:
    failure = validate_pattern({"spec": {"containers": {}}}, {"spec": {"containers": [{"name": "*"}]}})
    assert failure == PatternFailure(
        "/spec/containers/",
        "validation rule failed at path /spec/containers/, resource does not satisfy the expected overlay pattern",
    )


def test_scalar_pattern_against_list_checks_every_element() -> None:
    resource = {"spec": {"ports": [80, 8080]}}
    assert validate_pattern(resource, {"spec": {"ports": ">10"}}) is None
    failure = validate_pattern(resource, {"spec": {"ports": "<1000"}})
    assert failure is not None
    assert failure.message == "resource value '[80 8080]' does not match '<1000' at path /spec/ports/"


def test_scalar_first_array_pattern_applies_to_all_elements() -> None:
    resource = {"spec": {"args": ["--a", "--b"]}}
    assert validate_pattern(resource, {"spec": {"args": ["--*"]}}) is None
    assert validate_pattern(resource, {"spec": {"args": ["--a"]}}) is not None


def test_empty_pattern_array_is_an_error() -> None:
    failure = validate_pattern(pod(NGINX_PINNED), {"spec": {"containers": []}})
    assert failure == PatternFailure("/spec/containers/", "pattern Array empty")


def test_nested_arrays_compare_index_wise_and_need_enough_elements() -> None:
    resource = {"matrix": [["a", "b"], ["c"]]}
    assert validate_pattern(resource, {"matrix": [["?"], ["c"]]}) is None
    # a scalar-first inner pattern applies to every inner element
    assert validate_pattern(resource, {"matrix": [["a"], ["c"]]}) is not None
    failure = validate_pattern(resource, {"matrix": [["a"], ["c"], ["d"]]})
    # Kyverno reports this without a path, which makes it a rule error rather than a failure.
    assert failure == PatternFailure(
        "", "validate Array failed, array length mismatch, resource Array len is 2 and pattern Array len is 3"
    )


def test_empty_resource_array_matches_map_pattern() -> None:
    assert validate_pattern(pod(), {"spec": {"containers": [{"image": "nginx"}]}}) is None


# -- conditional anchors -----------------------------------------------------------------------------------------


def test_conditional_anchor_applies_siblings_only_when_condition_holds() -> None:
    pattern = {"spec": {"containers": [{"(name)": "nginx", "image": "!*:latest"}]}}
    assert validate_pattern(pod(SIDECAR, NGINX_PINNED), pattern) is None
    failure = validate_pattern(pod(SIDECAR, NGINX_LATEST), pattern)
    assert failure is not None and not failure.skip
    assert failure.path == "/spec/containers/1/image/"


def test_conditional_anchor_not_holding_anywhere_skips_with_all_reasons() -> None:
    pattern = {"spec": {"containers": [{"(name)": "db*", "image": "!*:latest"}]}}
    failure = validate_pattern(pod(NGINX_LATEST, SIDECAR), pattern)
    assert failure == PatternFailure(
        "",
        "conditional anchor mismatch: resource value 'nginx' does not match 'db*' at path /spec/containers/0/name/; "
        "conditional anchor mismatch: resource value 'sidecar' does not match 'db*' at path /spec/containers/1/name/",
        skip=True,
    )


def test_conditional_anchor_key_absent_skips() -> None:
    failure = validate_pattern(pod(NGINX_LATEST), {"spec": {"(hostNetwork)": True, "containers": [{"name": "x"}]}})
    assert failure == PatternFailure(
        "", "conditional anchor mismatch: conditional anchor key doesn't exist in the resource", skip=True
    )


def test_conditional_anchor_on_map_value() -> None:
    pattern = {
        "spec": {
            "containers": [
                {"(securityContext)": {"(privileged)": True}, "name": "allowed-*"},
            ]
        }
    }
    privileged = {"name": "bad", "image": "x", "securityContext": {"privileged": True}}
    unprivileged = {"name": "other", "image": "x", "securityContext": {"privileged": False}}
    failure = validate_pattern(pod(privileged, unprivileged), pattern)
    assert failure is not None and not failure.skip
    assert failure.path == "/spec/containers/0/name/"
    only_unprivileged = validate_pattern(pod(unprivileged), pattern)
    assert only_unprivileged is not None and only_unprivileged.skip


def test_anchors_are_evaluated_before_plain_keys() -> None:
    # The plain key would fail, but the condition fails first, so the element is skipped instead.
    pattern = {"spec": {"containers": [{"image": "nope", "(name)": "db"}]}}
    failure = validate_pattern(pod(NGINX_LATEST), pattern)
    assert failure is not None and failure.skip


def test_failed_sibling_condition_hides_other_anchor_errors() -> None:
    # "(name)" sorts before "=(image)"; once a sibling condition failed, the equality failure is ignored.
    pattern = {"spec": {"containers": [{"(name)": "db", "=(image)": "nope"}]}}
    failure = validate_pattern(pod(NGINX_LATEST), pattern)
    assert failure is not None and failure.skip


def test_skipped_and_applied_elements_mix() -> None:
    pattern = {"spec": {"containers": [{"(name)": "nginx", "image": "nginx:*"}]}}
    assert validate_pattern(pod(SIDECAR, NGINX_PINNED), pattern) is None


# -- global anchors -------------------------------------------------------------------------------------------


def test_global_anchor_mismatch_skips_whole_rule() -> None:
    pattern = {"spec": {"containers": [{"<(image)": "*:latest", "name": "only-this"}]}}
    failure = validate_pattern(pod(NGINX_PINNED), pattern)
    assert failure == PatternFailure(
        "",
        "global anchor mismatch: resource value 'nginx:1.25' does not match '*:latest' at path /spec/containers/0/image/",
        skip=True,
    )


def test_global_anchor_holding_enforces_siblings() -> None:
    pattern = {"spec": {"containers": [{"<(image)": "*:latest", "name": "only-this"}]}}
    failure = validate_pattern(pod(NGINX_LATEST), pattern)
    assert failure is not None and not failure.skip
    assert failure.path == "/spec/containers/0/name/"


def test_global_anchor_absent_key_is_ignored() -> None:
    pattern = {"spec": {"<(runtimeClassName)": "gvisor", "containers": [{"name": "nginx"}]}}
    assert validate_pattern(pod(NGINX_LATEST), pattern) is None


def test_global_anchor_deep_in_tree_skips_from_sibling_branch() -> None:
    # The subtree holding the global anchor is visited first, so its mismatch wins over other failures.
    pattern = {
        "metadata": {"name": "different"},
        "spec": {"containers": [{"<(image)": "*:latest"}]},
    }
    failure = validate_pattern(pod(NGINX_PINNED), pattern)
    assert failure is not None and failure.skip


# -- negation, equality, existence -----------------------------------------------------------------------------


def test_negation_anchor_forbids_key() -> None:
    pattern = {"spec": {"X(hostNetwork)": "null", "containers": [{"name": "*"}]}}
    assert validate_pattern(pod(NGINX_PINNED), pattern) is None
    failure = validate_pattern(pod(NGINX_PINNED, hostNetwork=False), pattern)
    assert failure == PatternFailure(
        "/spec/hostNetwork/", "negation anchor matched in resource: /spec/hostNetwork/ is not allowed"
    )


def test_negation_inside_condition_becomes_skip() -> None:
    pattern = {"spec": {"containers": [{"(securityContext)": {"X(privileged)": "null"}, "name": "x"}]}}
    container = {"name": "a", "securityContext": {"privileged": True}}
    failure = validate_pattern(pod(container), pattern)
    assert failure is not None and failure.skip


def test_equality_anchor_checks_only_when_present() -> None:
    pattern = {"spec": {"=(securityContext)": {"=(runAsNonRoot)": True}}}
    assert validate_pattern(pod(NGINX_PINNED), pattern) is None
    assert validate_pattern(pod(NGINX_PINNED, securityContext={}), pattern) is None
    assert validate_pattern(pod(NGINX_PINNED, securityContext={"runAsNonRoot": True}), pattern) is None
    failure = validate_pattern(pod(NGINX_PINNED, securityContext={"runAsNonRoot": False}), pattern)
    assert failure == PatternFailure(
        "/spec/securityContext/runAsNonRoot/",
        "resource value 'false' does not match 'true' at path /spec/securityContext/runAsNonRoot/",
    )


def test_equality_anchor_on_list_of_maps() -> None:
    pattern = {"spec": {"=(volumes)": [{"X(hostPath)": "null"}]}}
    assert validate_pattern(pod(NGINX_PINNED), pattern) is None
    assert validate_pattern(pod(NGINX_PINNED, volumes=[{"name": "v", "emptyDir": {}}]), pattern) is None
    failure = validate_pattern(pod(NGINX_PINNED, volumes=[{"name": "v", "hostPath": {"path": "/"}}]), pattern)
    assert failure is not None and failure.path == "/spec/volumes/0/hostPath/"


def test_existence_anchor_needs_one_matching_element_per_pattern_item() -> None:
    pattern = {"spec": {"^(containers)": [{"image": "nginx:*"}]}}
    assert validate_pattern(pod(SIDECAR, NGINX_PINNED), pattern) is None
    failure = validate_pattern(pod(SIDECAR), pattern)
    assert failure == PatternFailure(
        "/spec/containers/", "existence anchor validation failed at path /spec/containers/"
    )
    assert validate_pattern({"spec": {}}, pattern) is None  # absent key: nothing to check


def test_existence_anchor_type_errors() -> None:
    failure = validate_pattern({"spec": {"containers": {"a": 1}}}, {"spec": {"^(containers)": [{"a": 1}]}})
    assert failure is not None
    assert failure.message == (
        "invalid resource type map[string]interface {}: Existence ^ () anchor can be used only on list/array type resource"
    )
    failure = validate_pattern(pod(SIDECAR), {"spec": {"^(containers)": {"name": "x"}}})
    assert failure is not None
    assert failure.message == (
        "invalid pattern type map[string]interface {}: Pattern has to be of list to compare against resource"
    )


def test_add_if_not_present_anchor_is_looked_up_literally_in_validation() -> None:
    # "+(key)" is a mutation anchor; validation treats the whole text as a key, so a non-nil pattern fails.
    failure = validate_pattern(pod(NGINX_PINNED), {"spec": {"+(dnsPolicy)": "Default"}})
    assert failure is not None
    assert failure.path == "/spec/+(dnsPolicy)/"
    assert validate_pattern(pod(NGINX_PINNED), {"spec": {"+(dnsPolicy)": None}}) is None


def test_error_while_a_tracked_anchor_key_is_absent_has_no_path() -> None:
    # Kyverno turns a failure into a rule error (empty path) when a tracked anchor key never occurred.
    pattern = {"spec": {"^(volumes)": [{"name": "data"}], "containers": [{"name": "nginx"}]}}
    with_volumes = pod(NGINX_PINNED, SIDECAR, volumes=[{"name": "data"}])
    failure = validate_pattern(with_volumes, pattern)
    assert failure is not None and failure.path == "/spec/containers/1/name/"
    failure = validate_pattern(pod(NGINX_PINNED, SIDECAR), pattern)
    assert failure == PatternFailure(
        "", "resource value 'sidecar' does not match 'nginx' at path /spec/containers/1/name/"
    )


def test_subtrees_with_anchors_are_checked_first() -> None:
    pattern = {"spec": {"containers": [{"name": "nginx"}], "volumes": [{"(csi)": {"driver": "x"}}]}}
    failure = validate_pattern(pod(SIDECAR, volumes=[{"name": "v"}]), pattern)
    assert failure is not None and failure.skip  # "volumes" ran first and skipped the rule


# -- metadata wildcards ---------------------------------------------------------------------------------------


def test_wildcard_label_keys_expand_against_resource() -> None:
    pattern = {"metadata": {"labels": {"ti*": "frontend"}}}
    assert validate_pattern(pod(NGINX_PINNED), pattern) is None
    failure = validate_pattern(pod(NGINX_PINNED), {"metadata": {"labels": {"ti*": "backend"}}})
    assert failure is not None and failure.path == "/metadata/labels/tier/"


def test_wildcard_label_key_without_match_stays_literal() -> None:
    failure = validate_pattern(pod(NGINX_PINNED), {"metadata": {"labels": {"owner*": "?*"}}})
    assert failure is not None and failure.path == "/metadata/labels/owner*/"


def test_pattern_is_not_modified() -> None:
    pattern = {"metadata": {"labels": {"ti*": "frontend"}}, "spec": {"containers": [{"(name)": "x"}]}}
    snapshot = repr(pattern)
    validate_pattern(pod(NGINX_PINNED), pattern)
    assert repr(pattern) == snapshot


# -- compiled patterns reused across resources -------------------------------------------------------------------


@pytest.mark.parametrize(
    "leaf, values",
    [
        # Kyverno decodes into interface{}: a bool never satisfies a number pattern, nor a number a bool pattern,
        # although Python has True == 1 and False == 0
        (1, [(True, False), (1, True), (1.0, True), ("1", True), (True, False)]),
        (False, [(0, False), (False, True), ("false", False), (0, False), (False, True)]),
        ("true", [(True, True), ("true", True), (1, False), (True, True)]),
        (None, [(0, True), ("", True), (False, True), ("x", False), (None, True), (1, False)]),
    ],
)
def test_a_policy_owned_pattern_gives_each_value_its_own_verdict_across_resources(leaf: Any, values: list[tuple[Any, bool]]) -> None:
    """One policy pattern, compiled once, is walked for every review: a value seen earlier must not decide the
    verdict for another value that Python considers equal."""
    pattern = {"spec": {"value": leaf}}
    for value, matches in values:
        failure = validate_pattern({"spec": {"value": value}}, pattern, policy_owned=True)
        assert (failure is None) is matches, (leaf, value)
