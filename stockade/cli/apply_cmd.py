"""``stockade apply``: evaluate policies against resource files and summarise like ``kyverno apply``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from typing import Any

import yaml

from stockade.cli.common import FAILURE_EXIT, USAGE_EXIT, CliInputError, check_stdin_use, print_error
from stockade.cli.policycheck import policies_pass_check
import stockade.celpolicy  # noqa: F401  (registers the engine's validate.cel handler)
from stockade.celpolicy.request import kind_to_resource
from stockade.engine.engine import Engine, Request
from stockade.engine.match import RequestInfo, parse_kind_selector
from stockade.engine.processor import apply_policies
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, EngineResponse, report_result
from stockade.kyvernotest.values import Values, load_user_info, load_values, parse_set_values
from stockade.engine.wildcard import match as wildcard_match
from stockade.policy.loader import STDIN_PATH, LoadError, expand_paths, load_documents, source_name
from stockade.policy.model import RULE_TYPE_GENERATION, RULE_TYPE_MUTATION, KyvernoPolicy
from stockade.policy.resources import PolicySet, normalise_resource, split_policies
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
    """An output file cannot be written as asked: its name (derived from a resource) would land outside the ``-o``
    directory, or it would overwrite one of the command's input files."""


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


def _render(resource: dict[str, Any], output_format: str) -> str:
    return json.dumps(resource, indent=2) + "\n" if output_format == "json" else yaml.safe_dump(resource, sort_keys=False)


def render_stream(resources: list[dict[str, Any]], output_format: str) -> str:
    """Resources as one stream: YAML documents separated by ``---``, or JSON objects one after another."""
    return ("---\n" if output_format == "yaml" else "").join(_render(r, output_format) for r in resources)


def _input_files(paths: list[str]) -> set[tuple[int, int]]:
    """(device, inode) of every input file (directories walked as the loader walks them): what ``-o`` must not overwrite."""
    identities: set[tuple[int, int]] = set()
    for path in expand_paths([p for p in paths if p != STDIN_PATH]):
        try:
            status = os.stat(path)
        except OSError:
            continue
        identities.add((status.st_dev, status.st_ino))
    return identities


def _is_input(path: str, inputs: set[tuple[int, int]]) -> bool:
    try:
        status = os.stat(path)
    except OSError:
        return False
    return (status.st_dev, status.st_ino) in inputs


def _is_single_file(target: str) -> bool:
    """``-o x.yaml`` (not an existing directory) writes one file holding every resource; anything else is a directory."""
    return target.endswith((".yaml", ".yml", ".json")) and not os.path.isdir(target)


def _plan_outputs(target: str, resources: list[dict[str, Any]], output_format: str) -> list[tuple[str, str]]:
    """(path, text) of every file ``-o target`` writes, all rendered before anything touches the disk."""
    if _is_single_file(target):
        return [(os.path.abspath(target), render_stream(resources, output_format))]
    paths = _output_paths(target, resources, ".json" if output_format == "json" else ".yaml")
    return [(path, _render(resource, output_format)) for path, resource in zip(paths, resources)]


def _missing_directories(directory: str) -> list[str]:
    """``directory`` and the parents of it that do not exist yet, outermost first (what makedirs would create)."""
    missing: list[str] = []
    current = os.path.abspath(directory)
    while not os.path.exists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return list(reversed(missing))


def write_outputs(target: str, resources: list[dict[str, Any]], output_format: str, input_paths: list[str]) -> list[str]:
    """Write every output file or none: render all, refuse to overwrite an input, write temporary files beside their
    destinations, then rename them into place. On any error the temporary files, the files this call created and the
    directories it created are removed (a file that existed before and was already replaced cannot be restored: the
    renames come last, after every write succeeded, so only a failing rename can leave that state). Returns the paths.
    """
    planned = _plan_outputs(target, resources, output_format)
    inputs = _input_files(input_paths)
    for path, _ in planned:
        if _is_input(path, inputs):
            raise OutputPathError(f"output file {path} is one of the input files; refusing to overwrite it")
    created_directories = [] if _is_single_file(target) else _missing_directories(target)
    temporary: list[tuple[str, str]] = []
    renamed: list[str] = []
    existed = {path for path, _ in planned if os.path.lexists(path)}
    try:
        if created_directories:
            os.makedirs(created_directories[-1])
        for path, text in planned:
            descriptor, temporary_path = tempfile.mkstemp(prefix=".stockade-", suffix=".tmp", dir=os.path.dirname(path))
            temporary.append((temporary_path, path))
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), 0o644)
                handle.write(text)
        for temporary_path, path in temporary:
            os.replace(temporary_path, path)  # replaces a name, never follows a symlink planted at it
            renamed.append(path)
    except BaseException:
        for temporary_path, _ in temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary_path)
        for path in renamed:
            if path not in existed:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        for directory in reversed(created_directories):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    return [path for path, _ in planned]


