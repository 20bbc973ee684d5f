"""Running a Kyverno CLI test file and judging each expectation the way ``kyverno test`` does."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from stockade.celpolicy import RULELESS_KINDS, kind_to_resource
from stockade.celpolicy.authz import ENVOY_MODE, HTTP_MODE, AuthzPayloadError
from stockade.celpolicy.errors import PolicyCompileError
from stockade.celpolicy.evaluator import GeneratedPlacement
from stockade.celpolicy.testing import CelPolicyRun
from stockade.engine.contextloader import ContextLoadError, ContextProviders, ContextSourceDisabled, KindScopeResolver
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.engine.processor import apply_policies
from stockade.engine.response import EngineResponse, RuleResponse, report_result
from stockade.kyvernotest.compare import compare_resources, find_resource
from stockade.kyvernotest.schema import TestCase, TestResult, validate_api_call_responses, validate_context_document
from stockade.kyvernotest.values import Values, load_user_info, load_values, values_from_mapping
from stockade.errors import StockadeError
from stockade.lint.check import Finding, check_documents
from stockade.policy.loader import Document, LoadError, load_documents, read_text
from stockade.policy.model import KyvernoPolicy
from stockade.policy.resources import CLUSTER_SCOPED_KINDS, PolicySet, normalise_resource, resource_key, split_policies


class PolicyRefused(StockadeError):
    """The policy check refused one or more of a test's policies; the message lists every finding."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__("invalid policy:\n" + "\n".join(f"    {finding}" for finding in findings))


@dataclass
class Row:
    """One line of the results table."""

    policy: str
    rule: str
    resource: str
    ok: bool
    reason: str
    message: str = ""
    expected: str = ""
    skipped_count: bool = False

    @property
    def result(self) -> str:
        return "Pass" if self.ok else "Fail"


@dataclass
class TestRun:
    case: TestCase
    rows: list[Row] = field(default_factory=list)
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    # the policy check refused a policy or exception of the test: nothing was evaluated
    refused: bool = False

    @property
    def failed(self) -> int:
        return sum(1 for row in self.rows if not row.ok) + (1 if self.error else 0)


@dataclass
class _Responses:
    trigger: dict[str, list[EngineResponse]] = field(default_factory=dict)
    by_operation: dict[str, dict[str, list[EngineResponse]]] = field(default_factory=dict)
    # targetResources key -> responses holding a patched copy of it (mutate.targets)
    target: dict[str, list[EngineResponse]] = field(default_factory=dict)


