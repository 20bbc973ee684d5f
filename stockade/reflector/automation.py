"""ImageUpdateAutomation's git side: clone, rewrite `$imagepolicy` markers, commit with Flux's template data, push.

The git CLI (Debian's `git`) does the work rather than dulwich or pygit2: it speaks every transport Flux users
point GitRepositories at (https, ssh, git, file) with the server's own negotiation, needs no native library
in the image, and its `push --porcelain` output tells a rejected ref apart from other failures without
reading prose. Every call has a timeout and runs without prompts or user/system configuration.

A push rejected because someone else pushed first is retried on the new head: the branch is fetched again,
the markers are re-applied on top of it and a fresh commit is pushed, so neither change is lost.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import base64
import datetime
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from stockade.reflector.gotemplate import render
from stockade.reflector.markers import FileUpdate, Resolver, plan_updates, write_updates
from stockade.reflector.models import ObjectKey

__all__ = [
    "DEFAULT_MESSAGE_TEMPLATE",
    "AutomationOutcome",
    "GitAccess",
    "CheckoutError",
    "GitError",
    "PushRejectedError",
    "TemplateData",
    "run_automation",
]

DEFAULT_MESSAGE_TEMPLATE = "Update from image update automation"
GIT_TIMEOUT_SECONDS = 120.0
MAX_PUSH_ATTEMPTS = 4


class GitError(StockadeError, RuntimeError):
    """A git command failed; the message carries git's own error output."""


class CheckoutError(GitError):
    """Cloning or checking out the source failed (Flux: "failed to checkout source")."""


class PushRejectedError(GitError):
    """The remote refused the push because its branch moved (non-fast-forward)."""


@dataclass(frozen=True)
class ObjectIdentifier:
    """The object a change was made in (Flux's kyaml ResourceIdentifier); fields named as Go templates see them."""

    APIVersion: str
    Kind: str
    Name: str
    Namespace: str

    def sort_fields(self) -> tuple[str, str, str, str]:
        return (self.APIVersion, self.Kind, self.Name, self.Namespace)

    def __str__(self) -> str:
        return f"{{{{{self.APIVersion} {self.Kind}}} {{{self.Name} {self.Namespace}}}}}"


@dataclass(frozen=True)
class TemplateChange:
    OldValue: str
    NewValue: str
    Setter: str


@dataclass
class UpdateResult:
    """`.Changed` in the commit message template."""

    FileChanges: dict[str, dict[ObjectIdentifier, list[TemplateChange]]] = field(default_factory=dict)
    Objects: dict[ObjectIdentifier, list[TemplateChange]] = field(default_factory=dict)
    Changes: list[TemplateChange] = field(default_factory=list)


@dataclass(frozen=True)
class TemplateData:
    """The value a commit message template sees, as Flux's TemplateData (a struct: unknown fields are errors)."""

    AutomationObject: ObjectKey
    Changed: UpdateResult
    Values: dict[str, str]


@dataclass(frozen=True)
class GitAccess:
    """Where and how to reach the repository (from the GitRepository and its secretRef)."""

    url: str
    username: str = ""
    password: str = ""
    bearer_token: str = ""
    timeout: float = GIT_TIMEOUT_SECONDS


@dataclass
class AutomationOutcome:
    source_revision: str  # `<branch>@sha1:<hex>` of the checked-out head
    commit: str = ""  # pushed commit, "" when nothing changed
    message: str = ""
    result: UpdateResult = field(default_factory=UpdateResult)
    attempts: int = 0


def _objects_by_line(text: str) -> list[tuple[int, int, ObjectIdentifier]]:
    """(first line, last line, identity) of each YAML document, 1-based lines."""
    spans: list[tuple[int, int, ObjectIdentifier]] = []
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return spans
    for node, document in zip(nodes, documents):
        if node is None or not isinstance(document, dict):
            continue
        raw_metadata = document.get("metadata")
        metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
        identity = ObjectIdentifier(
            str(document.get("apiVersion") or ""), str(document.get("kind") or ""),
            str(metadata.get("name") or ""), str(metadata.get("namespace") or ""),
        )
        spans.append((node.start_mark.line + 1, node.end_mark.line + 1, identity))
    return spans


def update_result(updates: list[FileUpdate]) -> UpdateResult:
    result = UpdateResult()
    for update in updates:
        spans = _objects_by_line(update.old_text)
        per_file: dict[ObjectIdentifier, list[TemplateChange]] = {}
        for change in update.changes:
            identity = next((i for first, last, i in spans if first <= change.line <= last), ObjectIdentifier("", "", "", ""))
            entry = TemplateChange(change.old, change.new, change.marker)
            per_file.setdefault(identity, []).append(entry)
            result.Objects.setdefault(identity, []).append(entry)
            result.Changes.append(entry)
        result.FileChanges[update.label] = per_file
    return result