# Kinds whose pod template autogen rules (Kyverno's and the CEL policies') cover when a rule names Pods.
_POD_CONTROLLER_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job", "CronJob"})


def _kinds_of_filters(match: dict[str, Any]) -> tuple[str, list[list[str] | None]]:
    """("any"|"all", the kinds each filter names, None for a filter naming none) of a Kyverno match block."""
    for mode in ("any", "all"):
        if match.get(mode):
            return mode, [list(((f or {}).get("resources") or {}).get("kinds") or []) or None for f in match[mode]]
    return "any", [list((match.get("resources") or {}).get("kinds") or []) or None]


def _kyverno_rule_may_apply(rule: dict[str, Any], kind: str) -> bool:
    """Whether the kinds named in the rule's match block leave ``kind`` possible (group, version and subresource
    parts are not judged here: only a rule that cannot apply to the kind at all says no)."""
    match = rule.get("match")
    if not isinstance(match, dict):
        return True
    mode, filters = _kinds_of_filters(match)

    def fits(kinds: list[str] | None) -> bool:
        return kinds is None or any(wildcard_match(parse_kind_selector(str(k))[2], kind) for k in kinds)

    return all(fits(f) for f in filters) if mode == "all" else any(fits(f) for f in filters)


def _cel_policy_may_apply(document: dict[str, Any], kind: str, group: str) -> bool:
    """Whether ``matchConstraints.resourceRules`` (resources and API groups) leave the kind possible; a policy
    evaluated on other payloads (JSON, authorization modes) or without resource rules is taken as applicable."""
    spec = document.get("spec") or {}
    mode = (spec.get("evaluation") or {}).get("mode") if isinstance(spec.get("evaluation"), dict) else None
    constraints = spec.get("matchConstraints")
    if mode not in (None, "", "Kubernetes") or not isinstance(constraints, dict) or not constraints.get("resourceRules"):
        return True
    plural = kind_to_resource(kind)
    for rule in constraints["resourceRules"]:
        if not isinstance(rule, dict):
            continue
        resources = {str(r).partition("/")[0] for r in rule.get("resources") or []}
        groups = {str(g) for g in rule.get("apiGroups") or []}
        if resources & {"*", plural} and groups & {"*", group}:
            return True
        if kind in _POD_CONTROLLER_KINDS and "pods" in resources:
            return True
    return False


def _kinds_to_check(resource: dict[str, Any], subresources: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, API group) the resource can be matched as: itself and, for a subresource kind the values file
    declares (Scale, Binding...), its parent resource, which is what rules name (``Deployment/scale``)."""
    kind = str(resource.get("kind", ""))
    kinds = [(kind, str(resource.get("apiVersion", "")).rpartition("/")[0])]
    for entry in subresources:
        if not isinstance(entry, dict):
            continue
        subresource, parent = entry.get("subresource") or {}, entry.get("parentResource") or {}
        if isinstance(subresource, dict) and isinstance(parent, dict) and subresource.get("kind") == kind and parent.get("kind"):
            kinds.append((str(parent["kind"]), str(parent.get("group") or "")))
    return kinds


def _anything_applies(policy_set: PolicySet, resources: list[dict[str, Any]], subresources: Sequence[dict[str, Any]] = ()) -> bool:
    """Whether some rule (or CEL policy) of the set names the kind of some resource: otherwise nothing is evaluated."""
    cel_policies = [d.data for d in policy_set.cel if d.kind != "PolicyException"] + [d.data for d in policy_set.admission if not d.kind.endswith("Binding")]
    for resource in resources:
        for kind, group in _kinds_to_check(resource, subresources):
            if any(_kyverno_rule_may_apply(rule.raw, kind) for policy in policy_set.kyverno for rule in policy.rules):
                return True
            if any(_cel_policy_may_apply(document, kind, group) for document in cel_policies):
                return True
    return False


def _named(paths: tuple[str, ...] | list[str]) -> str:
    return ", ".join(source_name(p) for p in paths)


def _resource_path(resource: dict[str, Any]) -> str:
    """``namespace/Kind/name`` as Kyverno's CLI names a resource in its messages (``/Kind/name`` when cluster-scoped)."""
    metadata = resource.get("metadata") or {}
    path = f"{metadata.get('namespace') or ''}/{resource.get('kind', '')}/{metadata.get('name', '')}"
    return "JSON payload" if path == "//" else path


