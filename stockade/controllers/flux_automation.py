"""ImageUpdateAutomation (image.toolkit.fluxcd.io/v1beta2) in the cluster: commit policy updates to git.

Each automation resolves its GitRepository (source.toolkit.fluxcd.io/v1: url, ref.branch, secretRef with
username/password or bearerToken, `ca.crt`, or for ssh:// URLs `identity`/`known_hosts`/`password`;
proxySecretRef), its commit signing key (spec.git.commit.signingKey, a Secret of its own namespace), selects the ImagePolicies in its namespace by `spec.policySelector`,
rewrites their `$imagepolicy` markers under `spec.update.path` and pushes (reflector/automation.py). Status
follows Flux: lastAutomationRunTime, lastPushCommit, lastPushTime, observedPolicies, observedSourceRevision,
observedGeneration, lastHandledReconcileAt and a Ready condition with Flux's reasons.

In the cluster it is reconciled by key from watches (`reconcile_key`, see flux_runtime.py): its own spec or
reconcile request, its GitRepository's spec, and the latestRef of ImagePolicies in its namespace; then again
after `spec.interval`. It carries Flux's finalizer while it exists.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import base64
import binascii
import copy
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from stockade.controllers.events import ACTION_NONE, SOURCE_IMAGE_AUTOMATION, EventRecorder, EventSpec, object_reference
from stockade.controllers.flux_image import ClusterObjects, finalize
from stockade.images.auth import CredentialError
from stockade.reflector import models
from stockade.reflector.automation import (
    DEFAULT_MAX_CLONE_BYTES,
    CheckoutError,
    GitAccess,
    GitCredentialError,
    GitError,
    SigningKey,
    SigningKeyError,
    SshIdentity,
    run_automation,
)
from stockade.reflector.gotemplate import TemplateError
from stockade.reflector.markers import MarkerError
from stockade.reflector.models import ImageRef, ObjectKey, SpecError, duration_seconds, format_time, object_key
from stockade.reflector.repository import RECONCILE_REQUEST_ANNOTATION, proxy_url_from_secret, secret_bytes

log = logging.getLogger("stockade.controllers.flux_automation")

AUTOMATIONS = "imageupdateautomations"
AUTOMATION_VERSION = "v1beta2"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
SOURCE_VERSION = "v1"
EVENT_SOURCE = SOURCE_IMAGE_AUTOMATION
# Flux's reasons
REASON_INVALID_SOURCE = "InvalidSourceConfiguration"
REASON_GIT_OPERATION_FAILED = "GitOperationFailed"
REASON_UPDATE_FAILED = "UpdateFailed"
REASON_SOURCE_MANAGER_FAILED = "SourceManagerFailed"
REASON_INVALID_POLICY_SELECTOR = "InvalidPolicySelector"
REASON_DEPENDENCY_NOT_READY = "DependencyNotReady"
UP_TO_DATE = "repository up-to-date"


class AutomationSpecError(StockadeError, ValueError):
    """A spec or source problem that a retry cannot fix."""


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: matchLabels plus matchExpressions (In, NotIn, Exists, DoesNotExist)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise AutomationSpecError(f"spec.policySelector: unknown operator {operator!r}")
    return True


def _secret_text(secret: Mapping[str, Any], key: str) -> str:
    try:
        raw = secret_bytes(secret, key)
    except CredentialError as exc:
        raise AutomationSpecError(str(exc)) from None
    return raw.decode("utf-8", "replace") if raw is not None else ""


class ImageUpdateAutomationController:
    """Runs ImageUpdateAutomations by key (from watches) or in one pass over those whose interval elapsed (or whose
    spec or request changed)."""

    def __init__(
        self,
        objects: ClusterObjects,
        *,
        recorder: EventRecorder | None = None,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
        monotonic: Callable[[], float] = time.monotonic,
        before_push: Callable[[int], None] | None = None,
        retry_seconds: float = 30.0,
        max_clone_bytes: int = DEFAULT_MAX_CLONE_BYTES,
    ) -> None:
        self.objects = objects
        self.retry_seconds = retry_seconds  # after a transient failure (spec.interval when shorter)
        self.max_clone_bytes = max_clone_bytes
        self.recorder = recorder
        self.clock = clock
        self.monotonic = monotonic
        self.before_push = before_push  # tests: make a concurrent commit land between commit and push
        self._due: dict[ObjectKey, tuple[object, object, float]] = {}

    def reconcile_key(self, key: ObjectKey) -> float | None:
        """Reconcile one automation as it is now; the seconds until it should run again (None: only on events)."""
        automation = self.objects.get(AUTOMATIONS, key, version=AUTOMATION_VERSION)
        if automation is None:
            self._due.pop(key, None)
            return None
        if finalize(self.objects, AUTOMATIONS, automation, version=AUTOMATION_VERSION):
            return None
        if (automation.get("spec") or {}).get("suspend"):
            return None
        self.reconcile(automation)
        due = self._due.get(key)
        if due is None or due[2] == float("inf"):
            return None
        return max(0.0, due[2] - self.monotonic())

    def run_once(self) -> int:
        done = 0
        for automation in self.objects.list(AUTOMATIONS, version=AUTOMATION_VERSION):
            if self._is_due(automation):
                self.reconcile(automation)
                done += 1
        return done

    def _is_due(self, automation: Mapping[str, Any]) -> bool:
        if (automation.get("spec") or {}).get("suspend"):
            return False
        seen = self._due.get(object_key(automation))
        metadata = automation.get("metadata") or {}
        annotation = (metadata.get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        return seen is None or seen[0] != metadata.get("generation") or seen[1] != annotation or self.monotonic() >= seen[2]

    def reconcile(self, automation: Mapping[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = copy.deepcopy(dict(automation))
        before = copy.deepcopy(obj)
        key = object_key(obj)
        spec = obj.get("spec") or {}
        status = obj.setdefault("status", {})
        now = self.clock()
        annotation = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        if annotation:
            status["lastHandledReconcileAt"] = annotation
        status["lastAutomationRunTime"] = format_time(now)
        retry: float | None
        try:
            interval = duration_seconds(spec.get("interval"), "spec.interval") or 60.0
        except SpecError as exc:
            return self._finish(before, obj, now, stalled=(REASON_INVALID_SOURCE, str(exc)), retry=None)
        retry = interval
        try:
            git_spec = spec.get("git") or {}
            commit_spec = git_spec.get("commit") or {}
            author = commit_spec.get("author") or {}
            if git_spec and not author.get("email"):
                raise AutomationSpecError("spec.git.commit.author.email is required")
            access, checkout_branch = self._source(obj)
            push = git_spec.get("push") or {}
            checkout_ref = ((git_spec.get("checkout") or {}).get("ref") or {})
            checkout_branch = str(checkout_ref.get("branch") or checkout_branch)
            push_branch = str(push.get("branch") or checkout_branch)
            policies = self._policies(key.namespace, spec.get("policySelector"))
        except (AutomationSpecError, SpecError) as exc:
            return self._finish(before, obj, now, stalled=(REASON_INVALID_SOURCE, str(exc)), retry=None)
        except (_NotFound, CredentialError) as exc:
            return self._finish(before, obj, now, failed=(REASON_SOURCE_MANAGER_FAILED, f"failed configuring source manager: {exc}"),
                                retry=min(interval, self.retry_seconds))

        def resolve(namespace: str, name: str) -> dict[str, object] | None:
            ref = policies.get(ObjectKey(namespace, name))
            return None if ref is None else {"image": ref.name, "tag": ref.tag, "digest": ref.digest}

        try:
            outcome = run_automation(
                access,
                checkout_branch=checkout_branch,
                push_branch=push_branch,
                push_refspec=str(push.get("refspec") or ""),
                push_options={str(k): str(v) for k, v in (push.get("options") or {}).items()},
                signing_key=self._signing_key(key.namespace, commit_spec),
                update_path=str((spec.get("update") or {}).get("path") or "."),
                resolve=resolve,
                author_name=str(author.get("name") or ""),
                author_email=str(author["email"]),
                automation=key,
                message_template=str(commit_spec.get("messageTemplate") or ""),
                template_values={str(k): str(v) for k, v in (commit_spec.get("messageTemplateValues") or {}).items()},
                clock=self.clock,
                before_push=self.before_push,
            )
        except MarkerError as exc:
            return self._finish(before, obj, now, failed=(REASON_UPDATE_FAILED, f"failed to apply policies: {exc}"), retry=retry)
        except GitCredentialError as exc:
            return self._finish(before, obj, now, failed=(REASON_SOURCE_MANAGER_FAILED, f"failed configuring source manager: {exc}"),
                                retry=min(interval, self.retry_seconds))
        except CheckoutError as exc:  # RepositoryTooLargeError included: nothing was checked out
            return self._finish(before, obj, now, failed=(REASON_GIT_OPERATION_FAILED, f"failed to checkout source: {exc}"),
                                retry=min(interval, self.retry_seconds))
        except (GitError, TemplateError) as exc:  # SigningKeyError included
            return self._finish(before, obj, now, failed=(REASON_GIT_OPERATION_FAILED, f"failed to update source: {exc}"),
                                retry=min(interval, self.retry_seconds))
        status["observedSourceRevision"] = outcome.source_revision
        status["observedPolicies"] = {
            policy_key.name: ref.to_dict() for policy_key, ref in sorted(policies.items(), key=lambda item: item[0].name)
        }
        pushed = ""
        if outcome.commit:
            status["lastPushCommit"] = outcome.commit
            status["lastPushTime"] = format_time(self.clock())
            pushed = f"pushed commit '{outcome.commit}' to 'refs/heads/{push_branch}'\n{outcome.message}"
        models.mark_ready(obj, UP_TO_DATE, now)  # Flux's Ready message after a push too; the Event carries the push
        return self._finish(before, obj, now, retry=retry, pushed=pushed)

    # -- inputs -------------------------------------------------------------------------------------------------
    def _source(self, obj: Mapping[str, Any]) -> tuple[GitAccess, str]:
        spec = obj.get("spec") or {}
        ref = spec.get("sourceRef") or {}
        if ref.get("kind") != "GitRepository":
            raise AutomationSpecError(f"source kind '{ref.get('kind')}' not supported")
        if not spec.get("git"):
            raise AutomationSpecError("source kind 'GitRepository' necessitates field .spec.git")
        namespace = str(ref.get("namespace") or object_key(obj).namespace)
        name = str(ref.get("name") or "")
        source = self.objects.get("gitrepositories", ObjectKey(namespace, name), version=SOURCE_VERSION, group=SOURCE_GROUP)
        if source is None:
            raise _NotFound(f"GitRepository '{namespace}/{name}' not found")
        source_spec = source.get("spec") or {}
        url = str(source_spec.get("url") or "")
        if not url:
            raise AutomationSpecError(f"GitRepository '{namespace}/{name}' has no spec.url")
        branch = str((source_spec.get("ref") or {}).get("branch") or "master")
        timeout = duration_seconds(source_spec.get("timeout"), "GitRepository spec.timeout") or 60.0
        secret: Mapping[str, Any] = {}
        secret_ref = source_spec.get("secretRef")
        if secret_ref:
            found = self.objects.secret(namespace, str(secret_ref.get("name") or ""))
            if found is None:
                raise _NotFound(f"secret '{namespace}/{secret_ref.get('name')}' of GitRepository '{namespace}/{name}' not found")
            secret = found
        ssh: SshIdentity | None = None
        if url.startswith("ssh://"):
            # Flux's SSH auth options: both keys are required, the known hosts are the only ones trusted
            identity, known_hosts = secret_bytes(secret, "identity"), secret_bytes(secret, "known_hosts")
            if identity is None:
                raise _NotFound("invalid 'ssh' auth option: 'identity' is required")
            if known_hosts is None:
                raise _NotFound("invalid 'ssh' auth option: 'known_hosts' is required")
            ssh = SshIdentity(identity, known_hosts, secret_bytes(secret, "password"))
        proxy_url = ""
        proxy_ref = source_spec.get("proxySecretRef")
        if proxy_ref and not url.startswith("ssh://"):
            proxy_name = str(proxy_ref.get("name") or "")
            proxy_secret = self.objects.secret(namespace, proxy_name)
            if proxy_secret is None:
                raise _NotFound(f"proxy secret '{namespace}/{proxy_name}' not found")
            try:
                proxy_url = proxy_url_from_secret(proxy_secret, f"{namespace}/{proxy_name}", schemes=("http", "https"))
            except CredentialError as exc:
                raise _NotFound(str(exc)) from None
        access = GitAccess(
            url, username=_secret_text(secret, "username"), password=_secret_text(secret, "password"),
            bearer_token=_secret_text(secret, "bearerToken"), timeout=timeout,
            ssh=ssh, ca_pem=secret_bytes(secret, "ca.crt"), proxy_url=proxy_url, max_bytes=self.max_clone_bytes)
        return access, branch

    def _signing_key(self, namespace: str, commit_spec: Mapping[str, Any]) -> SigningKey | None:
        """spec.git.commit.signingKey: an OpenPGP key from a Secret in the automation's namespace, as Flux."""
        signing = commit_spec.get("signingKey")
        if not signing:
            return None
        kind = str(signing.get("type") or "gpg")
        if kind != "gpg":
            raise SigningKeyError(f"signing key type {kind!r} is not supported, only 'gpg'")
        name = str((signing.get("secretRef") or {}).get("name") or "")
        secret = self.objects.secret(namespace, name)
        if secret is None:
            raise SigningKeyError(f"could not find signing key secret '{name}'")
        armored = secret_bytes(secret, "git.asc")
        if armored is None:
            raise SigningKeyError(f"signing key secret '{name}' does not contain a 'git.asc' key")
        return SigningKey(armored, secret_bytes(secret, "passphrase"), name)

    def _policies(self, namespace: str, selector: Mapping[str, Any] | None) -> dict[ObjectKey, ImageRef]:
        """Ready ImagePolicies of the automation's namespace that match the selector, with their latestRef."""
        found: dict[ObjectKey, ImageRef] = {}
        for policy in self.objects.list("imagepolicies"):
            key = object_key(policy)
            if key.namespace != namespace:
                continue
            if not _matches(selector, (policy.get("metadata") or {}).get("labels") or {}):
                continue
            ref = ImageRef.from_dict((policy.get("status") or {}).get("latestRef"))
            if ref is not None:
                found[key] = ref
        return found

    # -- output -------------------------------------------------------------------------------------------------
    def _finish(
        self,
        before: Mapping[str, Any],
        obj: dict[str, Any],
        now: datetime.datetime,
        *,
        retry: float | None,
        stalled: tuple[str, str] | None = None,
        failed: tuple[str, str] | None = None,
        pushed: str = "",
    ) -> dict[str, Any]:
        if stalled is not None:
            models.mark_stalled(obj, stalled[0], stalled[1], now)
        elif failed is not None:
            models.mark_not_ready(obj, failed[0], failed[1], now)
        key = object_key(obj)
        if (before.get("status") or {}) != obj.get("status"):
            try:
                self.objects.write_status(AUTOMATIONS, obj, version=AUTOMATION_VERSION)
            except Exception as exc:  # gone or changed meanwhile: the next pass retries
                log.warning("writing status of ImageUpdateAutomation %s failed: %s", key, exc)
        event = models.notify(before, obj)
        if pushed and models.is_ready(obj):  # Flux: a push is always a Normal event carrying the commit
            event = models.Event(models.EVENT_NORMAL, models.SUCCEEDED, pushed)
        if self.recorder is not None and event.type != models.EVENT_TRACE:
            self.recorder.submit(EventSpec(
                namespace=key.namespace, regarding=object_reference(obj), reason=event.reason, message=event.message[:1000],
                type=event.type, action=ACTION_NONE, source=EVENT_SOURCE))
        metadata = obj.get("metadata") or {}
        annotation = (metadata.get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        self._due[key] = (metadata.get("generation"), annotation, self.monotonic() + (retry if retry is not None else float("inf")))
        return obj


class _NotFound(StockadeError, LookupError):
    """A referenced object is missing; retried, as it may appear."""