class _ClusterData:
    """Objects a test supplies in place of a cluster: trigger resources, clone sources, clusterResources."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def lookup(self, api_version: str, kind: str, namespace: str, name: str | None) -> list[dict[str, Any]]:
        found = []
        for obj in self.objects:
            metadata = obj.get("metadata") or {}
            if kind and obj.get("kind") != kind:
                continue
            if api_version and obj.get("apiVersion") != api_version:
                continue
            if namespace and (metadata.get("namespace") or "") != namespace:
                continue
            if name is not None and metadata.get("name") != name:
                continue
            found.append(obj)
        return found

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        matches = self.lookup("v1", "ConfigMap", namespace, name)
        return matches[0] if matches else None


def _kind_scope(objects: list[dict[str, Any]]) -> KindScopeResolver:
    """Kinds' scope in the cluster a test describes: CustomResourceDefinitions among its objects, else the built-in
    cluster-scoped kinds; any other kind is namespaced."""
    crd_scopes: dict[tuple[str, str], bool] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec")
        names = spec.get("names") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and isinstance(names, dict) and spec.get("group") and names.get("kind"):
            crd_scopes[(str(spec["group"]), str(names["kind"]))] = spec.get("scope") != "Cluster"

    def namespaced(api_version: str, kind: str) -> bool | None:
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        if (group, kind) in crd_scopes:
            return crd_scopes[(group, kind)]
        return kind not in CLUSTER_SCOPED_KINDS

    return namespaced


def _load_resources(case: TestCase, paths: list[str]) -> list[dict[str, Any]]:
    documents = load_documents([case.resolve(p) for p in paths])
    return [normalise_resource(d.data) for d in documents]


def _responses_by_target(targets: list[dict[str, Any]], trigger: dict[str, list[EngineResponse]]) -> dict[str, list[EngineResponse]]:
    wanted = {resource_key(target) for target in targets}
    found: dict[str, list[EngineResponse]] = {}
    for responses in trigger.values():
        for response in responses:
            for key in {resource_key(r.patched_target) for r in response.rules if r.patched_target is not None} & wanted:
                found.setdefault(key, []).append(response)
    return found


def _lookup_rule_responses(result: TestResult, rules: list[RuleResponse]) -> list[RuleResponse]:
    names = (result.rule, "autogen-" + result.rule, "autogen-cronjob-" + result.rule)
    return [rule for rule in rules if rule.name in names]


class TestRunner:
    """Evaluates one test case."""

    def __init__(self, case: TestCase) -> None:
        self.case = case
        self.run = TestRun(case)
        self.global_context_entries: list[dict[str, Any]] = list(case.global_context_entries)
        self.strict = True  # unknown fields refuse the policy (the CLI's `test` always; Kyverno's loader does too)
        self.image_verifier: Any = None  # set by `--registry`: verifyImages rules then verify signatures
        self.verification_cache: Any = None

    # -- loading -----------------------------------------------------------------------------------------------------
    def _values(self) -> Values:
        if self.case.variables:
            return load_values(self.case.resolve(self.case.variables))
        if self.case.values:
            return values_from_mapping(self.case.values, self.case.path, inline=True)
        return Values()

    def _policies(self) -> PolicySet:
        return split_policies(self._checked(load_documents([self.case.resolve(p) for p in self.case.policies])))

    def _checked(self, documents: list[Document]) -> list[Document]:
        """``documents`` once the policy check accepts them; unknown fields refuse a test's policy, as Kyverno's
        schema-validating loader does, so a typo can never make a test pass by checking less."""
        report = check_documents(documents, offline=True)
        self.run.warnings.extend(str(finding) for finding in report.warnings(strict=self.strict))
        errors = report.errors(strict=self.strict)
        if errors:
            raise PolicyRefused(errors)
        return documents

    def execute(self) -> TestRun:
        case = self.case
        try:
            validate_api_call_responses(case.api_call_responses, case.path)
            values = self._values()
            info = load_user_info(case.resolve(case.userinfo)) if case.userinfo else RequestInfo()
            policies = self._policies()
            resources = self._dedupe(_load_resources(case, case.resources))
            exceptions = []
            exception_set = PolicySet()
            if case.exceptions:
                exception_set = split_policies(self._checked(load_documents([case.resolve(p) for p in case.exceptions])))
                exceptions = exception_set.exceptions
            cluster_objects = list(resources)
            for path in case.cluster_resources:
                cluster_objects.extend(self._cluster_resource_objects(path))
            self.global_context_entries = self._global_context_entries()
            targets = _load_resources(case, case.target_resources)
            cluster_objects.extend(targets)
            cel_run = self._cel_run(policies, exception_set.cel if case.exceptions else [], values, cluster_objects, targets)
        except PolicyRefused as exc:
            self.run.error = str(exc)
            self.run.refused = True
            return self.run
        except LoadError as exc:
            self.run.error = str(exc)
            return self.run
        responses = self._evaluate(policies, resources, values, info, exceptions + policies.exceptions, cluster_objects, cel_run)
        try:
            responses.trigger.update(self._authz_responses(cel_run))
        except (LoadError, PolicyCompileError) as exc:
            self.run.error = str(exc)
            return self.run
        responses.target = _responses_by_target(targets, responses.trigger)
        self._judge(responses, policies)
        if not self.run.rows:
            # Kyverno reports "0 tests passed and 0 tests failed" and exits 0 here; a test that checks nothing fails.
            self.run.error = (
                "the test checks nothing: it lists no results"
                if not case.results
                else "the test checks nothing: every result was skipped (resources not found in their patchedResources files)"
            )
        return self.run

    def _global_context_entries(self) -> list[dict[str, Any]]:
        """The test's ``globalContextEntries`` checked as Kyverno does (a unique name; exactly one of ``data``,
        ``resources``, ``resourceFiles``; named projections with a path), ``resourceFiles`` read into ``resources``."""
        source = self.case.path
        resolved: list[dict[str, Any]] = []
        seen: set[str] = set()
        for index, raw in enumerate(self.case.global_context_entries):
            where = f"globalContextEntries[{index}]"
            if not isinstance(raw, dict) or not str(raw.get("name") or "").strip():
                raise LoadError(source, "name is required", field=where + ".name")
            entry = dict(raw)
            name = str(entry["name"]).strip()
            if name in seen:
                raise LoadError(source, f"duplicate name {name!r}", field=where + ".name")
            seen.add(name)
            for position, projection in enumerate(entry.get("projections") or []):
                if not isinstance(projection, dict) or not str(projection.get("name") or "").strip() or not str(projection.get("path") or projection.get("jmesPath") or "").strip():
                    raise LoadError(source, "a projection needs a name and a path", field=f"{where}.projections[{position}]")
            given = [key for key in ("data", "resources", "resourceFiles") if entry.get(key) is not None]
            if len(given) != 1:
                reason = "data, resources, and resourceFiles are mutually exclusive" if given else "one of data, resources, or resourceFiles is required"
                raise LoadError(source, f"entry {name!r}: {reason}", field=where)
            if "resourceFiles" in given:
                files = entry.pop("resourceFiles")
                if not isinstance(files, list) or not all(isinstance(item, str) for item in files):
                    raise LoadError(source, "expected a list of file paths", field=where + ".resourceFiles")
                resources: list[Any] = []
                for file_path in files:
                    resources.extend(d.data for d in load_documents([self.case.resolve(file_path)], require_kind=False))
                entry["resources"] = resources
            resolved.append(entry)
        return resolved

    def _cluster_resource_objects(self, path: str) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for document in load_documents([self.case.resolve(path)], require_kind=False):
            data = document.data
            if data.get("kind") == "ClusterResource":
                for obj in (data.get("spec") or {}).get("resources") or []:
                    if isinstance(obj, dict):
                        objects.append(normalise_resource(obj))
            else:
                objects.append(normalise_resource(data))
        return objects

    def _dedupe(self, resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for resource in resources:
            key = resource_key(resource)
            if key in seen:
                self.run.warnings.append(f"found duplicated resource {resource.get('kind')} {key.split(',')[-1]}")
            seen[key] = resource
        return list(seen.values())

    # -- evaluation --------------------------------------------------------------------------------------------------
    def _cluster_namespace_labels(self, cluster: _ClusterData, resource_name: str, namespace: str) -> dict[str, str]:
        """With ``clusterResources`` the test stands for a cluster: a resource's namespace labels (for
        namespaceSelector) come from its Namespace there. Kyverno 1.19.1 stops the whole test when that Namespace is
        missing; Kyverno's own newer test corpus expects the run to go on, so stockade warns and uses no labels."""
        found = cluster.lookup("v1", "Namespace", "", namespace)
        if not found:
            warning = f"namespace {namespace!r} of resource {resource_name!r} is not among the clusterResources; matching it with no namespace labels"
            if warning not in self.run.warnings:
                self.run.warnings.append(warning)
            return {}
        labels = (found[0].get("metadata") or {}).get("labels") or {}
        return {str(key): str(value) for key, value in labels.items()}

    def _clone_sources(self, policies: list[KyvernoPolicy]) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for result in self.case.results:
            if result.clone_source_resource:
                try:
                    for document in load_documents([self.case.resolve(result.clone_source_resource)]):
                        objects.append(normalise_resource(document.data))
                except LoadError as exc:
                    self.run.warnings.append(str(exc))
        return objects

    def _evaluate(
        self,
        policies: PolicySet,
        resources: list[dict[str, Any]],
        values: Values,
        info: RequestInfo,
        exceptions: list[Any],
        cluster_objects: list[dict[str, Any]],
        cel_run: CelPolicyRun | None = None,
    ) -> _Responses:
        cluster = _ClusterData(cluster_objects + self._clone_sources(policies.kyverno))
        mocks = self.case.api_call_responses
        providers = ContextProviders(
            configmaps=cluster.configmap if self.case.cluster_resources else None,
            api_calls=_api_call_resolver(mocks, cluster, bool(self.case.cluster_resources)) if (mocks or self.case.cluster_resources) else None,
            rule_values=values.values_for_rule,
            foreach_values=values.foreach_values_for_rule,
            global_context=_global_context_resolver(self.global_context_entries) if self.global_context_entries else None,
        )
        engine = Engine(
            providers=providers,
            exceptions=exceptions,
            resource_lookup=cluster.lookup,
            image_verifier=self.image_verifier,
            verification_cache=self.verification_cache,
        )
        responses = _Responses()
        operations = sorted({r.operation for r in self.case.results if r.operation})
        for resource in resources:
            key = resource_key(resource)
            name = (resource.get("metadata") or {}).get("name", "")
            namespace = (resource.get("metadata") or {}).get("namespace", "")
            labels = values.namespace_labels.get(namespace, {})
            if not labels and self.case.cluster_resources and namespace and resource.get("kind") != "Namespace":
                labels = self._cluster_namespace_labels(cluster, str(name), str(namespace))

            def values_for(policy: KyvernoPolicy, _name: str = str(name)) -> dict[str, Any]:
                return values.for_resource(policy.name, _name)

            gvk = subresource_kind(resource, values.subresources)
            request = Request(resource=resource, info=info, namespace_labels=labels, gvk=gvk)
            default = apply_policies(engine, policies.kyverno, request, values_for=values_for)
            responses.trigger[key] = default.responses
            if cel_run is not None:
                global_operation = str(values.global_values.get("request.operation") or "").upper()
                responses.trigger[key] = responses.trigger[key] + cel_run.responses(
                    default.patched_resource or resource, global_operation, info, labels, default_run=True
                )
            for operation in operations:
                forced = Request(resource=resource, info=info, namespace_labels=labels, operation=operation, operation_forced=True, gvk=gvk)

                def forced_values(policy: KyvernoPolicy, _name: str = str(name), _op: str = operation) -> dict[str, Any]:
                    merged = values.for_resource(policy.name, _name)
                    merged["request.operation"] = _op
                    return merged

                result = apply_policies(engine, policies.kyverno, forced, values_for=forced_values)
                operation_responses = result.responses
                if cel_run is not None:
                    operation_responses = operation_responses + cel_run.responses(
                        result.patched_resource or resource, operation, info, labels, default_run=False
                    )
                responses.by_operation.setdefault(operation, {})[key] = operation_responses
        if cel_run is not None:
            for name, payload in cel_run.json_payload_responses().items():
                responses.trigger[name] = payload
        return responses

    def _authz_responses(self, cel_run: CelPolicyRun | None) -> dict[str, list[EngineResponse]]:
        """``httpPayloads`` / ``envoyPayloads``: each file is one authorization request, keyed by its path."""
        found: dict[str, list[EngineResponse]] = {}
        for mode, paths, what in ((HTTP_MODE, self.case.http_payloads, "HTTP"), (ENVOY_MODE, self.case.envoy_payloads, "Envoy")):
            for relative in paths:
                path = self.case.resolve(relative)
                try:
                    payload = json.loads(read_text(path))
                except json.JSONDecodeError as exc:
                    raise LoadError(path, f"failed to load {what} payload: not JSON ({exc.msg} at line {exc.lineno})") from None
                if cel_run is None:
                    found[path] = []
                    continue
                try:
                    found[path] = cel_run.authz_responses(mode, payload)
                except AuthzPayloadError as exc:
                    raise LoadError(path, f"failed to load {what} payload: {exc.reason}", field=exc.field or None) from None
        return found

    def _cel_run(
        self, policies: PolicySet, exception_documents: list[Document], values: Values, cluster_objects: list[dict[str, Any]], targets: list[dict[str, Any]]
    ) -> CelPolicyRun | None:
        """CEL policy kinds of the test, with providers answering from the test's context and mocks."""
        if not policies.cel and not policies.admission:
            return None
        context_data: dict[str, Any] = {}
        if self.case.context:
            for document in load_documents([self.case.resolve(self.case.context)], require_kind=False):
                if document.data.get("kind") == "Context":
                    validate_context_document(document.data, document.source)
                    context_data = document.data.get("spec") or {}
        params: list[dict[str, Any]] = []
        if self.case.param_resources:
            params = [normalise_resource(d.data) for d in load_documents([self.case.resolve(p) for p in self.case.param_resources])]
        payloads: dict[str, Any] = {}
        for path in self.case.json_payloads:
            documents = load_documents([self.case.resolve(path)], require_kind=False)
            if len(documents) != 1 or not isinstance(documents[0].data, dict) or not documents[0].data:
                raise LoadError(self.case.resolve(path), "a JSON payload must be one non-empty top-level object", field="jsonPayloads")
            payloads[path] = documents[0].data
        return CelPolicyRun(
            documents=[d.data for d in policies.cel + policies.admission],
            exception_documents=[d.data for d in exception_documents],
            context_resources=[normalise_resource(r) for r in context_data.get("resources") or [] if isinstance(r, dict)],
            context_images=list(context_data.get("images") or []),
            cluster_objects=cluster_objects,
            params=params,
            api_call_responses=self.case.api_call_responses,
            global_context_entries=self.global_context_entries,
            namespaces=values.namespaces,
            json_payloads=payloads,
            subresources=values.subresources,
            image_verifier=self.image_verifier,
            targets=targets,
            # Kyverno's test command runs against its fake cluster client when the test names clusterResources
            generate_placement=GeneratedPlacement(cluster=True, kind_namespaced=_kind_scope(cluster_objects))
            if self.case.cluster_resources else None,
        )

    # -- judging -----------------------------------------------------------------------------------------------------
    def _judge(self, responses: _Responses, policies: PolicySet) -> None:
        rules_by_policy = {policy.name: {rule.name for rule in policy.rules} for policy in policies.kyverno}
        for result in self.case.results:
            known = rules_by_policy.get(result.policy_name)
            if known is not None and result.rule and not ({result.rule, "autogen-" + result.rule, "autogen-cronjob-" + result.rule} & known):
                self.run.warnings.append(
                    f"results[{result.index}] names rule {result.rule!r}, which policy {result.policy_name!r} does not have"
                )
            trigger = responses.by_operation.get(result.operation, {}) if result.operation else responses.trigger
            keys = self._select_resources(result, {**responses.target, **trigger})
            if not keys:
                # Nothing was evaluated for this expectation (no resources or payloads): a test whose results
                # cannot be computed fails rather than passing with zero checks.
                self.run.rows.append(
                    Row(result.policy, result.rule, "", False, "Not found", "no resource or payload was evaluated for this result", result.result)
                )
                continue
            for key in keys:
                rows = self._rows_for(result, key, trigger) if key in trigger else []
                rows += self._target_rows(result, key, responses.target.get(key, []))
                if not rows and key not in trigger:
                    rows.append(Row(result.policy, result.rule, key.replace(",", "/"), False, "Not found", "Not found", result.result))
                self.run.rows.extend(rows)

    def _select_resources(self, result: TestResult, trigger: dict[str, list[EngineResponse]]) -> list[str]:
        selected: list[str] = []
        for wanted in result.resources:
            parts = wanted.split("/")
            for key in trigger:
                key_parts = key.split(",")
                if len(parts) == 1 and parts[0] == key_parts[-1]:
                    selected.append(key)
                elif len(parts) == 2 and parts[0] == key_parts[-2] and parts[1] == key_parts[-1]:
                    selected.append(key)
        for spec in result.resource_specs:
            group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
            api_version = f"{group}/{version}" if group else version
            for key in trigger:
                key_parts = key.split(",")
                if key_parts[0] == api_version and key_parts[-2] == str(spec.get("namespace") or "") and key_parts[-1] == spec.get("name"):
                    selected.append(key)
        if result.resources and not selected:
            self.run.warnings.append(
                f"results[{result.index}] names resources {', '.join(result.resources)} that are not among the loaded resources; "
                "checking every resource instead (as kyverno does)"
            )
        if not selected:
            selected = list(trigger)
        return selected

    def _rows_for(self, result: TestResult, key: str, trigger: dict[str, list[EngineResponse]]) -> list[Row]:
        rows: list[Row] = []
        display = key.replace(",", "/")
        skipped_missing = False
        excluded = False
        for response in trigger.get(key, []):
            if response.policy_name != result.policy_name:
                continue
            rule_rows: list[Row] = []
            ruleless = getattr(response.policy, "kind", "") in RULELESS_KINDS
            for rule in _lookup_rule_responses(result, response.rules) if result.rule and not ruleless else response.rules:
                if rule.rule_type == "Generation" and rule.generated_resources:
                    for generated in rule.generated_resources:
                        # Kyverno's row for a generated object names that object, not its trigger
                        generated_name = str((generated.get("metadata") or {}).get("name") or "")
                        generated_row = self._check(result, response, rule, generated, generated_name)
                        if generated_row is None:
                            skipped_missing = True
                        else:
                            rule_rows.append(generated_row)
                    continue
                actual = response.patched_resource if rule.rule_type == "Mutation" else response.resource
                row = self._check(result, response, rule, actual, display)
                if row is None:
                    skipped_missing = True
                    continue
                rule_rows.append(row)
            if not rule_rows and not skipped_missing:
                excluded = True
            rows.extend(rule_rows)
        if not rows and excluded:
            # Kyverno prints one "Excluded" row per engine response (mutate and validate phases each); one is enough.
            rows.append(Row(result.policy, result.rule, display, True, "Excluded", "Excluded", result.result, True))
        if not rows and not skipped_missing:
            rows.append(Row(result.policy, result.rule, display, False, "Not found", "Not found", result.result))
        return rows

    def _target_rows(self, result: TestResult, key: str, responses: list[EngineResponse]) -> list[Row]:
        """Rows for a targetResources object: judged on the patched copy a mutate.targets rule produced."""
        rows: list[Row] = []
        for response in responses:
            if response.policy_name != result.policy_name:
                continue
            for rule in response.rules:
                if rule.patched_target is not None and resource_key(rule.patched_target) == key:
                    row = self._check(result, response, rule, rule.patched_target, key.replace(",", "/"))
                    if row is not None:
                        rows.append(row)
                    break
        return rows

    def _check(self, result: TestResult, response: EngineResponse, rule: RuleResponse, actual: dict[str, Any], display: str) -> Row | None:
        def row(ok: bool, reason: str, message: str) -> Row:
            return Row(result.policy, rule.name, display, ok, reason, message, result.result, result.result == "skip")

        if result.patched_resources:
            outcome = self._compare_file(actual, result.patched_resources, "PatchedResources")
            if outcome is not None:
                if outcome.missing and not result.fail_on_missing_resources:
                    return None
                return row(False, outcome.reason, outcome.message)
        if result.generated_resources and rule.rule_type == "Generation":
            failures: list[_Mismatch] = []
            for expected in result.generated_resources:
                outcome = self._compare_file(actual, expected, "GeneratedResource")
                if outcome is None:
                    break
                failures.append(outcome)
            else:
                if failures:
                    return row(False, failures[-1].reason, failures[-1].message)
        actual_result = report_result(response, rule)
        if actual_result != result.result:
            return row(False, f"Want {result.result}, got {actual_result}", rule.message)
        return row(True, "Ok", rule.message)

    def _compare_file(self, actual: dict[str, Any], path: str, what: str) -> _Mismatch | None:
        """None when the file holds an equal resource; otherwise why not."""
        try:
            expected = find_resource(self.case.resolve(path), actual)
        except LoadError as exc:
            return _Mismatch("Resource error", f"error: failed to load {what} resource ({exc.reason})")
        if expected is None:
            name = (actual.get("metadata") or {}).get("name", "")
            message = f"error: failed to load {what} resource (resource with name {name} not found in manifest)"
            return _Mismatch("Resource error", message, missing=True)
        equal, diff = compare_resources(actual, expected)
        if equal:
            return None
        return _Mismatch("Resource diff", f"{what} didn't match the expected resource in the test result\n{diff}")


