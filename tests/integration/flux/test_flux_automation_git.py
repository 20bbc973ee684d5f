"""ImageUpdateAutomation against a real kube-apiserver and Debian's `git daemon`: commit + push keeping comments and
layout, Flux's commit template data, and a push rejected by a concurrent commit retried on the new head."""

from __future__ import annotations

import itertools
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

from conftest import GitServer

from stockade.controllers.events import EventRecorder
from stockade.controllers.flux_automation import ImageUpdateAutomationController
from stockade.controllers.flux_image import ClusterObjects
from stockade.testing.apiserver import ControlPlane

_names = itertools.count()

MANIFEST = textwrap.dedent(
    """\
    # the app, kept by hand except for the image
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: podinfo   # trailing comment stays
      namespace: apps
    spec:
      template:
        spec:
          containers:
            - name:   podinfo
              image: "ghcr.io/org/podinfo:5.0.0" # {"$imagepolicy": "%(ns)s:podinfo"}
              args: [ --port=9898 ]   # odd spacing stays too
    """
)

TEMPLATE = textwrap.dedent(
    """\
    Automated image update by {{ .AutomationObject }}

    {{ range $file, $objects := .Changed.FileChanges -}}
    file {{ $file }}
    {{ end -}}
    {{ range $object, $changes := .Changed.Objects -}}
    {{ $object.Kind }} {{ $object.Namespace }}/{{ $object.Name }}:
    {{- range $_, $change := $changes }}
      {{ $change.OldValue }} -> {{ $change.NewValue }} ({{ $change.Setter }})
    {{- end }}
    {{ end -}}
    team={{ .Values.team }}"""
)


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=dev", "-c", "user.email=dev@example.com"]
    return subprocess.run(["git", *identity, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def seed_repository(server: GitServer, tmp_path: Path, ns: str) -> tuple[str, Path]:
    name = f"fleet-{os.getpid()}-{next(_names)}.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(server.base / name)], check=True)
    work = tmp_path / "seed"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "apps").mkdir()
    (work / "apps" / "podinfo.yaml").write_text(MANIFEST % {"ns": ns})
    (work / "README.md").write_text("fleet\n")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "seed")
    git(work, "push", "--quiet", server.url(name), "main")
    return server.url(name), work


def create(plane: ControlPlane, path: str, obj: dict[str, Any]) -> None:
    status, body, _ = plane.request("POST", path, obj)
    assert status == 201, body


