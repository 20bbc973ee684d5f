"""ImageUpdateAutomation's git side: clone, rewrite `$imagepolicy` markers, commit with Flux's template data, push.

The git CLI (Debian's `git`) does the work rather than dulwich or pygit2: it speaks every transport Flux users
point GitRepositories at (https, ssh, git, file) with the server's own negotiation, needs no native library
in the image, and its `push --porcelain` output tells a rejected ref apart from other failures without
reading prose. Every call has a timeout and runs without prompts or user/system configuration.

A push rejected because someone else pushed first is retried on the new head: the branch is fetched again,
the markers are re-applied on top of it and a fresh commit is pushed, so neither change is lost.

Transports and credentials follow Flux's GitRepository: HTTP(S) basic auth or bearer token, `ca.crt`, a proxy
(`proxySecretRef`) for HTTP(S) URLs, and SSH with the Secret's `identity` (decrypted here with its `password`
when encrypted) checked against its `known_hosts` only (strict checking, no user or system files). Commits
are signed with the ImageUpdateAutomation's OpenPGP key (`git.asc`, `passphrase`) through gpg in a throwaway
home whose agent is stopped afterwards. Clones are shallow and capped: every file git writes is limited by
RLIMIT_FSIZE (so a pack cannot grow past the cap while it downloads) and the tree's blob sizes are summed
before anything is checked out.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import base64
import datetime
import os
import shlex
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
    "RepositoryTooLargeError",
    "SigningKey",
    "SigningKeyError",
    "SshIdentity",
    "TemplateData",
    "run_automation",
]

DEFAULT_MESSAGE_TEMPLATE = "Update from image update automation"
GIT_TIMEOUT_SECONDS = 120.0
MAX_PUSH_ATTEMPTS = 4
DEFAULT_MAX_CLONE_BYTES = 256 * 1024 * 1024


class GitError(StockadeError, RuntimeError):
    """A git command failed; the message carries git's own error output."""


class CheckoutError(GitError):
    """Cloning or checking out the source failed (Flux: "failed to checkout source")."""


class PushRejectedError(GitError):
    """The remote refused the push because its branch moved (non-fast-forward)."""


class RepositoryTooLargeError(CheckoutError):
    """The clone (its pack, or the files it would check out) is over the size cap; nothing is checked out."""


class SigningKeyError(GitError):
    """The commit signing key cannot be used: unreadable, ambiguous, or its passphrase is missing or wrong."""


class GitCredentialError(GitError):
    """The GitRepository's credentials are incomplete or unusable (Flux: a source manager failure)."""


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
class SshIdentity:
    """Flux's SSH keys of a GitRepository Secret: `identity` (PEM or OpenSSH private key, `password` when it is
    encrypted) and `known_hosts`, the only host keys accepted."""

    identity: bytes
    known_hosts: bytes
    password: bytes | None = None


@dataclass(frozen=True)
class SigningKey:
    """`spec.git.commit.signingKey`: an armored OpenPGP private key (`git.asc`) and its optional `passphrase`."""

    armored: bytes
    passphrase: bytes | None = None
    secret_name: str = ""