@dataclass(frozen=True)
class _Mismatch:
    """An expected-resource file that does not hold the actual resource; ``missing``: no resource of that name."""

    reason: str
    message: str
    missing: bool = False


def subresource_kind(resource: dict[str, Any], subresources: list[dict[str, Any]]) -> ResourceKind | None:
    """A values file may declare a kind as a subresource of a parent (Scale of Deployment): match it as such."""
    own = ResourceKind.of(resource)
    for entry in subresources:
        sub = entry.get("subresource") or {}
        parent = entry.get("parentResource") or {}
        if (str(sub.get("group") or ""), str(sub.get("version") or ""), str(sub.get("kind") or "")) == (own.group, own.version, own.kind):
            name = str(sub.get("name") or "")
            return ResourceKind(str(parent.get("group") or ""), str(parent.get("version") or ""), str(parent.get("kind") or ""), name.split("/", 1)[1] if "/" in name else "")
    return None


def _api_call_resolver(mocks: list[dict[str, Any]], cluster: _ClusterData, cluster_given: bool) -> Any:
    """Mocked responses first; without ``clusterResources`` Kyverno's CLI has no API client, so an unmocked call is
    left out (its variable stays undefined unless values supply it); with them, urlPath GETs read the test's objects."""
    index: dict[str, dict[str, Any]] = {}
    for mock in mocks:
        url = str(mock.get("url") or mock.get("urlPath") or "")
        method = str(mock.get("method") or "").strip().upper()
        response = mock.get("response") or {}
        payload = {"statusCode": int(response.get("statusCode") or 200), "body": response.get("body")}
        index[f"{method}:{url}" if method else url] = payload

    def resolve(call: dict[str, Any], _ctx: Any) -> Any:
        url = str((call.get("service") or {}).get("url") or call.get("urlPath") or "")
        method = str(call.get("method") or "GET").upper()
        payload = index.get(f"{method}:{url}") or index.get(url)
        if payload is not None:
            if not 200 <= payload["statusCode"] < 300:
                raise ContextLoadError(f"HTTP {payload['statusCode']} from apiCall mock (v1 apiCall treats non-2xx as failure)")
            return copy.deepcopy(payload["body"])
        if not cluster_given:
            raise ContextSourceDisabled(url)
        if call.get("urlPath"):
            return _fake_api_get(url, cluster)
        raise ContextLoadError(f"no mocked response for {method} {url}")

    return resolve


