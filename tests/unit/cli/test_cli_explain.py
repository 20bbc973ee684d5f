"""`stockade explain`: per rule, matched or why not, the outcome and the definition that decided it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from stockade.cli.explain_cmd import NOT_MATCHED, explain
from stockade.cli.main import cli
from stockade.images.verifier_api import SignatureOptions, VerificationFailure

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "app", "image": "nginx:latest"}, {"name": "side", "image": "ghcr.io/acme/side:1.0"}]},
}

PATTERNS = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: pod-rules}
spec:
  validationFailureAction: Enforce
  rules:
  - name: need-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: team label required
      pattern: {metadata: {labels: {team: "?*"}}}
  - name: pinned-or-private
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: images must be pinned or private
      anyPattern:
      - spec: {containers: [{image: "*@sha256:*"}]}
      - spec: {containers: [{image: "registry.internal/*"}]}
  - name: no-latest-deny
    match: {any: [{resources: {kinds: [Pod]}}]}
    preconditions:
      all:
      - key: "{{ request.object.metadata.labels.app || '' }}"
        operator: Equals
        value: web
    validate:
      message: "latest tag is not allowed"
      deny:
        conditions:
          any:
          - key: "{{ request.object.spec.containers[].image }}"
            operator: AnyIn
            value: ["*:latest"]
  - name: each-container-limits
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      foreach:
      - list: request.object.spec.containers
        pattern:
          resources: {limits: {memory: "?*"}}
  - name: only-in-prod
    match: {any: [{resources: {kinds: [Pod], namespaces: [prod]}}]}
    validate:
      pattern: {metadata: {name: "?*"}}
"""

CEL = """
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: cel-team}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: team label required (CEL)
"""


def write(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(path)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["explain", *args])
    return result.exit_code, result.output


def test_pattern_anypattern_deny_foreach_failures_are_explained(tmp_path: Path) -> None:
    code, output = run(write(tmp_path, "p.yaml", PATTERNS), "-r", write(tmp_path, "pod.yaml", POD), "-o", "json")
    assert code == 1
    data = json.loads(output)
    assert data["allowed"] is False and data["operation"] == "CREATE" and data["resource"] == "Pod/default/web"
    rules = {view["rule"]: view for view in data["rules"]}
    need_team = rules["need-team"]
    assert need_team["status"] == "fail" and "/metadata/labels/" in need_team["message"]
    assert need_team["definition"]["validate"]["pattern"] == {"metadata": {"labels": {"team": "?*"}}}
    any_pattern = rules["pinned-or-private"]
    assert any_pattern["status"] == "fail" and len(any_pattern["definition"]["validate"]["anyPattern"]) == 2
    deny = rules["no-latest-deny"]
    assert deny["status"] == "fail" and deny["message"] == "latest tag is not allowed"
    assert deny["definition"]["preconditions"]["all"][0]["value"] == "web"
    assert deny["substituted"]["preconditions"]["all"][0]["key"] == "web"  # the value the precondition compared
    assert deny["substituted"]["deny.conditions"]["any"][0]["key"] == ["nginx:latest", "ghcr.io/acme/side:1.0"]
    foreach = rules["each-container-limits"]
    assert foreach["status"] == "fail" and "foreach" in foreach["definition"]["validate"]
    not_matched = rules["only-in-prod"]
    assert not_matched["status"] == NOT_MATCHED and not_matched["why_not"]


def test_human_output_names_rule_path_and_reason(tmp_path: Path) -> None:
    code, output = run(write(tmp_path, "p.yaml", PATTERNS), "-r", write(tmp_path, "pod.yaml", POD), "--remove-color")
    assert code == 1
    assert output.startswith("CREATE Pod/default/web: DENIED")
    assert "[validate] policy pod-rules / rule need-team (Validation, Enforce): FAIL" in output
    assert "failed at path /metadata/labels/" in output and '"team": "?*"' in output
    assert "rule only-in-prod: NOT MATCHED" in output and "why not:" in output
    assert 'preconditions with variables substituted: {"all": [{"key": "web", "operator": "Equals", "value": "web"}]}' in output


def test_preconditions_not_met_is_a_skip_with_the_values(tmp_path: Path) -> None:
    pod = {**POD, "metadata": {"name": "web", "namespace": "default", "labels": {"app": "db", "team": "a"}}}
    data = json.loads(run(write(tmp_path, "p.yaml", PATTERNS), "-r", write(tmp_path, "pod.yaml", pod), "-o", "json")[1])
    deny = next(view for view in data["rules"] if view["rule"] == "no-latest-deny")
    assert deny["status"] == "skip" and "preconditions not met" in deny["message"]
    assert deny["substituted"]["preconditions"]["all"][0]["key"] == "db"
    assert deny["definition"]["preconditions"]["all"][0]["key"] == "{{ request.object.metadata.labels.app || '' }}"


