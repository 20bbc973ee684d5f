"""patchesJson6902 with the evanphx/json-patch options Kyverno turns on."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stockade.engine.mutate import KUBERNETES_OPTIONS, PatchError, apply_json6902, diff_json_patch


def service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 80}, {"port": 443}]}}


def test_yaml_string_json_string_and_list_inputs_agree() -> None:
    yaml_text = "- op: add\n  path: /metadata/labels\n  value:\n    a: b\n"
    json_text = '[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]'
    as_list = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    results = [apply_json6902(service(), patch) for patch in (yaml_text, json_text, as_list)]
    assert results[0] == results[1] == results[2]
    assert results[0]["metadata"]["labels"] == {"a": "b"}


def test_input_is_not_modified() -> None:
    resource = service()
    snapshot = copy.deepcopy(resource)
    apply_json6902(resource, [{"op": "remove", "path": "/spec/ports/0"}])
    assert resource == snapshot


def test_add_creates_missing_parent_objects() -> None:
    patched = apply_json6902(service(), [{"op": "add", "path": "/metadata/annotations/a~1b", "value": "v"}])
    assert patched["metadata"]["annotations"] == {"a/b": "v"}


def test_add_creates_missing_parent_array_for_index_token() -> None:
    patched = apply_json6902(service(), [{"op": "add", "path": "/spec/extra/-", "value": 1}])
    assert patched["spec"]["extra"] == [1]


def test_negative_index_counts_from_the_end() -> None:
    patched = apply_json6902(service(), [{"op": "add", "path": "/spec/ports/-1", "value": {"port": 8080}},
                                         {"op": "replace", "path": "/spec/ports/-2", "value": {"port": 444}}])
    assert patched["spec"]["ports"] == [{"port": 80}, {"port": 444}, {"port": 8080}]


def test_remove_of_missing_path_is_a_no_op() -> None:
    resource = service()
    patched = apply_json6902(resource, [{"op": "remove", "path": "/metadata/labels/x"},
                                        {"op": "remove", "path": "/spec/ports/9"}])
    assert patched == resource


def test_replace_of_missing_key_fails_with_library_message() -> None:
    with pytest.raises(PatchError) as raised:
        apply_json6902(service(), [{"op": "replace", "path": "/metadata/labels", "value": {}}])
    assert str(raised.value) == ("replace operation does not apply: doc is missing key: "
                                 "/metadata/labels: missing value")


def test_add_beyond_array_end_fails() -> None:
    with pytest.raises(PatchError, match="Unable to access invalid index: 5"):
        apply_json6902(service(), [{"op": "add", "path": "/spec/ports/5", "value": 1}])


def test_failed_test_operation_stops_the_patch() -> None:
    with pytest.raises(PatchError, match="testing value /metadata/name failed: test failed"):
        apply_json6902(service(), [{"op": "test", "path": "/metadata/name", "value": "other"}])
    passed = apply_json6902(service(), [{"op": "test", "path": "/metadata/name", "value": "svc"}])
    assert passed == service()


def test_move_and_copy() -> None:
    patched = apply_json6902(service(), [{"op": "copy", "from": "/spec/ports/0", "path": "/spec/first"},
                                         {"op": "move", "from": "/metadata/name", "path": "/metadata/generateName"}])
    assert patched["spec"]["first"] == {"port": 80}
    assert patched["metadata"] == {"generateName": "svc"}


def test_invalid_operations_are_decode_errors() -> None:
    with pytest.raises(PatchError, match="failed to decode patches: invalid operation .*unsupported operation"):
        apply_json6902(service(), [{"op": "merge", "path": "/a"}])
    with pytest.raises(PatchError, match="missing value field"):
        apply_json6902(service(), [{"op": "add", "path": "/a"}])


def test_malformed_json_string() -> None:
    with pytest.raises(PatchError, match="failed to decode patches"):
        apply_json6902(service(), "[{not json")


@pytest.mark.parametrize("patched_spec", [
    {"ports": [{"port": 80}]},
    {"ports": [{"port": 81}, {"port": 443}, {"port": 8443}], "type": "NodePort"},
    {"ports": []},
    {"selector": {"a/b": "c~d"}},
])
def test_diff_round_trips(patched_spec: dict[str, Any]) -> None:
    original = service()
    patched = copy.deepcopy(original)
    patched["spec"] = patched_spec
    operations = diff_json_patch(original, patched)
    assert apply_json6902(original, operations) == patched


def test_diff_of_equal_documents_is_empty() -> None:
    assert diff_json_patch(service(), service()) == []


class TestKubernetesOptions:
    """MutatingAdmissionPolicy JSONPatch: plain RFC 6902, no parent creation, removing a missing path is an error."""

    def test_add_does_not_create_missing_parents(self) -> None:
        with pytest.raises(PatchError, match="doc is missing path"):
            apply_json6902({"a": {}}, [{"op": "add", "path": "/b/c", "value": 1}], KUBERNETES_OPTIONS)
        assert apply_json6902({"a": {}}, [{"op": "add", "path": "/b/c", "value": 1}]) == {"a": {}, "b": {"c": 1}}

    @pytest.mark.parametrize("path", ["/missing", "/a/missing", "/list/5", "/list/-3"])
    def test_removing_a_missing_path_is_an_error(self, path: str) -> None:
        document = {"a": {}, "list": [1, 2]}
        with pytest.raises(PatchError):
            apply_json6902(document, [{"op": "remove", "path": path}], KUBERNETES_OPTIONS)
        assert apply_json6902(document, [{"op": "remove", "path": path}]) == document

    def test_negative_index_counts_from_the_end(self) -> None:
        patched = apply_json6902({"list": [1, 2, 3]}, [{"op": "remove", "path": "/list/-1"}], KUBERNETES_OPTIONS)
        assert patched == {"list": [1, 2]}