def _applied_block(policy_name: str, resource_path: str, resource: dict[str, Any], section: str, done: str) -> str:
    """What Kyverno's CLI prints for a mutated or generated resource when no ``-o`` is given."""
    return f"\npolicy {policy_name} applied to {resource_path}:\n{yaml.safe_dump(resource, sort_keys=True)}\n---\n\n\n{section}:\n{done}"


def _is_mutation(response: EngineResponse) -> bool:
    return bool(response.rules) and response.rules[0].rule_type == RULE_TYPE_MUTATION


def _print_outcome(response: EngineResponse, audit_warn: bool, detailed_results: bool, out: Any) -> None:
    """Kyverno's per-response lines: skipped and failed mutations, failed generations, then the failed rules."""
    where = _resource_path(response.resource)
    for rule in response.rules:
        if rule.rule_type == RULE_TYPE_MUTATION and rule.status == SKIP:
            print(f"\nskipped mutate policy {response.policy_name} -> resource {where}", file=out)
        elif rule.rule_type == RULE_TYPE_MUTATION and rule.status == ERROR:
            print(f"\nerror while applying mutate policy {response.policy_name} -> resource {where} \nerror:  {rule.message}", file=out)
        elif rule.rule_type == RULE_TYPE_GENERATION and rule.status == ERROR:
            print(f"\nerror while applying generate policy {response.policy_name} -> resource {where} \nerror: {rule.message}", file=out)
    # Kyverno lists the failed rules; an error of another rule type is listed too rather than only counted
    listed = [
        rule
        for rule in response.rules
        if rule.status == FAIL
        or (rule.status == ERROR and rule.rule_type not in (RULE_TYPE_MUTATION, RULE_TYPE_GENERATION))
        or (detailed_results and rule.status != PASS)
    ]
    if not listed:
        return
    failed = [rule for rule in listed if rule.status == FAIL]
    as_warning = audit_warn and bool(failed) and all(report_result(response, rule, audit_warn) != FAIL for rule in failed)
    print(f"policy {response.policy_name} -> resource {where} failed{' as audit warning' if as_warning else ''}:", file=out)
    for index, rule in enumerate(listed, start=1):
        print(f"{index} - {rule.name} {rule.message or 'validation failed'}", file=out)