def test_cel_failure_shows_the_expression(tmp_path: Path) -> None:
    code, output = run(write(tmp_path, "cel.yaml", CEL), "-r", write(tmp_path, "pod.yaml", POD), "-o", "json")
    assert code == 1
    (view,) = [v for v in json.loads(output)["rules"] if v["policy"] == "cel-team"]
    assert view["status"] == "fail" and "team label required (CEL)" in view["message"]
    assert view["definition"]["validations"][0]["expression"] == "has(object.metadata.labels) && 'team' in object.metadata.labels"


def test_update_uses_old_and_new(tmp_path: Path) -> None:
    old = {**POD, "metadata": {**POD["metadata"], "labels": {"app": "web", "team": "a"}}}
    policies = write(tmp_path, "p.yaml", PATTERNS)
    data = json.loads(run(policies, "--old", write(tmp_path, "old.yaml", old), "--new", write(tmp_path, "new.yaml", POD), "-o", "json")[1])
    assert data["operation"] == "UPDATE" and data["allowed"] is False


def test_bad_input_is_named_without_traceback(tmp_path: Path) -> None:
    policies = write(tmp_path, "p.yaml", PATTERNS)
    code, output = run(policies, "-r", write(tmp_path, "bad.yaml", "kind: Pod\nmetadata: {name: x}\n"))
    assert code == 2 and "bad.yaml: field apiVersion is missing" in output and "Traceback" not in output
    code, output = run(policies, "-r", write(tmp_path, "two.yaml", "a: 1\n---\nb: 2\n"))
    assert code == 2 and "expected exactly one resource" in output
    code, output = run(policies)
    assert code == 2 and "nothing to explain" in output


SIGNED = "ghcr.io/acme/app:1.0"
UNSIGNED = "ghcr.io/acme/evil:1.0"
DIGESTS = {SIGNED: "sha256:" + "a" * 64, UNSIGNED: "sha256:" + "e" * 64}
VERIFY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: signed-images}
spec:
  webhookTimeoutSeconds: 15
  rules:
  - name: verify
    match: {any: [{resources: {kinds: [Pod]}}]}
    verifyImages:
    - imageReferences: ["ghcr.io/acme/*"]
      failureAction: Enforce
      attestors:
      - entries:
        - keys:
            publicKeys: |-
              -----BEGIN PUBLIC KEY-----
              K
              -----END PUBLIC KEY-----
"""


class SignedOnly:
    def resolve_digest(self, image: str) -> str:
        return DIGESTS[image]

    def verify_signature(self, image: str, digest: str, attestor: Mapping[str, Any], options: SignatureOptions) -> None:
        if digest != DIGESTS[SIGNED]:
            raise VerificationFailure("no matching signatures")

    def fetch_attestations(self, *args: Any) -> list[dict[str, Any]]:
        return []


def pod_with(*images: str) -> dict[str, Any]:
    return {**POD, "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}}


def test_verify_images_failure_lists_checked_images(tmp_path: Path) -> None:
    result = explain([write(tmp_path, "v.yaml", VERIFY)], resource=write(tmp_path, "pod.yaml", pod_with(SIGNED, UNSIGNED)), image_verifier=SignedOnly())
    assert not result.allowed
    (view,) = [v for v in result.rules if v.rule == "verify"]
    assert view.phase == "mutate" and view.status == "fail" and UNSIGNED in view.message
    assert [(c.image, c.source, c.result) for c in view.images] == [(SIGNED, "registry", "pass"), (UNSIGNED, "registry", "fail")]


def test_verify_images_pass_shows_record_entries_and_digest_patches(tmp_path: Path) -> None:
    result = explain([write(tmp_path, "v.yaml", VERIFY)], resource=write(tmp_path, "pod.yaml", pod_with(SIGNED)), image_verifier=SignedOnly())
    assert result.allowed
    assert {"op": "replace", "path": "/spec/containers/0/image", "value": f"{SIGNED}@{DIGESTS[SIGNED]}"} in result.patch
    record = result.verification_record["kyverno.io/verify-images"]
    assert any(key.startswith("ghcr.io/acme/app") for key in record) and set(record.values()) == {"pass"}