def _fake_api_get(url_path: str, cluster: _ClusterData) -> Any:
    """Answer Kubernetes API GETs (``/api/v1/namespaces/x/pods``) from the objects the test supplies."""
    path = url_path.split("?", 1)[0].strip("/").split("/")
    if not path or path[0] not in ("api", "apis"):
        raise ContextLoadError(f"unsupported urlPath {url_path}")
    if path[0] == "api":
        api_version, rest = path[1] if len(path) > 1 else "v1", path[2:]
    else:
        api_version, rest = "/".join(path[1:3]), path[3:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ContextLoadError(f"unsupported urlPath {url_path}")
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    items = [obj for obj in cluster.objects if obj.get("apiVersion") == api_version and kind_to_resource(str(obj.get("kind", ""))) == plural]
    if namespace:
        items = [obj for obj in items if (obj.get("metadata") or {}).get("namespace") == namespace]
    if name is not None:
        for obj in items:
            if (obj.get("metadata") or {}).get("name") == name:
                return copy.deepcopy(obj)
        raise ContextLoadError(f'{plural} "{name}" not found')
    kind = items[0].get("kind") if items else ""
    return {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {}, "items": copy.deepcopy(items)}


def _global_context_resolver(entries: list[dict[str, Any]]) -> Any:
    from stockade.celpolicy.providers import resolve_global_context_entry

    data: dict[str, Any] = {}
    for entry in entries:
        data[str(entry.get("name", ""))] = resolve_global_context_entry(entry)

    def resolve(name: str) -> Any:
        if name not in data:
            raise ContextLoadError(f"global context entry {name} not found")
        return copy.deepcopy(data[name])

    return resolve