def _exit_code(counts: Counter[str], warn_exit_code: int, warn_no_pass: bool, out: Any) -> int:
    """Kyverno's: 1 on a failure or an error; ``--warn-exit-code`` on a warning; with ``--warn-no-pass``, that code
    (0 unless given) when nothing passed."""
    if counts["fail"] or counts["error"]:
        return 1
    if counts["warn"] and warn_exit_code:
        print(f"exit as warnExitCode is {warn_exit_code}", file=out)
        return warn_exit_code
    if warn_no_pass and not counts["pass"]:
        print("exit as no objects satisfied policy", file=out)
        return warn_exit_code
    return 0


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
    cluster: bool = False,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    cluster_wide_resources: bool = False,
    warn_exit_code: int = 0,
    warn_no_pass: bool = False,
) -> int:
    del remove_color  # Kyverno colours its table only; these lines never are
    to_stdout = output_dir == STDIN_PATH  # "-o -": the resources are the output
    # Machine-readable output on stdout is all that goes there: progress, failures and the summary go to stderr.
    out = sys.stderr if (policy_report or to_stdout) else sys.stdout
    try:
        check_stdin_use({"POLICY": policies, "--resource": [] if cluster else resources, "--values-file": [values_file], "--userinfo": [userinfo], "--exception": exceptions})
        if policy_report and to_stdout:
            raise CliInputError("--policy-report and -o - both print on stdout: write the resources to a file or directory instead")
        if (namespace or kubeconfig or context or cluster_wide_resources) and not cluster:
            raise CliInputError("--namespace, --kubeconfig, --context and --cluster-wide-resources apply to --cluster only")
        if not cluster:
            for path in resources:
                if path != STDIN_PATH and not os.path.exists(path):
                    raise CliInputError(f"Invalid value for '--resource' / '-r': Path {path!r} does not exist.")
    except CliInputError as exc:
        print_error(exc.message)
        return USAGE_EXIT
    try:
        policy_documents = load_documents(list(policies))
        exception_documents = load_documents(list(exceptions)) if exceptions else []
        if not policies_pass_check(policy_documents + exception_documents, strict, offline=True):
            return USAGE_EXIT
        policy_set = split_policies(policy_documents)
        exception_set = split_policies(exception_documents) if exceptions else None
        exception_list = policy_set.exceptions + (exception_set.exceptions if exception_set else [])
        loaded = [normalise_resource(d.data) for d in load_documents(list(resources))] if resources and not cluster else []
        values = load_values(values_file) if values_file else Values()
        info = load_user_info(userinfo) if userinfo else RequestInfo()
        extra_values = parse_set_values(list(set_values))
    except (LoadError, ValueError) as exc:
        print_error(str(exc))
        return USAGE_EXIT
    # A CI job must not go green on zero checks: no policy, or no rule for any given kind, is an error.
    if not policy_set.count:
        print_error(f"no policy found in {_named(policies)} (nothing to evaluate)")
        return USAGE_EXIT
    live = None
    namespace_objects: dict[str, dict[str, Any]] = {}
    if cluster:
        from stockade.cli import apply_cluster

        try:
            live = apply_cluster.connect(kubeconfig, context)
            kinds = apply_cluster.kinds_to_list(policy_set, live)
            loaded = apply_cluster.list_resources(live, kinds, namespace=namespace or "", cluster_wide=cluster_wide_resources, names=resources)
            namespace_objects = apply_cluster.namespaces(live)
        except (apply_cluster.ClusterUnavailable, apply_cluster.ClusterResourceMissing) as exc:
            print_error(str(exc))
            return FAILURE_EXIT
    else:
        if not loaded:
            print_error("no resources given (use --resource/-r)" if not resources else f"no resources found in {_named(resources)}")
            return USAGE_EXIT
        if not _anything_applies(policy_set, loaded, values.subresources):
            kinds_named = ", ".join(sorted({str(r.get("kind", "")) for r in loaded}))
            print_error(f"no rule of the policies in {_named(policies)} applies to the kinds of the resources in {_named(resources)} ({kinds_named}): nothing to evaluate")
            return USAGE_EXIT
    rule_count = sum(len(p.rules) for p in policy_set.kyverno)
    cel_documents = [d.data for d in policy_set.cel + policy_set.admission]
    cel_count = sum(1 for d in cel_documents if d.get("kind") != "PolicyException" and not str(d.get("kind", "")).endswith("Binding"))
    exception_count = len(exception_set.exceptions) + sum(1 for d in exception_set.cel if d.kind == "PolicyException") if exception_set else 0
    with_exceptions = f" with {exception_count} exception(s)" if exception_count else ""
    print(f"\nApplying {rule_count + cel_count} policy rule(s) to {len(loaded)} resource(s){with_exceptions}...", file=out)
    verifier = cache = None
    # against a cluster, images are verified in their registries as Kyverno's CLI and the webhook do; offline only
    # with --registry
    if registry or cluster:
        from stockade.cli.registry_access import make_image_verifier

        verifier, cache = make_image_verifier(insecure_registries)
    cel_run = None
    if cel_documents:
        from stockade.celpolicy.evaluator import GeneratedPlacement
        from stockade.celpolicy.testing import CelPolicyRun

        cel_exceptions = [d.data for d in exception_set.cel] if exception_set else []
        if live is not None:
            from stockade.cli import apply_cluster

            # the cluster answers: resource.* lookups, paramRef objects, namespaceObject; generator.Apply places
            # its objects as it would in that cluster
            cel_run = CelPolicyRun(
                documents=cel_documents,
                exception_documents=cel_exceptions,
                params=apply_cluster.admission_params(policy_set, live),
                namespaces={**namespace_objects, **values.namespaces},
                subresources=values.subresources,
                image_verifier=verifier,
                live_providers=apply_cluster.cel_providers(live),
                generate_placement=GeneratedPlacement(cluster=True, kind_namespaced=live.kind_namespaced),
            )
        else:
            # the given resources double as the "cluster": VAP params and resource.* lookups find them there
            cel_run = CelPolicyRun(
                documents=cel_documents,
                exception_documents=cel_exceptions,
                cluster_objects=loaded,
                params=loaded,
                namespaces=values.namespaces,
                subresources=values.subresources,
                image_verifier=verifier,
            )
    if live is not None:
        engine = Engine(
            providers=live.providers(), resource_lookup=live.lookup, exceptions=exception_list, image_verifier=verifier, verification_cache=cache
        )
    else:
        engine = Engine(exceptions=exception_list, image_verifier=verifier, verification_cache=cache)
    print_resources = output_dir is None  # Kyverno prints mutated and generated resources unless -o names a target
    counts: Counter[str] = Counter()
    report_rows: list[tuple[EngineResponse, Any, str]] = []
    outputs: list[dict[str, Any]] = []
    all_responses: list[EngineResponse] = []
    for resource in loaded:
        name = str((resource.get("metadata") or {}).get("name", ""))
        resource_namespace = str((resource.get("metadata") or {}).get("namespace") or "")

        def values_for(policy: KyvernoPolicy, _name: str = name) -> dict[str, Any]:
            merged = values.for_resource(policy.name, _name)
            merged.update(extra_values)
            return merged

        labels = values.namespace_labels.get(resource_namespace, {})
        if not labels and live is not None and resource_namespace and resource.get("kind") != "Namespace":
            found = ((namespace_objects.get(resource_namespace) or {}).get("metadata") or {}).get("labels") or {}
            labels = {str(k): str(v) for k, v in found.items()}
        request = Request(resource=resource, info=info, namespace_labels=labels)
        result = apply_policies(engine, policy_set.kyverno, request, values_for=values_for)
        responses = list(result.responses)
        patched = result.patched_resource
        if cel_run is not None:
            operation = str({**values.global_values, **extra_values}.get("request.operation") or "CREATE")
            for response in cel_run.responses(patched or resource, operation, info, request.namespace_labels):
                responses.append(response)
                if getattr(response, "patched_resource", None) and _is_mutation(response):
                    patched = response.patched_resource
        if patched and patched != resource:
            outputs.append(patched)
        where = _resource_path(resource)
        for response in responses:
            if print_resources and _is_mutation(response):
                print(_applied_block(response.policy_name, where, response.patched_resource or resource, "Mutation", "Mutation has been applied successfully."), end="", file=out)
            for rule in response.rules:
                outcome = report_result(response, rule, audit_warn)
                counts[outcome] += 1
                report_rows.append((response, rule, outcome))
                for generated in rule.generated_resources:
                    outputs.append(generated)
                    if print_resources:
                        print(_applied_block(response.policy_name, where, generated, "Generate", "Generation completed successfully."), end="", file=out)
        all_responses.extend(responses)
    if print_resources and any(_is_mutation(r) or any(rule.generated_resources for rule in r.rules) for r in all_responses):
        print(file=out)
    for response in all_responses:
        _print_outcome(response, audit_warn, detailed_results, out)
    if to_stdout:
        sys.stdout.write(render_stream(outputs, output_format))
    elif output_dir and outputs:
        inputs = [*policies, *([] if cluster else resources), *exceptions, *(p for p in (values_file, userinfo) if p)]
        try:
            write_outputs(output_dir, outputs, output_format, inputs)
        except OutputPathError as exc:
            print_error(f"{exc}; nothing was written")
            return USAGE_EXIT
        except OSError as exc:
            print_error(f"cannot write output {exc.filename or output_dir}: {exc.strerror or exc}; nothing was written")
            return USAGE_EXIT
    if policy_report:
        report = _policy_report(report_rows)
        print(json.dumps(report, indent=2) if output_format == "json" else yaml.safe_dump(report, sort_keys=False), file=sys.stdout)
    print(f"\npass: {counts['pass']}, fail: {counts['fail']}, warn: {counts['warn']}, error: {counts['error']}, skip: {counts['skip']} ", file=out)
    return _exit_code(counts, warn_exit_code, warn_no_pass, out)
