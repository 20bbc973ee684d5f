"""run_automation against local bare repositories (file://): push branch other than the checkout branch, refspec
push, nothing to do, an update.path escaping the repository, and the object identities of the template data."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from stockade.reflector.automation import GitAccess, GitError, ObjectIdentifier, run_automation
from stockade.reflector.models import ObjectKey

MANIFEST = textwrap.dedent(
    """\
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: other}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
      namespace: prod
    spec:
      template:
        spec:
          containers:
            - name: web
              image: ghcr.io/org/web:1.0.0 # {"$imagepolicy": "prod:web"}
    """
)


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd, env=env,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def remote(tmp_path: Path) -> str:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare)], check=True)
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "--quiet", "--initial-branch=main")
    (seed / "deploy.yaml").write_text(MANIFEST)
    git(seed, "add", ".")
    git(seed, "commit", "--quiet", "-m", "seed")
    git(seed, "push", "--quiet", str(bare), "main")
    return f"file://{bare}"


def resolve(namespace: str, name: str) -> dict[str, object] | None:
    return {"image": "ghcr.io/org/web", "tag": "1.1.0", "digest": ""} if (namespace, name) == ("prod", "web") else None


def automate(remote: str, **kwargs: object) -> object:
    options: dict[str, object] = {
        "checkout_branch": "main", "push_branch": "main", "update_path": ".", "resolve": resolve,
        "author_name": "bot", "author_email": "bot@example.com", "automation": ObjectKey("flux-system", "auto"),
    }
    options.update(kwargs)
    return run_automation(GitAccess(remote), **options)  # type: ignore[arg-type]


def test_push_branch_and_refspec(remote: str, tmp_path: Path) -> None:
    outcome = automate(remote, push_branch="auto/images", push_refspec="refs/heads/auto/images:refs/heads/review")
    bare = remote.removeprefix("file://")
    heads = git(Path(bare), "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    assert sorted(name for name, sha in (line.split() for line in heads) if sha == outcome.commit) == [  # type: ignore[attr-defined]
        "refs/heads/auto/images", "refs/heads/review"]
    main_head = git(Path(bare), "rev-parse", "refs/heads/main").strip()
    assert main_head != outcome.commit  # type: ignore[attr-defined]
    deployment = ObjectIdentifier("apps/v1", "Deployment", "web", "prod")
    assert list(outcome.result.Objects) == [deployment]  # type: ignore[attr-defined]
    assert outcome.result.Changes[0].Setter == "prod:web"  # type: ignore[attr-defined]
    # a second run starts from the existing push branch: nothing left to change
    again = automate(remote, push_branch="auto/images")
    assert again.commit == ""  # type: ignore[attr-defined]


def test_nothing_to_update_pushes_nothing(remote: str) -> None:
    outcome = automate(remote, resolve=lambda namespace, name: None)
    assert outcome.commit == "" and outcome.source_revision.startswith("main@sha1:")  # type: ignore[attr-defined]


def test_update_path_outside_the_repository_is_refused(remote: str) -> None:
    with pytest.raises(GitError, match="outside the repository"):
        automate(remote, update_path="../..")


def test_unreachable_remote_is_a_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="git fetch failed"):
        automate(f"file://{tmp_path}/missing.git")
