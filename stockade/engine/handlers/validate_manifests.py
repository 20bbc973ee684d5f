"""``validate.manifests``: the object must carry a valid sigstore manifest signature from the policy's attestors.

Attestor sets are all required; within a set, ``count`` entries must verify (all of them when unset).  An entry whose
``publicKeys`` holds several PEM keys counts as one entry per key, as in Kyverno.
"""

from __future__ import annotations

from typing import Any

from stockade.engine.manifestsig import DEFAULT_DOMAIN, ManifestSignatureMissing, SignedContent, ignore_patterns, read_signed_content, verify_with_key
from stockade.engine.policycontext import PolicyContext
from stockade.engine.response import ERROR, FAIL, PASS, RuleResponse
from stockade.images.pem import split_pem
from stockade.policy.model import RULE_TYPE_VALIDATION, Rule
from stockade.errors import StockadeError


class _EntryError(StockadeError):
    pass


def _expand_static_keys(entries: list[Any]) -> list[dict[str, Any]]:
    expanded: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        keys = (entry.get("keys") or {}).get("publicKeys")
        pems = split_pem(keys) if isinstance(keys, str) else []
        if len(pems) > 1:
            expanded.extend({**entry, "keys": {**entry["keys"], "publicKeys": pem}} for pem in pems)
        else:
            expanded.append(entry)
    return expanded


def _verify_entry(resource: dict[str, Any], entry: dict[str, Any], content: SignedContent | None, missing: str, ignored: list[str], path: str) -> tuple[bool, str]:
    expected_annotations = entry.get("annotations") or {}
    actual = (resource.get("metadata") or {}).get("annotations") or {}
    for key, value in expected_annotations.items():
        if actual.get(key) != value:
            raise _EntryError(f"{path}: annotation {key}={value!r} required by the attestor is not on the resource")
    if entry.get("keys") is not None:
        path += ".keys"
        keys = entry["keys"]
        public_keys, algorithm = str(keys.get("publicKeys") or ""), str(keys.get("signatureAlgorithm") or "sha256")
    elif entry.get("certificates") is not None:
        path += ".certificates"
        public_keys, algorithm = str(entry["certificates"].get("certificate") or ""), "sha256"
    else:
        raise _EntryError(f"{path}: only keys and certificates attestors can verify manifests offline")
    if content is None:
        return False, f"{path}: {missing}"
    try:
        verified, reason = verify_with_key(resource, content, public_keys, algorithm, ignored)
    except ValueError as exc:
        raise _EntryError(f"{path}: {exc}") from None
    return verified, reason if verified else f"{path}: {reason}"


def _verify_set(resource: dict[str, Any], attestor_set: dict[str, Any], content: SignedContent | None, missing: str, ignored: list[str], path: str) -> tuple[bool, str]:
    entries = _expand_static_keys(attestor_set.get("entries") or [])
    required = int(attestor_set.get("count") or 0) or len(entries)
    verified_count, passed, failed, errors = 0, [], [], []
    for index, entry in enumerate(entries):
        entry_path = f"{path}.entries[{index}]"
        try:
            if entry.get("attestor") is not None:
                ok, reason = _verify_set(resource, entry["attestor"], content, missing, ignored, entry_path + ".attestor")
            else:
                ok, reason = _verify_entry(resource, entry, content, missing, ignored, entry_path)
        except _EntryError as exc:
            errors.append(str(exc))
            continue
        if ok:
            verified_count += 1
            passed.append(reason)
        else:
            failed.append(reason)
        if verified_count >= required:
            return True, f"manifest verification succeeded; verifiedCount {verified_count}; requiredCount {required}; message {','.join(passed)}"
    if errors:
        raise _EntryError("; ".join(errors))
    return False, f"manifest verification failed; verifiedCount {verified_count}; requiredCount {required}; message {','.join(failed)}"


def validate_manifests_rule(pctx: PolicyContext, rule: Rule) -> RuleResponse | None:
    if pctx.is_delete:
        return None
    spec = (rule.validate or {}).get("manifests") or {}
    if (pctx.json_context.get("request") or {}).get("dryRun") is True:
        return RuleResponse(rule.name, RULE_TYPE_VALIDATION, PASS, "allowed because of DryRun request")
    resource = pctx.new_resource
    domain = str(spec.get("annotationDomain") or DEFAULT_DOMAIN)
    content: SignedContent | None = None
    missing = ""
    try:
        content = read_signed_content(resource, domain)
    except ManifestSignatureMissing as exc:
        missing = str(exc)
    except ValueError as exc:
        return RuleResponse(rule.name, RULE_TYPE_VALIDATION, ERROR, f"error occurred during manifest verification: {exc}")
    ignored = ignore_patterns(resource, spec.get("ignoreFields") or [], domain)
    messages = []
    for index, attestor_set in enumerate(spec.get("attestors") or []):
        try:
            ok, reason = _verify_set(resource, attestor_set or {}, content, missing, ignored, f".attestors[{index}]")
        except _EntryError as exc:
            return RuleResponse(rule.name, RULE_TYPE_VALIDATION, ERROR, f"error occurred during manifest verification: {exc}")
        if not ok:
            return RuleResponse(rule.name, RULE_TYPE_VALIDATION, FAIL, reason)
        messages.append(reason)
    return RuleResponse(rule.name, RULE_TYPE_VALIDATION, PASS, f"verified manifest signatures; {','.join(messages)}")
