"""The test-file formats: ``cli.kyverno.io/v1alpha1 Test`` and the legacy top-level ``name:`` form.

Kyverno decodes these with Go's ``encoding/json``, which matches keys case-insensitively; users rely on that
(``isMUtatingPolicy`` exists in the wild), so keys are folded to their canonical spelling here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from stockade.policy.loader import LoadError, parse_yaml_documents, read_text

TEST_FIELDS = (
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "policies",
    "resources",
    "jsonPayload",
    "jsonPayloads",
    "httpPayloads",
    "envoyPayloads",
    "targetResources",
    "variables",
    "paramResources",
    "userinfo",
    "results",
    "checks",
    "values",
    "exceptions",
    "context",
    "clusterResources",
    "apiCallResponses",
    "globalContextEntries",
)
RESULT_FIELDS = (
    "policy",
    "rule",
    "resource",
    "resources",
    "resourceSpecs",
    "namespace",
    "kind",
    "result",
    "status",
    "patchedResource",
    "patchedResources",
    "generatedResource",
    "generatedResources",
    "cloneSourceResource",
    "operation",
    "failOnMissingResources",
    "isValidatingAdmissionPolicy",
    "isMutatingAdmissionPolicy",
    "isValidatingPolicy",
    "isMutatingPolicy",
    "isGeneratingPolicy",
    "isImageValidatingPolicy",
    "isDeletingPolicy",
    "isNamespacedValidatingPolicy",
    "isNamespacedMutatingPolicy",
    "isNamespacedGeneratingPolicy",
    "isNamespacedImageValidatingPolicy",
    "isNamespacedDeletingPolicy",
    "isHTTPValidatingPolicy",
    "isEnvoyValidatingPolicy",
)
VALID_RESULTS = ("pass", "fail", "skip", "warn", "error")


class TestFileError(LoadError):
    """A test file is malformed; names the file and field."""


def _fold_keys(data: dict[str, Any], known: tuple[str, ...], source: str, where: str) -> dict[str, Any]:
    canonical = {name.lower(): name for name in known}
    folded: dict[str, Any] = {}
    for key, value in data.items():
        name = canonical.get(str(key).lower())
        if name is None:
            raise TestFileError(source, f'unknown field "{key}"', field=where + str(key))
        folded[name] = value
    return folded


@dataclass
class TestResult:
    """One expectation of a test file."""

    policy: str
    rule: str
    result: str
    resources: list[str] = field(default_factory=list)
    resource_specs: list[dict[str, Any]] = field(default_factory=list)
    kind: str = ""
    namespace: str = ""
    patched_resources: str = ""
    generated_resources: list[str] = field(default_factory=list)
    clone_source_resource: str = ""
    operation: str = ""
    fail_on_missing_resources: bool = False
    policy_kind_flags: dict[str, bool] = field(default_factory=dict)
    index: int = 0

    @property
    def policy_name(self) -> str:
        return self.policy.split("/")[-1]

    @property
    def is_cel_kind(self) -> bool:
        return any(self.policy_kind_flags.values())


@dataclass
class TestCase:
    """A loaded test file, paths resolved relative to its directory."""

    path: str
    name: str
    legacy: bool
    policies: list[str]
    resources: list[str]
    results: list[TestResult]
    raw: dict[str, Any]
    variables: str = ""
    values: dict[str, Any] | None = None
    userinfo: str = ""
    exceptions: list[str] = field(default_factory=list)
    target_resources: list[str] = field(default_factory=list)
    param_resources: list[str] = field(default_factory=list)
    cluster_resources: list[str] = field(default_factory=list)
    context: str = ""
    api_call_responses: list[dict[str, Any]] = field(default_factory=list)
    global_context_entries: list[dict[str, Any]] = field(default_factory=list)
    json_payloads: list[str] = field(default_factory=list)
    http_payloads: list[str] = field(default_factory=list)
    envoy_payloads: list[str] = field(default_factory=list)

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    def resolve(self, relative: str) -> str:
        if relative.startswith(("http://", "https://")) or os.path.isabs(relative):
            return relative
        return os.path.normpath(os.path.join(self.directory, relative))


def _string_list(value: Any, source: str, field_name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TestFileError(source, "expected a list of strings", field=field_name)
    return list(value)


def _parse_result(raw: Any, index: int, source: str) -> TestResult:
    where = f"results[{index}]."
    if not isinstance(raw, dict):
        raise TestFileError(source, "expected a mapping", field=f"results[{index}]")
    data = _fold_keys(raw, RESULT_FIELDS, source, where)
    result = data.get("result", data.get("status"))
    if not isinstance(result, str) or result.lower() not in VALID_RESULTS:
        raise TestFileError(source, f"expected one of {', '.join(VALID_RESULTS)}, got {result!r}", field=where + "result")
    resources = _string_list(data.get("resources"), source, where + "resources")
    if data.get("resource"):
        resources.append(str(data["resource"]))
    generated = _string_list(data.get("generatedResources"), source, where + "generatedResources")
    flags = {key: bool(value) for key, value in data.items() if key.startswith("is") and value}
    patched = data.get("patchedResources") or data.get("patchedResource") or ""
    return TestResult(
        policy=str(data.get("policy") or ""),
        rule=str(data.get("rule") or ""),
        result=result.lower(),
        resources=resources,
        resource_specs=list(data.get("resourceSpecs") or []),
        kind=str(data.get("kind") or ""),
        namespace=str(data.get("namespace") or ""),
        patched_resources=str(patched),
        generated_resources=([str(data["generatedResource"])] if data.get("generatedResource") else []) + generated,
        clone_source_resource=str(data.get("cloneSourceResource") or ""),
        operation=str(data.get("operation") or "").upper(),
        fail_on_missing_resources=bool(data.get("failOnMissingResources", False)),
        policy_kind_flags=flags,
        index=index,
    )


def validate_api_call_responses(entries: list[Any], source: str) -> None:
    """``apiCallResponses`` checked as Kyverno's CLI does before a run: exactly one of an absolute http(s) ``url`` or
    an absolute ``urlPath``, method GET or POST, a JSON object body, a status in 100-599, one entry per method+url
    (a later duplicate would silently shadow an earlier one)."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"apiCallResponses[{index}]"
        if not isinstance(entry, dict):
            raise TestFileError(source, "expected a mapping", field=where)
        url = str(entry.get("url") or "").strip()
        url_path = str(entry.get("urlPath") or "").strip()
        if not url and not url_path:
            raise TestFileError(source, "either url or urlPath is required", field=where)
        if url and url_path:
            raise TestFileError(source, "url and urlPath are mutually exclusive", field=where)
        if url:
            parsed = urlsplit(url)
            if parsed.scheme not in ("http", "https"):
                raise TestFileError(source, f"url {url!r} must be an absolute https/http URL", field=where + ".url")
            if not parsed.hostname:
                raise TestFileError(source, f"url {url!r} has scheme but no host", field=where + ".url")
        if url_path and not url_path.startswith("/"):
            raise TestFileError(source, f"urlPath {url_path!r} must be an absolute path starting with '/'", field=where + ".urlPath")
        method = str(entry.get("method") or "").strip().upper()
        if method not in ("", "GET", "POST"):
            raise TestFileError(source, "method must be GET or POST", field=where + ".method")
        response = entry.get("response")
        response = response if isinstance(response, dict) else {}
        if response.get("body") is None:
            raise TestFileError(source, "response.body is required", field=where + ".response.body")
        if not isinstance(response["body"], dict):
            raise TestFileError(source, "response.body must be a JSON object", field=where + ".response.body")
        status = response.get("statusCode") or 0
        if not isinstance(status, int) or isinstance(status, bool) or (status != 0 and not 100 <= status <= 599):
            raise TestFileError(source, f"statusCode {status!r} must be between 100 and 599", field=where + ".response.statusCode")
        key = f"{method}:{url or url_path}" if method else (url or url_path)
        if key in seen:
            raise TestFileError(source, f"duplicate entry for {url or url_path!r} (key {key!r}): each method+url combination must be unique", field=where)
        seen.add(key)


_OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
})
_CONTEXT_IMAGE_STRINGS = ("image", "resolvedImage", "registry", "repository", "tag", "digest")
_CONTEXT_IMAGE_FIELDS = frozenset(_CONTEXT_IMAGE_STRINGS + ("imageIndex", "manifest", "config"))


def validate_context_document(data: dict[str, Any], source: str) -> None:
    """A ``kind: Context`` file read strictly, as Kyverno's CLI does: an unknown field (``imageData`` for
    ``config``) or a mistyped one stops the test instead of silently giving the policy no data."""

    def unknown(mapping: dict[str, Any], known: frozenset[str], where: str) -> None:
        for key in mapping:
            if key not in known:
                raise TestFileError(source, f"unknown field {key!r}", field=f"{where}.{key}" if where else str(key))

    unknown(data, frozenset({"apiVersion", "kind", "metadata", "spec"}), "")
    metadata = data.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise TestFileError(source, "expected a mapping", field="metadata")
        unknown(metadata, _OBJECT_META_FIELDS, "metadata")
    spec = data.get("spec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise TestFileError(source, "expected a mapping", field="spec")
    unknown(spec, frozenset({"resources", "images"}), "spec")
    for key in ("resources", "images"):
        items = spec.get(key)
        if items is not None and (not isinstance(items, list) or not all(isinstance(item, dict) for item in items)):
            raise TestFileError(source, "expected a list of mappings", field=f"spec.{key}")
    for index, image in enumerate(spec.get("images") or []):
        where = f"spec.images[{index}]"
        unknown(image, _CONTEXT_IMAGE_FIELDS, where)
        for key in _CONTEXT_IMAGE_STRINGS:
            if image.get(key) is not None and not isinstance(image[key], str):
                raise TestFileError(source, "expected a string", field=f"{where}.{key}")


def load_test_files(path: str) -> list[TestCase]:
    """Every Test document of a file: Kyverno's CLI runs each document of a multi-document test file as its own
    test (e.g. one JSON payload expected to pass, another to fail)."""
    text = read_text(path)
    documents = [document for document in parse_yaml_documents(text, path) if document is not None]
    if not documents or not all(isinstance(document, dict) for document in documents):
        raise TestFileError(path, "a test file must hold one or more mapping documents")
    return [_test_case(document, path) for document in documents]


def load_test_file(path: str) -> TestCase:
    text = read_text(path)
    documents = parse_yaml_documents(text, path)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise TestFileError(path, "a test file must hold exactly one mapping document (use load_test_files)")
    return _test_case(documents[0], path)


def _test_case(document: dict[str, Any], path: str) -> TestCase:
    data = _fold_keys(document, TEST_FIELDS, path, "")
    legacy = "apiVersion" not in data and "kind" not in data
    if not legacy:
        if data.get("kind") != "Test":
            raise TestFileError(path, f"expected kind Test, got {data.get('kind')!r}", field="kind")
    name = str((data.get("metadata") or {}).get("name") or data.get("name") or os.path.basename(path))
    results = [_parse_result(raw, index, path) for index, raw in enumerate(data.get("results") or [])]
    case = TestCase(
        path=os.path.abspath(path),
        name=name,
        legacy=legacy,
        policies=_string_list(data.get("policies"), path, "policies"),
        resources=_string_list(data.get("resources"), path, "resources"),
        results=results,
        raw=data,
        variables=str(data.get("variables") or ""),
        values=data.get("values") if isinstance(data.get("values"), dict) else None,
        userinfo=str(data.get("userinfo") or ""),
        exceptions=_string_list(data.get("exceptions"), path, "exceptions"),
        target_resources=_string_list(data.get("targetResources"), path, "targetResources"),
        param_resources=_string_list(data.get("paramResources"), path, "paramResources"),
        cluster_resources=_string_list(data.get("clusterResources"), path, "clusterResources"),
        context=str(data.get("context") or ""),
        api_call_responses=list(data.get("apiCallResponses") or []),
        global_context_entries=list(data.get("globalContextEntries") or []),
        json_payloads=_string_list(data.get("jsonPayloads"), path, "jsonPayloads") + ([data["jsonPayload"]] if data.get("jsonPayload") else []),
        http_payloads=_string_list(data.get("httpPayloads"), path, "httpPayloads"),
        envoy_payloads=_string_list(data.get("envoyPayloads"), path, "envoyPayloads"),
    )
    return case


def discover(paths: list[str], file_name: str = "kyverno-test.yaml") -> list[str]:
    """Test files named ``file_name`` under the given paths, hidden directories included, in a stable order."""
    found: list[str] = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
            continue
        for root, dirs, files in os.walk(path):
            dirs.sort()
            if file_name in files:
                found.append(os.path.join(root, file_name))
    return found
