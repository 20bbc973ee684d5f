"""``stockade apply``: evaluate policies against resource files and summarise like ``kyverno apply``."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Any

import yaml

from stockade.cli.output import colour_enabled, paint
from stockade.cli.policycheck import policies_pass_check
import stockade.celpolicy  # noqa: F401  (registers the engine's validate.cel handler)
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo
from stockade.engine.processor import apply_policies
from stockade.engine.response import EngineResponse, report_result
from stockade.kyvernotest.values import Values, load_user_info, load_values, parse_set_values
from stockade.policy.loader import LoadError, load_documents
from stockade.policy.model import KyvernoPolicy
from stockade.policy.resources import normalise_resource, split_policies
from stockade.errors import StockadeError


def _policy_report(results: list[tuple[EngineResponse, Any, str]]) -> dict[str, Any]:
    entries = []
    summary: Counter[str] = Counter()
    for response, rule, result in results:
        metadata = (response.resource.get("metadata") or {})
        summary[result] += 1
        entries.append(
            {
                "policy": response.policy_name,
                "rule": rule.name,
                "result": result,
                "message": rule.message,
                "source": "kyverno",
                "scored": True,
                "resources": [
                    {
                        "apiVersion": response.resource.get("apiVersion", ""),
                        "kind": response.resource.get("kind", ""),
                        "name": metadata.get("name", ""),
                        "namespace": metadata.get("namespace", ""),
                    }
                ],
            }
        )
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "ClusterPolicyReport",
        "metadata": {"name": "merged"},
        "results": entries,
        "summary": {key: summary.get(key, 0) for key in ("pass", "fail", "warn", "error", "skip")},
    }


class OutputPathError(StockadeError, ValueError):
    """An output file name derived from a resource would land outside the ``-o`` directory."""


def _output_paths(target: str, resources: list[dict[str, Any]], suffix: str) -> list[str]:
    """One file per resource inside ``target``; names come from resource fields, so each is checked, not trusted.

    A name with a path separator, or a path that is a symlink or resolves (through a symlink) outside ``target``, is
    refused before anything is written.
    """
    root = os.path.realpath(target)
    paths: list[str] = []
    for resource in resources:
        metadata = resource.get("metadata") or {}
        name = "-".join(str(p) for p in (resource.get("kind", ""), metadata.get("namespace") or "", metadata.get("name", "")) if p)
        file_name = name + suffix
        if any(character in file_name for character in ("/", os.sep, "\0")):
            raise OutputPathError(f"output file name {file_name!r} (from the resource's kind/namespace/name) is not a plain file name")
        path = os.path.join(root, file_name)
        if os.path.islink(path) or os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise OutputPathError(f"output file {path} would be written outside {target} (symbolic link)")
        paths.append(path)
    return paths


def _write_outputs(target: str, resources: list[dict[str, Any]], output_format: str) -> None:
    def dump(resource: dict[str, Any]) -> str:
        return json.dumps(resource, indent=2) + "\n" if output_format == "json" else yaml.safe_dump(resource, sort_keys=False)

    if target.endswith((".yaml", ".yml", ".json")) and not os.path.isdir(target):
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(("---\n" if output_format == "yaml" else "").join(dump(r) for r in resources))
        return
    os.makedirs(target, exist_ok=True)
    paths = _output_paths(target, resources, ".json" if output_format == "json" else ".yaml")
    for path, resource in zip(paths, resources):
        # O_NOFOLLOW: a symlink planted after the check still cannot redirect the write.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(dump(resource))


def run_apply(
    policies: tuple[str, ...],
    resources: tuple[str, ...],
    values_file: str | None,
    set_values: tuple[str, ...],
    userinfo: str | None,
    exceptions: tuple[str, ...],
    policy_report: bool,
    output_dir: str | None,
    output_format: str,
    audit_warn: bool,
    detailed_results: bool,
    remove_color: bool,
    registry: bool = False,
    insecure_registries: tuple[str, ...] = (),
    strict: bool = False,
) -> int:
    out = sys.stdout
    colour = colour_enabled(out, remove_color)
    try:
        policy_documents = load_documents(list(policies))
        exception_documents = load_documents(list(exceptions)) if exceptions else []
        if not policies_pass_check(policy_documents + exception_documents, strict):
            return 2
        policy_set = split_policies(policy_documents)
        exception_set = split_policies(exception_documents) if exceptions else None
        exception_list = policy_set.exceptions + (exception_set.exceptions if exception_set else [])
        loaded = [normalise_resource(d.data) for d in load_documents(list(resources))] if resources else []
        values = load_values(values_file) if values_file else Values()
        info = load_user_info(userinfo) if userinfo else RequestInfo()
        extra_values = parse_set_values(list(set_values))
    except (LoadError, ValueError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    if not loaded:
        print("Error: no resources given (use --resource/-r)", file=sys.stderr)
        return 2
    rule_count = sum(len(p.rules) for p in policy_set.kyverno)
    cel_documents = [d.data for d in policy_set.cel + policy_set.admission]
    cel_count = sum(1 for d in cel_documents if d.get("kind") != "PolicyException")
    print(f"Applying {rule_count + cel_count} policy rule(s) to {len(loaded)} resource(s)...", file=out)
    verifier = cache = None
    if registry:
        from stockade.cli.registry_access import make_image_verifier

        verifier, cache = make_image_verifier(insecure_registries)
    cel_run = None
    if cel_documents:
        from stockade.celpolicy.testing import CelPolicyRun

        # the given resources double as the "cluster": VAP params and resource.* lookups find them there
        cel_run = CelPolicyRun(
            documents=cel_documents,
            exception_documents=[d.data for d in exception_set.cel] if exception_set else [],
            cluster_objects=loaded,
            params=loaded,
            namespaces=values.namespaces,
            subresources=values.subresources,
            image_verifier=verifier,
        )
    engine = Engine(exceptions=exception_list, image_verifier=verifier, verification_cache=cache)
    counts: Counter[str] = Counter()
    report_rows: list[tuple[EngineResponse, Any, str]] = []
    outputs: list[dict[str, Any]] = []
    for resource in loaded:
        name = str((resource.get("metadata") or {}).get("name", ""))
        namespace = str((resource.get("metadata") or {}).get("namespace") or "")

        def values_for(policy: KyvernoPolicy, _name: str = name) -> dict[str, Any]:
            merged = values.for_resource(policy.name, _name)
            merged.update(extra_values)
            return merged

        request = Request(resource=resource, info=info, namespace_labels=values.namespace_labels.get(namespace, {}))
        result = apply_policies(engine, policy_set.kyverno, request, values_for=values_for)
        responses = list(result.responses)
        patched = result.patched_resource
        if cel_run is not None:
            operation = str({**values.global_values, **extra_values}.get("request.operation") or "CREATE")
            for response in cel_run.responses(patched or resource, operation, info, request.namespace_labels):
                responses.append(response)
                if getattr(response, "patched_resource", None) and response.rules and response.rules[0].rule_type == "Mutation":
                    patched = response.patched_resource
        if patched and patched != resource:
            outputs.append(patched)
        for response in responses:
            for rule in response.rules:
                outcome = report_result(response, rule, audit_warn)
                counts[outcome] += 1
                report_rows.append((response, rule, outcome))
                for generated in rule.generated_resources:
                    outputs.append(generated)
            failed = [(rule, report_result(response, rule, audit_warn)) for rule in response.rules]
            failed = [(rule, outcome) for rule, outcome in failed if outcome in ("fail", "error") or (detailed_results and outcome != "pass")]
            if failed:
                metadata = response.resource.get("metadata") or {}
                where = "/".join(p for p in (metadata.get("namespace") or "", response.resource.get("kind", ""), metadata.get("name", "")) if p)
                print(f"\npolicy {response.policy_name} -> resource {where} failed:", file=out)
                for index, (rule, outcome) in enumerate(failed, start=1):
                    print(f"{index}. {rule.name}: {paint(outcome, 'red' if outcome in ('fail', 'error') else 'yellow', colour)} {rule.message}", file=out)
    if output_dir and outputs:
        try:
            _write_outputs(output_dir, outputs, output_format)
        except OutputPathError as exc:
            print(f"Error: {exc}; nothing was written", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"Error: cannot write output {exc.filename or output_dir}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if policy_report:
        report = _policy_report(report_rows)
        print(json.dumps(report, indent=2) if output_format == "json" else yaml.safe_dump(report, sort_keys=False), file=out)
    print(f"\npass: {counts['pass']}, fail: {counts['fail']}, warn: {counts['warn']}, error: {counts['error']}, skip: {counts['skip']}", file=out)
    return 1 if counts["fail"] or counts["error"] else 0