def setup(plane: ControlPlane, url: str, ns: str, **automation_spec: Any) -> None:
    plane.ensure_namespace(ns)
    create(plane, f"/apis/source.toolkit.fluxcd.io/v1/namespaces/{ns}/gitrepositories", {
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": {"name": "fleet"},
        "spec": {"url": url, "interval": "1m", "ref": {"branch": "main"}}})
    create(plane, f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies", {
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": "podinfo", "labels": {"auto": "yes"}},
        "spec": {"imageRepositoryRef": {"name": "podinfo"}, "policy": {"semver": {"range": "5.x"}}}})
    status, policy, _ = plane.request("GET", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies/podinfo")
    policy["status"] = {"latestRef": {"name": "ghcr.io/org/podinfo", "tag": "5.1.0"}}
    status, body, _ = plane.request("PUT", f"/apis/image.toolkit.fluxcd.io/v1/namespaces/{ns}/imagepolicies/podinfo/status", policy)
    assert status == 200, body
    create(plane, f"/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations", {
        "apiVersion": "image.toolkit.fluxcd.io/v1beta2", "kind": "ImageUpdateAutomation", "metadata": {"name": "fleet"},
        "spec": {"interval": "1m", "sourceRef": {"kind": "GitRepository", "name": "fleet"},
                 "git": {"checkout": {"ref": {"branch": "main"}},
                         "commit": {"author": {"name": "fluxbot", "email": "flux@example.com"}},
                         "push": {"branch": "main"}},
                 "update": {"path": "./apps", "strategy": "Setters"}, "policySelector": {"matchLabels": {"auto": "yes"}},
                 **automation_spec}})


def automation(plane: ControlPlane, ns: str) -> dict[str, Any]:
    status, body, _ = plane.request("GET", f"/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations/fleet")
    assert status == 200, body
    return body


def test_commit_and_push_keep_comments_and_layout_with_flux_template_data(flux_crds: ControlPlane, api_client: Any, git_server: GitServer, tmp_path: Path) -> None:
    ns = f"auto-{os.getpid()}-{next(_names)}"
    url, _ = seed_repository(git_server, tmp_path, ns)
    setup(flux_crds, url, ns)
    status, obj, _ = flux_crds.request("GET", f"/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations/fleet")
    obj["spec"]["git"]["commit"]["messageTemplate"] = TEMPLATE
    obj["spec"]["git"]["commit"]["messageTemplateValues"] = {"team": "payments"}
    assert flux_crds.request("PUT", f"/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations/fleet", obj)[0] == 200
    controller = ImageUpdateAutomationController(ClusterObjects(api_client), recorder=EventRecorder(api_client))
    assert controller.run_once() >= 1

    clone = tmp_path / "check"
    subprocess.run(["git", "clone", "--quiet", url, str(clone)], check=True)
    diff = git(clone, "diff", "HEAD~1", "HEAD")
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == [
        f'-          image: "ghcr.io/org/podinfo:5.0.0" # {{"$imagepolicy": "{ns}:podinfo"}}',
        f'+          image: "ghcr.io/org/podinfo:5.1.0" # {{"$imagepolicy": "{ns}:podinfo"}}',
    ]
    assert git(clone, "log", "-1", "--format=%an <%ae>").strip() == "fluxbot <flux@example.com>"
    message = git(clone, "log", "-1", "--format=%B").strip()
    assert message == (
        f"Automated image update by {ns}/fleet\n\nfile podinfo.yaml\n"
        f"Deployment apps/podinfo:\n  ghcr.io/org/podinfo:5.0.0 -> ghcr.io/org/podinfo:5.1.0 ({ns}:podinfo)\n"
        "team=payments"
    )
    status_ = automation(flux_crds, ns)["status"]
    head = git(clone, "rev-parse", "HEAD").strip()
    assert status_["lastPushCommit"] == head and status_["lastPushTime"]
    assert status_["observedPolicies"] == {"podinfo": {"name": "ghcr.io/org/podinfo", "tag": "5.1.0"}}
    assert status_["observedSourceRevision"] == f"main@sha1:{head}"
    ready = next(c for c in status_["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["message"] == "repository up-to-date"
    deadline = time.monotonic() + 30
    while not (events := [e for e in flux_crds.request("GET", f"/api/v1/namespaces/{ns}/events")[1]["items"]
                          if e["involvedObject"].get("kind") == "ImageUpdateAutomation"]):
        assert time.monotonic() < deadline, "no Event about the push"
        time.sleep(0.3)
    assert events[0]["type"] == "Normal"
    assert events[0]["message"] == f"pushed commit '{head}' to 'refs/heads/main'\n{message}"

    # nothing left to change: Flux's "repository up-to-date", no new commit
    obj = automation(flux_crds, ns)
    obj["metadata"]["annotations"] = {"reconcile.fluxcd.io/requestedAt": "again"}
    assert flux_crds.request("PUT", f"/apis/image.toolkit.fluxcd.io/v1beta2/namespaces/{ns}/imageupdateautomations/fleet", obj)[0] == 200
    controller.run_once()
    after = automation(flux_crds, ns)["status"]
    assert after["lastPushCommit"] == head and after["lastHandledReconcileAt"] == "again"
    assert next(c for c in after["conditions"] if c["type"] == "Ready")["message"] == "repository up-to-date"


def test_push_rejected_by_a_concurrent_commit_is_retried_on_the_new_head(flux_crds: ControlPlane, api_client: Any, git_server: GitServer, tmp_path: Path) -> None:
    ns = f"auto-{os.getpid()}-{next(_names)}"
    url, seed = seed_repository(git_server, tmp_path, ns)
    setup(flux_crds, url, ns)

    def concurrent_commit(attempt: int) -> None:
        if attempt == 1:  # someone pushes between our clone and our push
            (seed / "README.md").write_text("fleet, edited by a human\n")
            git(seed, "commit", "--quiet", "-am", "human edit")
            git(seed, "push", "--quiet", url, "main")

    controller = ImageUpdateAutomationController(ClusterObjects(api_client), before_push=concurrent_commit)
    controller.run_once()
    clone = tmp_path / "check"
    subprocess.run(["git", "clone", "--quiet", url, str(clone)], check=True)
    assert git(clone, "log", "--format=%s").splitlines() == ["Update from image update automation", "human edit", "seed"]
    assert (clone / "README.md").read_text() == "fleet, edited by a human\n"
    assert "ghcr.io/org/podinfo:5.1.0" in (clone / "apps" / "podinfo.yaml").read_text()
    status = automation(flux_crds, ns)["status"]
    assert status["lastPushCommit"] == git(clone, "rev-parse", "HEAD").strip()
