"""`stockade images`: scan registries, pick the latest tag like a Flux ImagePolicy, rewrite `$imagepolicy` markers.

`reconcile` runs ImageRepository/ImagePolicy objects from YAML files against a state directory (tags and
statuses as JSON files), so repeated runs behave like the controllers across restarts; `update` then
rewrites manifests from the stored (or file-provided) ImagePolicy statuses.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import yaml

from stockade.cli.common import CliInputError, check_stdin_use
from stockade.images.auth import CredentialError, CredentialStore
from stockade.images.reference import InvalidReferenceError
from stockade.images.registry import RegistryClient, RegistryError
from stockade.cli.policycheck import report_findings
from stockade.lint.check import check_documents
from stockade.policy.loader import STDIN_PATH, Document, LoadError, parse_yaml_documents, read_text, source_name
from stockade.reflector.imagepolicy import ImagePolicyReconciler
from stockade.reflector.markers import MarkerError, plan_updates, write_updates
from stockade.reflector.models import (
    API_GROUP,
    KIND_POLICY,
    KIND_REPOSITORY,
    ImageRef,
    ObjectKey,
    ReconcileResult,
    SpecError,
    duration_seconds,
    migrate_policy_status,
    object_key,
)
from stockade.reflector.policy import InvalidPolicyError, PolicyError, select_latest
from stockade.reflector.repository import (
    DEFAULT_EXCLUSION_LIST,
    ImageRepositoryReconciler,
    canonical_image_name,
    parse_repository_image,
    tags_revision,
)
from stockade.reflector.store import StoreError, TagStore

__all__ = ["images"]


@click.group("images", context_settings={"help_option_names": ["-h", "--help"]})
def images() -> None:
    """Scan registries, pick image policy tags, update manifests (Flux image automation, offline)."""


# -- shared registry options ----------------------------------------------------------------------------------------
def _registry_options(function: Any) -> Any:
    options = [
        click.option("--insecure", is_flag=True, help="Allow plain HTTP (or unverified TLS) for this registry."),
        click.option("--docker-config", type=click.Path(exists=True, dir_okay=False), help="Docker config.json with credentials (default: ~/.docker/config.json)."),
        click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="Extra CA bundle for the registry's TLS certificate."),
        click.option("--timeout", default="30s", show_default=True, help="Per-request timeout (Go duration)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _client(image: str, insecure: bool, docker_config: str | None, ca_file: str | None, timeout: str) -> tuple[RegistryClient, Any]:
    try:
        reference = parse_repository_image(image)
    except InvalidReferenceError as exc:
        raise CliInputError(str(exc)) from None
    try:
        seconds = duration_seconds(timeout, "--timeout") or 30.0
        credentials = CredentialStore.from_docker_config_file(docker_config)
    except (SpecError, CredentialError) as exc:
        raise CliInputError(str(exc)) from None
    client = RegistryClient(
        credentials=credentials,
        insecure_registries=[reference.registry] if insecure else [],
        ca_file=ca_file,
        timeout=seconds,
        retries=1,
        backoff=0.2,
    )
    return client, reference


def _registry_failure(exc: Exception) -> click.ClickException:
    return click.ClickException(f"registry error: {exc}")


@images.command("scan")
@click.argument("image")
@click.option("--exclude", "exclusions", multiple=True, help="Regexp of tags to drop (repeatable; default '^.*\\.sig$').")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_registry_options
def scan_command(image: str, exclusions: tuple[str, ...], output: str, insecure: bool, docker_config: str | None, ca_file: str | None, timeout: str) -> None:
    """List every tag of IMAGE (a repository, no tag), newest-looking first, like an ImageRepository scan."""
    from stockade.reflector.policy import compile_tag_filter

    client, reference = _client(image, insecure, docker_config, ca_file, timeout)
    try:
        patterns = [compile_tag_filter(p) for p in (exclusions or DEFAULT_EXCLUSION_LIST)]
    except InvalidPolicyError as exc:
        raise CliInputError(f"invalid --exclude: {exc}") from None
    try:
        with client:
            listed = client.list_tags(reference, page_size=1000)
    except (RegistryError, OSError) as exc:
        raise _registry_failure(exc) from None
    tags = sorted({t for t in listed if not any(p.search(t) for p in patterns)}, reverse=True)
    summary = {
        "canonicalImageName": canonical_image_name(reference),
        "tagCount": len(tags),
        "revision": tags_revision(tags),
        "tags": tags,
    }
    if output == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{summary['canonicalImageName']}: {len(tags)} tags (checksum {summary['revision']})")
    for tag in tags:
        click.echo(tag)


@images.command("latest")
@click.argument("image")
@click.option("--semver", "semver_range", metavar="RANGE", help="Semver range, e.g. '>=1.0.0 <2.0.0' or '^1.x-0'.")
@click.option("--alphabetical", is_flag=True, help="Order tags alphabetically.")
@click.option("--numerical", is_flag=True, help="Order tags as numbers.")
@click.option("--order", type=click.Choice(["asc", "desc"]), default="asc", show_default=True, help="For --alphabetical/--numerical: asc picks the highest.")
@click.option("--filter-pattern", help="Only tags matching this (unanchored, RE2) regexp.")
@click.option("--extract", help="Value to order by, e.g. '$1' or '$ts' from --filter-pattern groups.")
@click.option("--digest", "with_digest", is_flag=True, help="Also resolve the chosen tag's digest.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_registry_options
def latest_command(
    image: str, semver_range: str | None, alphabetical: bool, numerical: bool, order: str,
    filter_pattern: str | None, extract: str | None, with_digest: bool, output: str,
    insecure: bool, docker_config: str | None, ca_file: str | None, timeout: str,
) -> None:
    """Print the tag of IMAGE an ImagePolicy would choose (with --digest: image:tag@digest)."""
    chosen = [name for name, on in (("semver", semver_range is not None), ("alphabetical", alphabetical), ("numerical", numerical)) if on]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --semver RANGE, --alphabetical, --numerical")
    policy: dict[str, Any] = (
        {"semver": {"range": semver_range}} if chosen[0] == "semver" else {chosen[0]: {"order": order}}
    )
    if extract and filter_pattern is None:
        raise click.UsageError("--extract needs --filter-pattern")
    filter_tags = {"pattern": filter_pattern, "extract": extract or ""} if filter_pattern is not None else None
    client, reference = _client(image, insecure, docker_config, ca_file, timeout)
    try:
        select_latest([], policy, filter_tags)  # reject a bad policy before touching the network
    except InvalidPolicyError as exc:
        raise CliInputError(str(exc)) from None
    try:
        with client:
            tags = sorted(set(client.list_tags(reference, page_size=1000)), reverse=True)
            try:
                tag = select_latest(tags, policy, filter_tags)
            except PolicyError as exc:
                raise click.ClickException(str(exc)) from None
            if tag is None:
                raise click.ClickException(f"no tag of {image} satisfies the policy ({len(tags)} tags scanned)")
            digest = client.resolve_digest(reference.with_tag(tag)) if with_digest else ""
    except (RegistryError, OSError) as exc:
        raise _registry_failure(exc) from None
    ref = ImageRef(image, tag, digest)
    if output == "json":
        click.echo(json.dumps(ref.to_dict(), indent=2))
    else:
        click.echo(str(ref) if with_digest else tag)


# -- reconcile ------------------------------------------------------------------------------------------------------
def _yaml_files(paths: tuple[str, ...]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if raw != STDIN_PATH and path.is_dir():
            for found in sorted(path.rglob("*")):
                if found.suffix in (".yaml", ".yml") and found.is_file():
                    yield found
        else:
            yield path


def _load_documents(paths: tuple[str, ...], strict: bool = False) -> list[dict[str, Any]]:
    """Every document under ``paths``; the Flux objects among them pass the policy check first (schema, unknown
    fields: warnings, or errors with ``strict``)."""
    documents: list[Document] = []
    for file in _yaml_files(paths):
        name = str(file)  # "-" stays "-": standard input
        try:
            loaded = parse_yaml_documents(read_text(name), source_name(name))
        except LoadError as exc:
            raise CliInputError(str(exc)) from None
        for index, document in enumerate(loaded):
            if document is None:
                continue
            if not isinstance(document, dict):
                raise CliInputError(f"{source_name(name)}: document {index + 1} is not a mapping")
            documents.append(Document(document, source_name(name), index))
    report = check_documents(documents)
    if not report_findings(report, strict):
        raise CliInputError(f"{len(report.refused(strict))} object(s) refused by the check (see above)")
    return [document.data for document in documents]


def _is_kind(document: Mapping[str, Any], kind: str) -> bool:
    group = str(document.get("apiVersion") or "").split("/")[0]
    return document.get("kind") == kind and group == API_GROUP


class _Objects:
    """The objects of one CLI run, indexed for the reconcilers' look-ups."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.repositories: dict[ObjectKey, dict[str, Any]] = {}
        self.policies: dict[ObjectKey, dict[str, Any]] = {}
        self.secrets: dict[ObjectKey, dict[str, Any]] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        for document in documents:
            key = object_key(document)
            if _is_kind(document, KIND_REPOSITORY):
                self.repositories[key] = document
            elif _is_kind(document, KIND_POLICY):
                self.policies[key] = document
            elif document.get("kind") == "Secret" and document.get("apiVersion") == "v1":
                self.secrets[key] = document
            elif document.get("kind") == "Namespace" and document.get("apiVersion") == "v1":
                name = str((document.get("metadata") or {}).get("name") or "")
                labels = dict((document.get("metadata") or {}).get("labels") or {})
                labels.setdefault("kubernetes.io/metadata.name", name)
                self.namespace_labels[name] = labels

    def secret(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.secrets.get(ObjectKey(namespace, name))

    def labels(self, namespace: str) -> Mapping[str, str]:
        return self.namespace_labels.get(namespace, {"kubernetes.io/metadata.name": namespace})


def _with_stored_status(document: dict[str, Any], store: TagStore, kind: str) -> dict[str, Any]:
    """The state directory is the controller's memory: its status wins over a status written in the file."""
    stored = store.status(kind, object_key(document))
    if stored is not None:
        document = {**document, "status": stored}
    return document


def _result_line(kind: str, result: ReconcileResult) -> str:
    key = object_key(result.object)
    ready = next((c for c in result.status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Stalled" if result.stalled else ("Ready" if result.ready else "NotReady")
    message = ready.get("message", "") if ready else "suspended"
    reason = f" ({ready.get('reason')})" if ready and not result.ready else ""
    return f"{kind} {key}: {state}{reason}: {message}"


@images.command("reconcile")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option("--store", "store_dir", required=True, type=click.Path(file_okay=False), help="State directory (tags and statuses) kept between runs.")
@click.option("--force", is_flag=True, help="Scan every repository now, even if its interval has not elapsed.")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="Extra CA bundle for registries' TLS certificates.")
@click.option("--output", "-o", type=click.Choice(["text", "yaml", "json"]), default="text", show_default=True)
@click.option("--events", "show_events", is_flag=True, help="Also print the events Flux would record.")
@click.option("--strict", is_flag=True, help="Refuse objects with unknown fields instead of warning.")
def reconcile_command(paths: tuple[str, ...], store_dir: str, force: bool, ca_file: str | None, output: str, show_events: bool, strict: bool) -> None:
    """Reconcile ImageRepository and ImagePolicy objects from PATHS (YAML files or directories).

    Secrets (kubernetes.io/dockerconfigjson) and Namespaces in PATHS serve secretRef and accessFrom.
    A path - reads standard input. Exits 1 when any object is not Ready.
    """
    check_stdin_use({"PATHS": paths})
    objects = _Objects(_load_documents(paths, strict))
    if not objects.repositories and not objects.policies:
        raise CliInputError(f"no ImageRepository or ImagePolicy objects found in {', '.join(source_name(p) for p in paths)}")
    store = TagStore(store_dir)
    repositories = ImageRepositoryReconciler(store, secrets=objects.secret, ca_file=ca_file)
    results: list[tuple[str, ReconcileResult]] = []
    reconciled_repositories: dict[ObjectKey, dict[str, Any]] = {}
    try:
        for key, document in objects.repositories.items():
            result = repositories.reconcile(_with_stored_status(document, store, KIND_REPOSITORY), force=force)
            store.save_status(KIND_REPOSITORY, key, result.status)
            reconciled_repositories[key] = result.object
            results.append((KIND_REPOSITORY, result))
        policies = ImagePolicyReconciler(
            store,
            reconciled_repositories.get,
            secrets=objects.secret,
            ca_file=ca_file,
            namespace_labels=objects.labels,
        )
        for key, document in objects.policies.items():
            result = policies.reconcile(_with_stored_status(document, store, KIND_POLICY))
            store.save_status(KIND_POLICY, key, result.status)
            results.append((KIND_POLICY, result))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if output == "yaml":
        click.echo(yaml.safe_dump_all([r.object for _, r in results], sort_keys=False), nl=False)
    elif output == "json":
        click.echo(json.dumps([r.object for _, r in results], indent=2))
    else:
        for kind, result in results:
            click.echo(_result_line(kind, result))
    for kind, result in results:
        for warning in result.warnings:
            click.echo(f"warning: {kind} {object_key(result.object)}: {warning}; ignored", err=True)
    if show_events:
        for kind, result in results:
            for event in result.events:
                click.echo(f"event {kind} {object_key(result.object)} {event.type} {event.reason}: {event.message}", err=True)
    sys.exit(0 if all(r.ready or (r.object.get("spec") or {}).get("suspend") for _, r in results) else 1)


images.add_command(reconcile_command, "apply")


def _register_controller() -> None:
    from stockade.cli.images_controller_cmd import controller

    images.add_command(controller)


_register_controller()


# -- update ---------------------------------------------------------------------------------------------------------
def _policy_refs(policy_paths: tuple[str, ...], store_dir: str | None) -> dict[ObjectKey, ImageRef]:
    refs: dict[ObjectKey, ImageRef] = {}
    if store_dir is not None:
        for key, status in TagStore(store_dir).statuses(KIND_POLICY).items():
            status = dict(status)
            migrate_policy_status(status)
            ref = ImageRef.from_dict(status.get("latestRef"))
            if ref is not None:
                refs[key] = ref
    if policy_paths:
        for document in _load_documents(policy_paths):
            if not _is_kind(document, KIND_POLICY):
                continue
            status = dict(document.get("status") or {})
            migrate_policy_status(status)
            ref = ImageRef.from_dict(status.get("latestRef"))
            if ref is not None:
                refs[object_key(document)] = ref
    return refs


@images.command("update")
@click.argument("path", type=click.Path(exists=True))
@click.option("--policies", "policy_paths", multiple=True, type=click.Path(exists=True, allow_dash=True), help="YAML with ImagePolicy objects carrying status.latestRef (repeatable; - reads standard input).")
@click.option("--store", "store_dir", type=click.Path(exists=True, file_okay=False), help="State directory written by 'images reconcile'.")
@click.option("--dry-run", is_flag=True, help="Show a diff instead of writing files.")
def update_command(path: str, policy_paths: tuple[str, ...], store_dir: str | None, dry_run: bool) -> None:
    """Rewrite '# {"$imagepolicy": "ns:name[:tag|:name|:digest]"}' markers under PATH.

    Statuses in --policies files win over the --store for the same policy.
    """
    if not policy_paths and store_dir is None:
        raise click.UsageError("give --policies FILE and/or --store DIR to read ImagePolicy statuses from")
    check_stdin_use({"--policies": policy_paths})
    refs = _policy_refs(policy_paths, store_dir)

    def resolve(namespace: str, name: str) -> dict[str, object] | None:
        ref = refs.get(ObjectKey(namespace, name))
        return None if ref is None else {"image": ref.name, "tag": ref.tag, "digest": ref.digest}

    try:
        updates = plan_updates(path, resolve)
    except (MarkerError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if dry_run:
        for update in updates:
            click.echo(
                "".join(
                    difflib.unified_diff(
                        update.old_text.splitlines(keepends=True),
                        update.new_text.splitlines(keepends=True),
                        fromfile=update.label if update.label.startswith("/") else f"a/{update.label}",
                        tofile=update.label if update.label.startswith("/") else f"b/{update.label}",
                    )
                ),
                nl=False,
            )
    else:
        try:
            write_updates(updates)
        except MarkerError as exc:
            raise click.ClickException(f"{exc}; no file was changed") from None
    count = sum(len(update.changes) for update in updates)
    for update in updates:
        for change in update.changes:
            click.echo(f"{change.file}:{change.line}: {change.old} -> {change.new}", err=dry_run)
    verb = "would update" if dry_run else "updated"
    click.echo(f"{verb} {count} value(s) in {len(updates)} file(s)", err=dry_run)