class _Git:
    def __init__(self, workdir: str, access: GitAccess) -> None:
        self.workdir = workdir
        self.access = access

    def run(self, *args: str, cwd: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        config: list[str] = []
        if self.access.url.startswith(("http://", "https://")):
            if self.access.bearer_token:
                config = ["-c", f"http.extraHeader=Authorization: Bearer {self.access.bearer_token}"]
            elif self.access.username or self.access.password:
                token = base64.b64encode(f"{self.access.username}:{self.access.password}".encode()).decode()
                config = ["-c", f"http.extraHeader=Authorization: Basic {token}"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.workdir,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }
        try:
            completed = subprocess.run(
                ["git", *config, *args], cwd=cwd, env=env, capture_output=True, text=True,
                timeout=self.access.timeout, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {self.access.timeout:.0f}s") from None
        except FileNotFoundError:
            raise GitError("the git command is not installed") from None
        if check and completed.returncode != 0:
            raise GitError(f"git {args[0]} failed: {completed.stderr.strip() or completed.stdout.strip()}")
        return completed


def _safe_subpath(root: str, relative: str) -> str:
    target = os.path.realpath(os.path.join(root, relative or "."))
    if os.path.commonpath([os.path.realpath(root), target]) != os.path.realpath(root):
        raise GitError(f"spec.update.path {relative!r} points outside the repository")
    return target


def run_automation(
    access: GitAccess,
    *,
    checkout_branch: str,
    push_branch: str,
    update_path: str,
    resolve: Resolver,
    author_name: str,
    author_email: str,
    automation: ObjectKey,
    message_template: str = "",
    template_values: Mapping[str, str] | None = None,
    push_refspec: str = "",
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
    before_push: Callable[[int], None] | None = None,
) -> AutomationOutcome:
    """Clone, update, commit and push; retries a rejected push on the new head. Raises GitError."""
    with tempfile.TemporaryDirectory(prefix="stockade-automation-") as scratch:
        git = _Git(scratch, access)
        outcome: AutomationOutcome | None = None
        for attempt in range(1, MAX_PUSH_ATTEMPTS + 1):
            checkout = os.path.join(scratch, f"checkout-{attempt}")
            try:
                head = _checkout(git, checkout, checkout_branch, push_branch)
            except GitError as exc:
                raise CheckoutError(str(exc)) from None
            outcome = AutomationOutcome(source_revision=f"{checkout_branch}@sha1:{head}", attempts=attempt)
            updates = plan_updates(_safe_subpath(checkout, update_path), resolve)
            if not updates:
                return outcome
            write_updates(updates)
            outcome.result = update_result(updates)
            data = TemplateData(automation, outcome.result, dict(template_values or {}))
            outcome.message = render(message_template or DEFAULT_MESSAGE_TEMPLATE, data)
            git.run("add", "--all", "--", ".", cwd=checkout)
            when = clock().strftime("%Y-%m-%dT%H:%M:%S%z")
            identity = ["-c", f"user.name={author_name}", "-c", f"user.email={author_email}"]
            git.run(*identity, "commit", "--quiet", "--no-verify", "--author", f"{author_name} <{author_email}>",
                    "--date", when, "-F", _message_file(scratch, outcome.message), cwd=checkout)
            outcome.commit = git.run("rev-parse", "HEAD", cwd=checkout).stdout.strip()
            if push_branch == checkout_branch:  # Flux observes the pushed commit unless it switched branches
                outcome.source_revision = f"{push_branch}@sha1:{outcome.commit}"
            if before_push is not None:
                before_push(attempt)
            try:
                _push(git, checkout, f"HEAD:refs/heads/{push_branch}")
            except PushRejectedError:
                if attempt == MAX_PUSH_ATTEMPTS:
                    raise
                continue
            if push_refspec:
                _push(git, checkout, push_refspec)
            return outcome
        raise GitError("push was not attempted")  # unreachable: the loop returns or raises


def _checkout(git: _Git, checkout: str, checkout_branch: str, push_branch: str) -> str:
    """Clone the checkout branch and switch to the push branch (its remote state if it exists); returns the
    checkout branch's head."""
    git.run("clone", "--quiet", "--no-tags", "--single-branch", "--branch", checkout_branch, git.access.url, checkout)
    head = git.run("rev-parse", "HEAD", cwd=checkout).stdout.strip()
    if push_branch != checkout_branch:
        remote = git.run("ls-remote", "--heads", "origin", f"refs/heads/{push_branch}", cwd=checkout).stdout.strip()
        if remote:
            git.run("fetch", "--quiet", "--no-tags", "origin", f"refs/heads/{push_branch}", cwd=checkout)
            git.run("checkout", "--quiet", "-B", push_branch, "FETCH_HEAD", cwd=checkout)
        else:
            git.run("checkout", "--quiet", "-B", push_branch, cwd=checkout)
    return head


def _message_file(scratch: str, message: str) -> str:
    path = os.path.join(scratch, "COMMIT_MESSAGE")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(message)
    return path


def _push(git: _Git, checkout: str, refspec: str) -> None:
    completed = git.run("push", "--porcelain", "origin", refspec, cwd=checkout, check=False)
    # --porcelain: one "<flag>\t<from>:<to>\t<summary>" line per ref; "!" marks a rejected ref
    rejected = any(line.startswith("!\t") for line in completed.stdout.splitlines())
    if rejected:
        raise PushRejectedError(f"push of {refspec} rejected: {completed.stdout.strip()}")
    if completed.returncode != 0:
        raise GitError(f"git push failed: {completed.stderr.strip() or completed.stdout.strip()}")