@dataclass(frozen=True)
class GitAccess:
    """Where and how to reach the repository (from the GitRepository and its secretRef)."""

    url: str
    username: str = ""
    password: str = ""
    bearer_token: str = ""
    timeout: float = GIT_TIMEOUT_SECONDS
    ssh: SshIdentity | None = None
    ca_pem: bytes | None = None  # secretRef `ca.crt` for https:// servers
    proxy_url: str = ""  # proxySecretRef, for http(s):// URLs
    max_bytes: int = DEFAULT_MAX_CLONE_BYTES  # cap on any file git writes and on the checked-out tree

    @property
    def is_ssh(self) -> bool:
        return self.url.startswith("ssh://")

    @property
    def is_http(self) -> bool:
        return self.url.startswith(("http://", "https://"))


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
    """Runs git with no prompts, no user or system configuration, a timeout, the clone size cap on every file it
    writes, and the transport's credentials prepared in ``workdir`` (a private temporary directory)."""

    def __init__(self, workdir: str, access: GitAccess) -> None:
        self.workdir = workdir
        self.access = access
        self.config: list[str] = []
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": workdir,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }
        if access.is_http:
            self._prepare_http()
        elif access.is_ssh:
            self._prepare_ssh()
        # keep every fetched pack as one file (never exploded into loose objects) so the file size cap bounds it
        self.config += ["-c", "fetch.unpackLimit=1", "-c", "transfer.unpackLimit=1"]

    def _private_file(self, name: str, content: bytes) -> str:
        path = os.path.join(self.workdir, name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        return path

    def _prepare_http(self) -> None:
        access = self.access
        if access.bearer_token:
            self.config += ["-c", f"http.extraHeader=Authorization: Bearer {access.bearer_token}"]
        elif access.username or access.password:
            token = base64.b64encode(f"{access.username}:{access.password}".encode()).decode()
            self.config += ["-c", f"http.extraHeader=Authorization: Basic {token}"]
        if access.ca_pem:
            self.config += ["-c", f"http.sslCAInfo={self._private_file('ca.crt', access.ca_pem)}"]
        if access.proxy_url:  # proxySecretRef wins over the environment's proxy variables
            # Basic credentials sent with the first CONNECT, as Go's transport does with a proxy URL's user info
            self.config += ["-c", f"http.proxy={access.proxy_url}", "-c", "http.proxyAuthMethod=basic"]
        else:
            for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
                if name in os.environ:
                    self.env[name] = os.environ[name]

    def _prepare_ssh(self) -> None:
        ssh = self.access.ssh
        if ssh is None:
            raise GitCredentialError("an ssh:// URL needs a secretRef with 'identity' and 'known_hosts'")
        identity = _prepare_identity(self.workdir, ssh.identity, ssh.password, self._private_file)
        known_hosts = self._private_file("known_hosts", ssh.known_hosts)
        options = [
            "-F", os.devnull,  # no user or system ssh_config
            "-i", identity,
            "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none",
            "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", f"GlobalKnownHostsFile={os.devnull}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UpdateHostKeys=no",
            "-o", "BatchMode=yes",
            "-o", "PasswordAuthentication=no",
            "-o", f"ConnectTimeout={max(1, int(self.access.timeout))}",
        ]
        self.env["GIT_SSH_COMMAND"] = shlex.join(["ssh", *options])
        self.env["GIT_SSH_VARIANT"] = "ssh"

    def run(self, *args: str, cwd: str | None = None, check: bool = True, env: Mapping[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
        limit = ["prlimit", f"--fsize={self.access.max_bytes}", "--"]
        try:
            completed = subprocess.run(
                [*limit, "git", *self.config, *args], cwd=cwd, env={**self.env, **(env or {})}, capture_output=True,
                text=True, timeout=self.access.timeout, stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {self.access.timeout:.0f}s") from None
        except FileNotFoundError:
            raise GitError("the git or prlimit command is not installed") from None
        if check and completed.returncode != 0:
            raise GitError(f"git {args[0]} failed: {completed.stderr.strip() or completed.stdout.strip()}")
        return completed


def _prepare_identity(workdir: str, identity: bytes, password: bytes | None, write: Callable[[str, bytes], str]) -> str:
    """Write the private key where `ssh -i` reads it, decrypted with ``password`` by ssh-keygen (the passphrase
    goes through an askpass helper reading a private file, never through argv), since BatchMode cannot ask for
    it. OpenSSH and PEM keys are accepted, as by Flux."""
    path = write("identity", identity if identity.endswith(b"\n") else identity + b"\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": workdir}
    if password is not None:
        password_file = write("identity.password", password)
        askpass = write("askpass", f"#!/bin/sh\nexec cat {shlex.quote(password_file)}\n".encode())
        os.chmod(askpass, 0o700)
        env.update({"SSH_ASKPASS": askpass, "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": "none"})
        command = ["ssh-keygen", "-q", "-p", "-N", "", "-f", path]
    else:
        command = ["ssh-keygen", "-y", "-P", "", "-f", path]
    try:
        completed = subprocess.run(command, env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                                   start_new_session=True)  # no controlling terminal: the askpass helper answers
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitCredentialError(f"ssh-keygen could not read the 'identity' key: {exc}") from None
    if completed.returncode != 0:
        if password is None and _is_encrypted_key(identity):
            raise GitCredentialError("the 'identity' key is encrypted and the secret has no 'password'")
        raise GitCredentialError("failed to parse the 'identity' private key (wrong password or format)")
    return path


def _is_encrypted_key(identity: bytes) -> bool:
    from cryptography.hazmat.primitives import serialization

    for loader in (serialization.load_ssh_private_key, serialization.load_pem_private_key):
        try:
            loader(identity, None)
        except TypeError:  # the key is password-protected
            return True
        except Exception:
            continue
    return False


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
    push_options: Mapping[str, str] | None = None,
    signing_key: SigningKey | None = None,
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
    before_push: Callable[[int], None] | None = None,
) -> AutomationOutcome:
    """Clone, update, commit (signed with ``signing_key``) and push (with ``push_options``); retries a rejected
    push on the new head. Raises GitError (CheckoutError, RepositoryTooLargeError, SigningKeyError, ...)."""
    with tempfile.TemporaryDirectory(prefix="stockade-automation-") as scratch:
        git = _Git(scratch, access)
        signer = _GpgSigner(scratch) if signing_key is not None else None
        try:
            if signer is not None and signing_key is not None:
                signer.load(signing_key)
            return _run(git, scratch, signer, checkout_branch=checkout_branch, push_branch=push_branch,
                        update_path=update_path, resolve=resolve, author_name=author_name, author_email=author_email,
                        automation=automation, message_template=message_template, template_values=template_values,
                        push_refspec=push_refspec, push_options=push_options or {}, clock=clock, before_push=before_push)
        finally:
            if signer is not None:
                signer.close()


def _run(
    git: _Git,
    scratch: str,
    signer: _GpgSigner | None,
    *,
    checkout_branch: str,
    push_branch: str,
    update_path: str,
    resolve: Resolver,
    author_name: str,
    author_email: str,
    automation: ObjectKey,
    message_template: str,
    template_values: Mapping[str, str] | None,
    push_refspec: str,
    push_options: Mapping[str, str],
    clock: Callable[[], datetime.datetime],
    before_push: Callable[[int], None] | None,
) -> AutomationOutcome:
    outcome: AutomationOutcome | None = None
    for attempt in range(1, MAX_PUSH_ATTEMPTS + 1):
        checkout = os.path.join(scratch, f"checkout-{attempt}")
        try:
            head = _checkout(git, checkout, checkout_branch, push_branch)
        except RepositoryTooLargeError:
            raise
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
        signing = signer.git_options() if signer is not None else ["-c", "commit.gpgSign=false"]
        git.run(*identity, *signing, "commit", "--quiet", "--no-verify", "--author", f"{author_name} <{author_email}>",
                "--date", when, "-F", _message_file(scratch, outcome.message), cwd=checkout,
                env=signer.env() if signer is not None else None)
        outcome.commit = git.run("rev-parse", "HEAD", cwd=checkout).stdout.strip()
        if push_branch == checkout_branch:  # Flux observes the pushed commit unless it switched branches
            outcome.source_revision = f"{push_branch}@sha1:{outcome.commit}"
        if before_push is not None:
            before_push(attempt)
        try:
            _push(git, checkout, f"HEAD:refs/heads/{push_branch}", push_options)
        except PushRejectedError:
            if attempt == MAX_PUSH_ATTEMPTS:
                raise
            continue
        if push_refspec:
            _push(git, checkout, push_refspec, push_options)
        return outcome
    raise GitError("push was not attempted")  # unreachable: the loop returns or raises


def _largest_file(root: str) -> int:
    largest = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                largest = max(largest, os.lstat(os.path.join(directory, name)).st_size)
            except OSError:
                continue
    return largest


def _fetch_capped(git: _Git, checkout: str, refspec: str) -> None:
    """Fetch ``refspec`` (depth 1) into ``checkout``; a pack cut off at the size cap means the repository is too
    large (RLIMIT_FSIZE stops git's index-pack at exactly the cap and leaves the partial pack behind)."""
    try:
        git.run("fetch", "--quiet", "--no-tags", "--depth", "1", "origin", refspec, cwd=checkout)
    except GitError:
        if _largest_file(os.path.join(checkout, ".git")) >= git.access.max_bytes:
            raise RepositoryTooLargeError(
                f"the repository is larger than the clone size limit of {git.access.max_bytes} bytes") from None
        raise


def _tree_bytes(git: _Git, checkout: str, revision: str) -> int:
    listing = git.run("ls-tree", "-r", "-l", "-z", "--full-tree", revision, cwd=checkout).stdout
    total = 0
    for entry in listing.split("\0"):
        fields = entry.split("\t", 1)[0].split()
        if len(fields) == 4 and fields[1] == "blob" and fields[3].isdigit():
            total += int(fields[3])
    return total


def _checkout(git: _Git, checkout: str, checkout_branch: str, push_branch: str) -> str:
    """Fetch the checkout branch (depth 1) and switch to the push branch (its remote state if it exists); returns
    the checkout branch's head. Nothing is checked out before the tree's size is known to be within the cap."""
    git.run("init", "--quiet", checkout)
    git.run("remote", "add", "origin", git.access.url, cwd=checkout)
    remote_ref = f"refs/remotes/origin/{checkout_branch}"
    _fetch_capped(git, checkout, f"+refs/heads/{checkout_branch}:{remote_ref}")
    head = git.run("rev-parse", remote_ref, cwd=checkout).stdout.strip()
    target = remote_ref
    if push_branch != checkout_branch:
        remote = git.run("ls-remote", "--heads", "origin", f"refs/heads/{push_branch}", cwd=checkout).stdout.strip()
        if remote:
            target = f"refs/remotes/origin/{push_branch}"
            _fetch_capped(git, checkout, f"+refs/heads/{push_branch}:{target}")
    size = _tree_bytes(git, checkout, target)
    if size > git.access.max_bytes:
        raise RepositoryTooLargeError(
            f"the checkout would be {size} bytes, over the clone size limit of {git.access.max_bytes} bytes")
    git.run("checkout", "--quiet", "--force", "--no-track", "-B", push_branch, target, cwd=checkout)
    return head


def _message_file(scratch: str, message: str) -> str:
    path = os.path.join(scratch, "COMMIT_MESSAGE")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(message)
    return path


def _push(git: _Git, checkout: str, refspec: str, options: Mapping[str, str]) -> None:
    # Flux sends every entry of spec.git.push.options as a `key=value` push option (GitLab merge_request.*, ...)
    option_args = [f"--push-option={key}={value}" for key, value in sorted(options.items())]
    completed = git.run("push", "--porcelain", *option_args, "origin", refspec, cwd=checkout, check=False)
    # --porcelain: one "<flag>\t<from>:<to>\t<summary>" line per ref; "!" marks a rejected ref
    rejected = any(line.startswith("!\t") for line in completed.stdout.splitlines())
    if rejected:
        raise PushRejectedError(f"push of {refspec} rejected: {completed.stdout.strip()}")
    if completed.returncode != 0:
        raise GitError(f"git push failed: {completed.stderr.strip() or completed.stdout.strip()}")


class _GpgSigner:
    """gpg with a throwaway home holding only the signing key; ``close()`` stops the agent gpg started there.

    As Flux, the armored block must hold exactly one key, which must have its secret part; an encrypted key needs
    the passphrase, which is checked by signing a probe before any commit is made."""

    def __init__(self, scratch: str) -> None:
        self.home = os.path.join(scratch, "gnupg")
        os.mkdir(self.home, 0o700)
        self.fingerprint = ""

    def load(self, key: SigningKey) -> None:
        name = key.secret_name or "signing key"
        with open(os.path.join(self.home, "gpg.conf"), "w", encoding="utf-8") as conf:
            conf.write("batch\nno-tty\npinentry-mode loopback\n")
            if key.passphrase is not None:
                path = os.path.join(self.home, "passphrase")
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(key.passphrase)
                conf.write(f"passphrase-file {path}\n")
        key_file = os.path.join(self.home, "git.asc")
        with open(key_file, "wb") as handle:
            handle.write(key.armored)
        shown = self._gpg("--with-colons", "--import-options", "show-only", "--import", key_file)
        records = [line.split(":") for line in shown.stdout.splitlines()]
        primaries = [fields for fields in records if fields[0] in ("pub", "sec")]
        if shown.returncode != 0 or not primaries:
            raise SigningKeyError(f"could not read signing key from secret '{name}': {shown.stderr.strip()}")
        if len(primaries) > 1:
            raise SigningKeyError(f"multiple entities read from secret '{name}', could not determine which signing key to use")
        if primaries[0][0] != "sec":
            raise SigningKeyError(f"secret '{name}' holds a public key only, signing needs the private key")
        fingerprints = [fields[9] for fields in records if fields[0] == "fpr" and len(fields) > 9]
        self.fingerprint = fingerprints[0] if fingerprints else ""
        imported = self._gpg("--import", key_file)
        if imported.returncode != 0 or not self.fingerprint:
            raise SigningKeyError(f"could not import signing key from secret '{name}': {imported.stderr.strip()}")
        probe = self._gpg("--local-user", self.fingerprint, "--detach-sign", "--armor", input_text="probe")
        if probe.returncode != 0:
            if key.passphrase is None:
                raise SigningKeyError(
                    f"can not use passphrase protected signing key without 'passphrase' field present in secret {name}")
            raise SigningKeyError(f"could not decrypt private key of the signing key present in secret {name}")

    def _gpg(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(["gpg", "--homedir", self.home, *args], capture_output=True, text=True,
                                  input=input_text if input_text is not None else "", timeout=GIT_TIMEOUT_SECONDS,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GNUPGHOME": self.home})
        except FileNotFoundError:
            raise SigningKeyError("commit signing needs the gpg command, which is not installed") from None
        except subprocess.TimeoutExpired:
            raise SigningKeyError("gpg timed out") from None

    def git_options(self) -> list[str]:
        return ["-c", "gpg.format=openpgp", "-c", "gpg.program=gpg", "-c", f"user.signingKey={self.fingerprint}",
                "-c", "commit.gpgSign=true"]

    def env(self) -> dict[str, str]:
        return {"GNUPGHOME": self.home}

    def close(self) -> None:
        try:
            subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "all"], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except (OSError, subprocess.TimeoutExpired):
            pass
