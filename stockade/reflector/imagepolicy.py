"""ImagePolicy reconcile: elect the latest tag from stored tags and (optionally) reflect its digest.

Safety choices follow Flux after PR 368: the last good `latestRef` is never cleared by a failure; an
invalid policy, an invalid repository image or `Always` without `interval` stall (no retry loop); an
`interval` without `Always` is ignored (with the CRD's "only accepted" message as a warning); the
digest is fetched for the elected tag only; a digest change under the same tag changes `latestRef`
and the Ready message, and therefore produces a Normal event.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Mapping
from typing import Any

from stockade.images.auth import CredentialError
from stockade.images.reference import InvalidReferenceError
from stockade.images.registry import RegistryError
from stockade.reflector import models
from stockade.reflector.models import (
    Event,
    ImageRef,
    ObjectKey,
    ReconcileResult,
    SpecError,
    duration_seconds,
    mark_not_ready,
    mark_ready,
    mark_stalled,
    migrate_policy_status,
    notify,
    object_key,
)
from stockade.reflector.policy import (
    EMPTY_LIST_MESSAGE,
    NO_MATCH_MESSAGE,
    InvalidPolicyError,
    PolicyError,
    apply_tag_filter,
    select_latest,
)
from stockade.reflector.repository import (
    RECONCILE_REQUEST_ANNOTATION,
    ClientFactory,
    SecretLookup,
    ServiceAccountLookup,
    default_client_factory,
    parse_repository_image,
    registry_access,
)
from stockade.reflector.store import TagStore

__all__ = [
    "DIGEST_POLICIES",
    "INTERVAL_ONLY_WITH_ALWAYS",
    "ImagePolicyReconciler",
    "RepositoryLookup",
    "ready_message",
]

NEVER, IF_NOT_PRESENT, ALWAYS = "Never", "IfNotPresent", "Always"
DIGEST_POLICIES = (NEVER, IF_NOT_PRESENT, ALWAYS)
DEPENDENCY_REQUEUE_SECONDS = 30.0
DEFAULT_ALWAYS_INTERVAL_SECONDS = 600.0
INTERVAL_ONLY_WITH_ALWAYS = "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"

RepositoryLookup = Callable[[ObjectKey], "Mapping[str, Any] | None"]
NamespaceLabels = Callable[[str], "Mapping[str, str]"]


def ready_message(latest: ImageRef, previous: ImageRef | None) -> str:
    """`Latest image tag for <name> resolved to <tag>[ with digest D][ (previously name:tag[@d])]`."""
    message = f"Latest image tag for {latest.name} resolved to {latest.tag}"
    if latest.digest:
        message += f" with digest {latest.digest}"
    if previous is not None and previous != latest:
        message += f" (previously {previous})"
    return message


def _default_namespace_labels(namespace: str) -> Mapping[str, str]:
    return {"kubernetes.io/metadata.name": namespace}


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class ImagePolicyReconciler:
    """Reconcile ImagePolicies against the tags a `ImageRepositoryReconciler` stored."""

    def __init__(
        self,
        store: TagStore,
        repositories: RepositoryLookup,
        *,
        secrets: SecretLookup | None = None,
        client_factory: ClientFactory = default_client_factory,
        ca_file: str | None = None,
        clock: Callable[[], datetime.datetime] = _utcnow,
        namespace_labels: NamespaceLabels = _default_namespace_labels,
        service_accounts: ServiceAccountLookup | None = None,
    ) -> None:
        self.service_accounts = service_accounts
        self.store = store
        self.repositories = repositories
        self.secrets = secrets
        self.client_factory = client_factory
        self.ca_file = ca_file
        self.clock = clock
        self.namespace_labels = namespace_labels

    def reconcile(self, policy: Mapping[str, Any]) -> ReconcileResult:
        obj: dict[str, Any] = copy.deepcopy(dict(policy))
        status = obj.setdefault("status", {})
        migrate_policy_status(status)
        before = copy.deepcopy(obj)
        result = ReconcileResult(obj)
        spec = obj.get("spec") or {}
        if spec.get("suspend"):
            result.events.append(Event(models.EVENT_TRACE, "Suspended", "reconciliation is suspended"))
            return result
        now = self.clock()
        key = object_key(obj)
        requested = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        if requested:  # Flux marks the request handled whatever the outcome
            status["lastHandledReconcileAt"] = requested

        # 1. spec checks that no retry can fix
        reflection = spec.get("digestReflectionPolicy") or NEVER
        if reflection not in DIGEST_POLICIES:
            return self._stall(result, before, now, models.INVALID_POLICY,
                               f"invalid spec.digestReflectionPolicy {reflection!r}: must be one of {', '.join(DIGEST_POLICIES)}")
        if reflection == ALWAYS and spec.get("interval") is None:
            return self._stall(result, before, now, models.INTERVAL_NOT_CONFIGURED,
                               "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'")
        if reflection == ALWAYS:
            try:
                interval = duration_seconds(spec.get("interval"), "spec.interval")
            except SpecError as exc:
                return self._stall(result, before, now, models.INVALID_POLICY, str(exc))
            result.requeue_after = interval or DEFAULT_ALWAYS_INTERVAL_SECONDS
        elif spec.get("interval") is not None:
            # Flux's CRD rejects this at admission; its reconciler, which is what runs offline, ignores it.
            result.warnings.append(INTERVAL_ONLY_WITH_ALWAYS)

        # 2. the repository
        repo_ref = spec.get("imageRepositoryRef") or {}
        repo_key = ObjectKey(str(repo_ref.get("namespace") or key.namespace), str(repo_ref.get("name") or ""))
        repository = self.repositories(repo_key)
        if repository is None:
            return self._fail(result, before, now, models.DEPENDENCY_NOT_READY,
                              f"referenced ImageRepository '{repo_key}' not found", DEPENDENCY_REQUEUE_SECONDS)
        if repo_key.namespace != key.namespace and not self._access_allowed(repository, key.namespace):
            return self._fail(result, before, now, models.ACCESS_DENIED,
                              f"access denied to ImageRepository '{repo_key}' from namespace '{key.namespace}'",
                              DEPENDENCY_REQUEUE_SECONDS)
        image = str((repository.get("spec") or {}).get("image") or "")
        try:
            parse_repository_image(image)
        except InvalidReferenceError as exc:
            return self._stall(result, before, now, models.IMAGE_URL_INVALID,
                               f"ImageRepository '{repo_key}' has an invalid image: {exc}")

        # 3. elect a tag
        tags = self.store.tags(repo_key)
        try:
            latest_tag = select_latest(tags or [], spec.get("policy") or {}, spec.get("filterTags"))
        except InvalidPolicyError as exc:
            return self._stall(result, before, now, models.INVALID_POLICY, str(exc))
        except PolicyError as exc:
            return self._fail(result, before, now, models.FAILURE, str(exc), None)
        if not tags:
            return self._fail(result, before, now, models.DEPENDENCY_NOT_READY,
                              f"retrying in {DEPENDENCY_REQUEUE_SECONDS:.0f}s error: no tags in database",
                              DEPENDENCY_REQUEUE_SECONDS)
        if latest_tag is None:
            message = EMPTY_LIST_MESSAGE if spec.get("filterTags") and not self._any_filtered(tags, spec) else NO_MATCH_MESSAGE
            return self._fail(result, before, now, models.FAILURE, message, result.requeue_after)

        # 4. digest, for the elected tag only
        current = ImageRef.from_dict(status.get("latestRef"))
        try:
            new_ref = self._with_digest(ImageRef(image, latest_tag), current, reflection, repository)
        except (RegistryError, OSError, CredentialError, InvalidReferenceError, SpecError) as exc:
            return self._fail(result, before, now, models.FAILED,
                              f"failed fetching digest of {image}:{latest_tag}: {exc}", result.requeue_after or 60.0)
        if new_ref != current:
            if current is not None:
                status["observedPreviousRef"] = current.to_dict()
            status["latestRef"] = new_ref.to_dict()
        previous = ImageRef.from_dict(status.get("observedPreviousRef"))
        mark_ready(obj, ready_message(new_ref, previous), now)
        result.events.append(notify(before, obj))
        return result

    # -- helpers --------------------------------------------------------------------------------------------------
    @staticmethod
    def _any_filtered(tags: list[str], spec: Mapping[str, Any]) -> bool:
        filter_tags = spec.get("filterTags") or {}
        return bool(apply_tag_filter(tags, str(filter_tags.get("pattern") or ""), str(filter_tags.get("extract") or "")))

    def _with_digest(
        self, ref: ImageRef, current: ImageRef | None, reflection: str, repository: Mapping[str, Any]
    ) -> ImageRef:
        if reflection == NEVER:
            return ref
        if (
            reflection == IF_NOT_PRESENT
            and current is not None
            and current.name == ref.name
            and current.tag == ref.tag
            and current.digest
        ):
            return ImageRef(ref.name, ref.tag, current.digest)
        access = registry_access(repository, self.secrets, self.ca_file, self.service_accounts)
        client = self.client_factory(access)
        try:
            digest = client.resolve_digest(access.reference.with_tag(ref.tag))
        finally:
            close = getattr(client, "close", None)
            if callable(close):
                close()
        return ImageRef(ref.name, ref.tag, digest)

    def _access_allowed(self, repository: Mapping[str, Any], namespace: str) -> bool:
        """`spec.accessFrom.namespaceSelectors[].matchLabels` on the repository; `{}` admits every namespace."""
        selectors = (((repository.get("spec") or {}).get("accessFrom") or {}).get("namespaceSelectors")) or []
        labels = self.namespace_labels(namespace)
        for selector in selectors:
            wanted = (selector or {}).get("matchLabels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                return True
        return False

    @staticmethod
    def _stall(result: ReconcileResult, before: Mapping[str, Any], now: datetime.datetime, reason: str, message: str) -> ReconcileResult:
        mark_stalled(result.object, reason, message, now)
        result.error = message
        result.requeue_after = None
        result.events.append(notify(before, result.object))
        return result

    @staticmethod
    def _fail(
        result: ReconcileResult,
        before: Mapping[str, Any],
        now: datetime.datetime,
        reason: str,
        message: str,
        requeue_after: float | None,
    ) -> ReconcileResult:
        mark_not_ready(result.object, reason, message, now)
        result.error = message
        result.requeue_after = requeue_after
        result.events.append(notify(before, result.object))
        return result
