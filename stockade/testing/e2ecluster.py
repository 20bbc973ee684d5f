"""A local control plane shaped like the kind cluster of Kyverno's CI, with ``stockade serve`` as the admission webhook.

Runs etcd, kube-apiserver (default admission plugins, Node+RBAC, privileged containers allowed, the alpha/beta
admissionregistration APIs beside v1 for Validating/MutatingAdmissionPolicy), kube-controller-manager (namespaces, GC,
Deployments, Jobs, service-account tokens, signed with the apiserver's key), kube-scheduler, and KWOK with two fake
nodes named like kind's (``kind-control-plane``, ``kind-worker``) so Pods are scheduled and reach Running without a
kubelet; KWOK also serves the nodes' kubelet API, so ``kubectl exec`` runs its command on this host (in the state
directory's ``kwok-exec``).  Then it installs the CRDs, the ``kyverno`` namespace with a ``kyverno`` ConfigMap (Kyverno's
dynamic configuration, which several tests patch), starts the host pod runner (``hostpods.py``: Pods of python images
run as host processes, their Services reachable through its forward proxy) and ``stockade serve --from-cluster
--register-webhooks`` on 127.0.0.1, whose plain-HTTP calls go through that proxy.

Processes outlive the command (``up`` returns once everything is ready); their pids and the kubeconfig live in the
state directory, which ``down`` reads to stop exactly those processes.

    python -m stockade.testing.e2ecluster up [--state-dir DIR]
    python -m stockade.testing.e2ecluster env [--state-dir DIR]     # shell exports for kubectl/chainsaw
    python -m stockade.testing.e2ecluster down [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from stockade.testing.apiserver import REPO_ROOT, ControlPlane, ControlPlaneUnavailable, find_binary, free_port, program_name
from stockade.testing.controllerbridge import baseline_serve_args, controller_deployments
from stockade.testing.hostpods import HostPodError, ensure_pod_python
from stockade.webhook.certs import KeyPair, issue_serving_cert, write_pair
from stockade.errors import StockadeError

DEFAULT_STATE_DIR = REPO_ROOT / ".cache" / "e2e" / "cluster"
# stockade serve does the work of all of Kyverno's controllers, so it runs as its own cluster-admin identity; Kyverno's
# admission controller account gets the permissions Kyverno's chart gives it (policies' SubjectAccessReviews ask about it)
STOCKADE_USER = "system:serviceaccount:kyverno:stockade"
KYVERNO_ADMISSION_USER = "system:serviceaccount:kyverno:kyverno-admission-controller"
# DeletingPolicies and CleanupPolicies act as Kyverno's cleanup controller account, with its chart's permissions
KYVERNO_CLEANUP_USER = "system:serviceaccount:kyverno:kyverno-cleanup-controller"
STOCKADE_NAMESPACE = "kyverno"
# Kyverno's webhooks call the kyverno-svc Service; its fixed cluster IP is what the CONNECT proxy redirects to
# stockade serve (see connectproxy.py)
SERVICE_NAME = "kyverno-svc"
SERVICE_CLUSTER_IP = "10.96.0.100"
FAKE_NODES = ("kind-control-plane", "kind-worker")
# the venv Pods of python images run with (hostpods.py); made once, kept across clusters
POD_PYTHON_DIR = REPO_ROOT / ".cache" / "e2e" / "pod-python"
EXTRA_CRDS = REPO_ROOT / "hack" / "e2e" / "extra-crds.yaml"
KIND_DEFAULTS = REPO_ROOT / "hack" / "e2e" / "kind-defaults.yaml"  # what kind adds to the cluster Kyverno's CI uses
BACKGROUND_RBAC = REPO_ROOT / "hack" / "e2e" / "background-controller-rbac.yaml"
BACKGROUND_USER = "system:serviceaccount:kyverno:kyverno-background-controller"
REPORTS_RBAC = REPO_ROOT / "hack" / "e2e" / "reports-controller-rbac.yaml"
REPORTS_USER = "system:serviceaccount:kyverno:kyverno-reports-controller"

# Kyverno's dynamic configuration as its Helm chart installs it by default (the `standard` values do not change
# it): resource filters keep system traffic away from the engine, success events are off.
KYVERNO_CONFIG_DATA: dict[str, str] = {
    "defaultRegistry": "docker.io",
    "enableDefaultRegistryMutation": "true",
    "generateSuccessEvents": "false",
    "excludeGroups": "system:nodes",
    "resourceFilters": "".join(
        f"[{entry}]"
        for entry in (
            "*/*,kyverno,*",
            "Event,*,*",
            "*/*,kube-system,*",
            "*/*,kube-public,*",
            "*/*,kube-node-lease,*",
            "Node,*,*",
            "Node/?*,*,*",
            "APIService,*,*",
            "APIService/?*,*,*",
            "TokenReview,*,*",
            "SubjectAccessReview,*,*",
            "SelfSubjectAccessReview,*,*",
            "Binding,*,*",
            "Pod/binding,*,*",
            "ReplicaSet,*,*",
            "ReplicaSet/?*,*,*",
            "EphemeralReport,*,*",
            "ClusterEphemeralReport,*,*",
        )
    ),
    "webhooks": json.dumps(
        # as Kyverno's chart renders it: its default excludes kube-system, the release namespace is appended
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kyverno"]},
                ]
            }
        }
    ),
    "webhookAnnotations": json.dumps({"admissions.enforcer/disabled": "true"}),
}


class ClusterError(StockadeError, RuntimeError):
    """A component failed to start or become ready; the message names it and points at its log."""


@dataclass
class E2EControlPlane(ControlPlane):
    """kube-apiserver configured like kind's (see module docstring) plus an extra token for stockade's identity."""

    stockade_token: str = field(default_factory=lambda: os.urandom(16).hex())
    egress_proxy_socket: str = ""
    # kind's admin kubeconfig authenticates as kubernetes-admin; the suite's user subjects name it (filter/*/user)
    admin_user: ClassVar[str] = "kubernetes-admin"

    def apiserver_args(self) -> list[str]:
        egress = self.workdir / "egress-selector.yaml"
        if self.egress_proxy_socket:
            # webhook calls ("cluster" traffic) go through the CONNECT proxy, which reaches the Service's stand-in
            egress.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "apiserver.k8s.io/v1beta1",
                        "kind": "EgressSelectorConfiguration",
                        "egressSelections": [
                            {
                                "name": "cluster",
                                "connection": {"proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": self.egress_proxy_socket}}},
                            }
                        ],
                    }
                )
            )
        return [
            *([f"--egress-selector-config-file={egress}"] if self.egress_proxy_socket else []),
            *self.serving_args(),
            # client certificates signed by the cluster CA authenticate (kind's users, and CSRs tests get approved)
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            # kubeadm adds NodeRestriction to the defaults (PodSecurity, ServiceAccount, webhooks, VAP, ...)
            "--enable-admission-plugins=NodeRestriction",
            # Streaming lists (WatchList, on by default since 1.34) need etcd's RequestWatchProgress (etcd >= 3.4.31 /
            # 3.5.13); Debian's etcd 3.4.23 lacks it, and the server would then end every streaming watch with an
            # error that KWOK's informers retry forever instead of falling back: off, clients list and watch
            "--feature-gates=WatchList=false",
            # MutatingAdmissionPolicy is GA (v1) since 1.36; Kyverno's suite also has folders for v1beta1 and v1alpha1
            "--runtime-config=admissionregistration.k8s.io/v1alpha1=true,admissionregistration.k8s.io/v1beta1=true",
            # exec/attach/logs/port-forward go to the node's kubelet API, which KWOK serves (see _start_controllers):
            # its serving certificate is signed by the cluster CA, and a fake node's only routable address is its
            # InternalIP (127.0.0.1; its Hostname address is the node name, which resolves nowhere)
            f"--kubelet-certificate-authority={self.ca_file}",
            "--kubelet-preferred-address-types=InternalIP",
            "--v=1",
        ]

    def _write_credentials(self) -> None:
        super()._write_credentials()
        with (self.workdir / "tokens.csv").open("a") as tokens:
            tokens.write(f'{self.stockade_token},{STOCKADE_USER},kyverno-uid,"system:serviceaccounts,system:serviceaccounts:kyverno"\n')
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"][0]["user"]["token"] = self.stockade_token
        (self.workdir / "stockade.kubeconfig").write_text(yaml.safe_dump(config))


def _kyverno_rbac(component: str, user: str, core_rules: list[dict[str, Any]], extra_rules: list[dict[str, Any]], *, view: bool) -> list[dict[str, Any]]:
    """One Kyverno controller's account with the ClusterRoles its Helm chart (Kyverno 1.19, `standard` CI values)
    gives it: an aggregated role collecting ``:core``, ``:additional`` (the values' extraResources) and every ClusterRole
    a test labels ``rbac.kyverno.io/aggregate-to-<component>``, bound to the account, plus the ``view`` role when the
    chart binds it."""
    name = f"kyverno:{component}"
    labels = {"app.kubernetes.io/component": component, "app.kubernetes.io/instance": "kyverno", "app.kubernetes.io/part-of": "kyverno"}
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {f"rbac.kyverno.io/aggregate-to-{component}": "true"}}, {"matchLabels": labels}]},
        },
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"{name}:core", "labels": labels}, "rules": core_rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"{name}:additional", "labels": labels}, "rules": extra_rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subject,
        },
    ]
    if view:
        manifests.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{name}:view"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": subject,
            }
        )
    return manifests


_EVERYTHING = ["create", "delete", "get", "list", "patch", "update", "watch", "deletecollection"]
_READ = ["get", "list", "watch"]


def _kyverno_admission_rbac() -> list[dict[str, Any]]:
    """Kyverno's admission controller account: manage webhooks, policies, reports and events, create
    SubjectAccessReviews, read ConfigMaps and Namespaces, the ``view`` role, and Secrets (the CI values)."""
    core_rules = [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]},
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": [
                "mutatingwebhookconfigurations", "validatingwebhookconfigurations", "validatingadmissionpolicies",
                "validatingadmissionpolicybindings", "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
            ],
            "verbs": _EVERYTHING,
        },
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "clusterroles", "rolebindings", "clusterrolebindings"], "verbs": _READ},
        {
            "apiGroups": ["kyverno.io"],
            "resources": [
                "policies", "policies/status", "clusterpolicies", "clusterpolicies/status", "updaterequests", "updaterequests/status",
                "globalcontextentries", "globalcontextentries/status",
            ],
            "verbs": _EVERYTHING,
        },
        {"apiGroups": ["kyverno.io", "policies.kyverno.io"], "resources": ["policyexceptions"], "verbs": ["create", "get", "list", "patch", "update", "watch"]},
        {
            "apiGroups": ["policies.kyverno.io"],
            "resources": [
                f"{prefix}{kind}policies{status}"
                for prefix in ("", "namespaced")
                for kind in ("validating", "imagevalidating", "generating", "mutating")
                for status in ("", "/status")
            ],
            "verbs": _EVERYTHING,
        },
        {"apiGroups": ["reports.kyverno.io"], "resources": ["ephemeralreports", "clusterephemeralreports"], "verbs": _EVERYTHING},
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports", "policyreports/status", "clusterpolicyreports", "clusterpolicyreports/status"], "verbs": _EVERYTHING},
        {"apiGroups": ["openreports.io"], "resources": ["reports", "reports/status", "clusterreports", "clusterreports/status"], "verbs": _EVERYTHING},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": _READ},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "update", "patch", "get", "list", "watch"]},
    ]
    extra_rules = [{"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["create", "update", "patch", "delete", "get", "list"]}]
    return _kyverno_rbac("admission-controller", KYVERNO_ADMISSION_USER, core_rules, extra_rules, view=True)


def _kyverno_cleanup_rbac() -> list[dict[str, Any]]:
    """Kyverno's cleanup controller account: read its policies, Namespaces and ConfigMaps, write their status and
    events; it may list, watch and delete Pods (the CI values) and whatever a test's ClusterRoles grant, nothing else."""
    core_rules = [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["create", "delete", "get", "list", "update", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": _READ},
        {"apiGroups": ["kyverno.io"], "resources": ["clustercleanuppolicies", "cleanuppolicies"], "verbs": ["list", "watch"]},
        {"apiGroups": ["policies.kyverno.io"], "resources": ["deletingpolicies", "namespaceddeletingpolicies"], "verbs": _READ},
        {"apiGroups": ["policies.kyverno.io"], "resources": ["deletingpolicies/status", "namespaceddeletingpolicies/status"], "verbs": ["update"]},
        {"apiGroups": ["policies.kyverno.io"], "resources": ["policyexceptions"], "verbs": ["get", "list", "patch", "update", "watch"]},
        {"apiGroups": ["kyverno.io"], "resources": ["globalcontextentries", "globalcontextentries/status"], "verbs": _EVERYTHING},
        {"apiGroups": ["kyverno.io"], "resources": ["clustercleanuppolicies/status", "cleanuppolicies/status"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": _READ},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    ]
    # pods: list and delete (scripts/config/standard), plus watch, which Kyverno's CI grants for the ttl folder
    # (scripts/config/ttl): its TTL manager looks after a resource only when it may watch, list and delete it
    extra_rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete", "watch"]}]
    return _kyverno_rbac("cleanup-controller", KYVERNO_CLEANUP_USER, core_rules, extra_rules, view=False)


@dataclass
class E2ECluster:
    """The whole stack; ``up()`` starts it and records pids, ``down()`` stops what the state directory records."""

    state_dir: Path = DEFAULT_STATE_DIR
    python: str = sys.executable
    timings: dict[str, float] = field(default_factory=dict)
    stockade_port: int = 0
    # the processes this object started, kept so ``down`` can reap them (a caller that stays alive, such as a test,
    # would otherwise drop running children); a later ``down`` from another process goes by the pid file alone
    children: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pids.json"

    def up(self) -> None:
        if self.pid_file.exists() and any(_alive(pid) for pid in self._recorded_pids().values()):
            raise ClusterError(f"a cluster is already running from {self.state_dir}; run `down` first")
        binaries = {
            "kube-controller-manager": find_binary("kube-controller-manager", "STOCKADE_KUBE_CONTROLLER_MANAGER"),
            "kube-scheduler": find_binary("kube-scheduler", "STOCKADE_KUBE_SCHEDULER"),
            "kwok": find_binary("kwok", "STOCKADE_KWOK"),
            "kubectl": find_binary("kubectl", "STOCKADE_KUBECTL"),
        }
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.state_dir.mkdir(parents=True)
        started = time.monotonic()
        self.stockade_port = free_port()
        plane = E2EControlPlane(workdir=self.state_dir, egress_proxy_socket=_egress_socket_path(self.state_dir))
        try:
            plane.start()
            self.timings["apiserver_ready_s"] = time.monotonic() - started
            self._start_egress_proxy(plane)
            self._record(plane.processes)
            self._start_controllers(plane, binaries)
            self._record(plane.processes)
            self._install(binaries["kubectl"])
            self.timings["cluster_ready_s"] = time.monotonic() - started
            self._start_host_pods(plane)
            self._record(plane.processes)
            self._start_stockade(plane)
            self._record(plane.processes)
            self._start_bridge(plane)
            self._record(plane.processes)
            self._wait_nodes_ready(binaries["kubectl"])
            self._wait_controllers_rolled_out(binaries["kubectl"])
        except BaseException:
            self.down()
            raise
        self.timings["total_s"] = time.monotonic() - started
        (self.state_dir / "timings.json").write_text(json.dumps(self.timings, indent=2))

    def _start_egress_proxy(self, plane: E2EControlPlane) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.state_dir / "egress-proxy.log", "wb") as log:  # the child keeps its own descriptor
            plane.processes.append(
                subprocess.Popen(
                    [
                        self.python, "-m", "stockade.testing.connectproxy", f"--socket={plane.egress_proxy_socket}",
                        f"--map={SERVICE_CLUSTER_IP}:443=127.0.0.1:{self.stockade_port}",
                    ],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=REPO_ROOT,
                )
            )

    def _start_host_pods(self, plane: E2EControlPlane) -> None:
        """The host pod runner and its forward proxy (hostpods.py, serviceproxy.py): Pods of python images run on
        this host, and ``stockade serve`` reaches their Services through the proxy (its HTTP_PROXY)."""
        started = time.monotonic()
        try:
            ensure_pod_python(POD_PYTHON_DIR, self.python)
        except HostPodError as exc:  # no package index: the cluster still serves every test that needs no such Pod
            print(f"e2e-cluster: no host pod runner ({exc}); Pods of python images will not run", file=sys.stderr, flush=True)
            return
        self.timings["pod_python_s"] = time.monotonic() - started
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.state_dir / "host-pods.log", "wb") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [
                    self.python, "-m", "stockade.testing.hostpods", f"--kubeconfig={plane.kubeconfig}",
                    f"--state-dir={self.state_dir}", f"--proxy-port={port}", f"--pod-python={POD_PYTHON_DIR}",
                ],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=REPO_ROOT,
            )
        plane.processes.append(process)
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise ClusterError(f"the host pod runner exited with {process.returncode}; see {self.state_dir / 'host-pods.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the host pod runner's proxy is not listening after 60s; see {self.state_dir / 'host-pods.log'}") from None
                time.sleep(0.2)
        (self.state_dir / "hostpods.port").write_text(str(port))

    def _start_bridge(self, plane: E2EControlPlane) -> None:
        """The bridge from Kyverno's stand-in controller Deployments to ``stockade serve`` (controllerbridge.py)."""
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.state_dir / "controller-bridge.log", "ab") as log:  # the child keeps its own descriptor
            plane.processes.append(
                subprocess.Popen(
                    [self.python, "-m", "stockade.testing.controllerbridge", f"--state-dir={self.state_dir}"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=REPO_ROOT,
                )
            )

    def _wait_controllers_rolled_out(self, kubectl: str) -> None:
        for deployment in controller_deployments():
            self._kubectl(kubectl, "rollout", "status", f"deployment/{deployment['metadata']['name']}", "-n", STOCKADE_NAMESPACE, "--timeout=180s")

    def _restore_controllers(self, kubectl: str) -> None:
        """Put Kyverno's stand-in Deployments back to the install's manifests when a test changed their Pod template
        (args, ``rollout restart``) or deleted them, and wait for the rollout (the bridge restarts serve for it)."""
        for deployment in controller_deployments():
            name = deployment["metadata"]["name"]
            try:
                current = json.loads(self._kubectl(kubectl, "get", "deployment", name, "-n", STOCKADE_NAMESPACE, "-o", "json"))
            except ClusterError:
                self._kubectl(kubectl, "create", "-f", "-", stdin=yaml.safe_dump(deployment))
                continue
            template, wanted = current["spec"]["template"], deployment["spec"]["template"]
            differs = (
                (template["metadata"].get("annotations") or {}) != (wanted["metadata"].get("annotations") or {})
                or [c.get("args") for c in template["spec"]["containers"]] != [c.get("args") for c in wanted["spec"]["containers"]]
                or current["spec"].get("replicas") != deployment["spec"]["replicas"]
            )
            if differs:
                self._kubectl(kubectl, "replace", "-f", "-", stdin=yaml.safe_dump(deployment))
        self._wait_controllers_rolled_out(kubectl)

    def bridged_args(self) -> tuple[str, ...]:
        """The serve flags translated from Kyverno's admission controller Deployment that serve runs with now."""
        try:
            return tuple(json.loads((self.state_dir / "stockade.bridged.json").read_text()))
        except (OSError, ValueError):
            return baseline_serve_args()

    def _profile_args(self) -> tuple[str, ...]:
        try:
            return tuple(json.loads((self.state_dir / "stockade.profile.json").read_text()))
        except (OSError, ValueError):
            return ()

    def _proxy_env(self) -> dict[str, str]:
        """``stockade serve``'s HTTP proxy settings: http:// calls go through the host pod runner's forward proxy,
        which routes cluster Service names; the API server and everything else on this host stay direct."""
        try:
            port = int((self.state_dir / "hostpods.port").read_text())
        except (OSError, ValueError):
            return {}
        bypass = [entry for entry in os.environ.get("NO_PROXY", os.environ.get("no_proxy", "")).split(",") if entry.strip()]
        no_proxy = ",".join(dict.fromkeys([*bypass, "127.0.0.1", "localhost", "::1"]))
        proxy = f"http://127.0.0.1:{port}"
        return {"HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": no_proxy, "no_proxy": no_proxy}

    def _start_controllers(self, plane: E2EControlPlane, binaries: dict[str, str]) -> None:
        kubeconfig = str(plane.kubeconfig)
        plane._spawn(
            "kube-controller-manager",
            [
                binaries["kube-controller-manager"],
                f"--kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--cluster-name=kind",
                f"--service-account-private-key-file={self.state_dir / 'sa.key'}",
                f"--root-ca-file={plane.ca_file}",
                # approved kubernetes.io/kube-apiserver-client CSRs are signed with the cluster CA, as in kind
                f"--cluster-signing-cert-file={plane.ca_file}",
                f"--cluster-signing-key-file={self.state_dir / 'ca.key'}",
                "--use-service-account-credentials=false",
                "--v=1",
            ],
        )
        plane._spawn(
            "kube-scheduler",
            [binaries["kube-scheduler"], f"--kubeconfig={kubeconfig}", "--secure-port=0", "--leader-elect=false", "--v=1"],
        )
        # KWOK serves the kubelet API of its fake nodes on one port, which its node stage publishes as every node's
        # daemonEndpoints.kubeletEndpoint.Port (beside the InternalIP 127.0.0.1), the way kwokctl wires it
        kubelet_port = free_port()
        ca = KeyPair((self.state_dir / "ca.crt").read_bytes(), (self.state_dir / "ca.key").read_bytes())
        write_pair(issue_serving_cert(ca, ["127.0.0.1", "localhost"]), self.state_dir / "kwok.crt", self.state_dir / "kwok.key")
        plane._spawn(
            "kwok",
            [
                binaries["kwok"],
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
                f"--node-port={kubelet_port}",
                f"--server-address=127.0.0.1:{kubelet_port}",
                f"--tls-cert-file={self.state_dir / 'kwok.crt'}",
                f"--tls-private-key-file={self.state_dir / 'kwok.key'}",
                "--node-lease-duration-seconds=40",
                # Pods become Running and go away when deleted, and Jobs' Pods keep running (no pod-complete stage)
                f"--config={kwok_pod_stages(binaries['kwok'])}",
                f"--config={self._write_kwok_exec_config()}",
            ],
        )

    def _write_kwok_exec_config(self) -> Path:
        """A ClusterExec for every Pod and container: `kubectl exec` runs the command on this host, in a scratch
        directory of the state directory (KWOK's ``local`` exec; the containers it simulates have no file system).
        Test tooling only: whoever may exec into a Pod of this cluster runs commands as the harness's user."""
        workdir = self.state_dir / "kwok-exec"
        workdir.mkdir(exist_ok=True)
        config = self.state_dir / "kwok-exec.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "ClusterExec",
                    "metadata": {"name": "host-scratch-dir"},
                    "spec": {"execs": [{"local": {"workDir": str(workdir)}}]},
                }
            )
        )
        return config

    def _install(self, kubectl: str) -> None:
        """CRDs, fake nodes, the kyverno namespace, its ConfigMap and stockade's cluster-admin binding."""
        manifests: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STOCKADE_NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE_NAME, "namespace": STOCKADE_NAMESPACE},
                "spec": {"clusterIP": SERVICE_CLUSTER_IP, "ports": [{"name": "https", "port": 443, "targetPort": 9443}]},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kyverno", "namespace": STOCKADE_NAMESPACE},
                "data": KYVERNO_CONFIG_DATA,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "stockade-e2e-cluster-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STOCKADE_USER}],
            },
            *_kyverno_admission_rbac(),
            *_kyverno_cleanup_rbac(),
            *(_fake_node(name) for name in FAKE_NODES),
            # Kyverno's controller Deployments, whose rollouts restart stockade serve (controllerbridge.py)
            *controller_deployments(),
        ]
        self._kubectl(kubectl, "apply", "--server-side", "-f", str(REPO_ROOT / "deploy" / "crds"))
        self._kubectl(kubectl, "apply", "--server-side", "-f", str(EXTRA_CRDS))
        self._kubectl(kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        self._kubectl(kubectl, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(manifests))
        self._kubectl(kubectl, "apply", "--server-side", "-f", str(BACKGROUND_RBAC))
        self._kubectl(kubectl, "apply", "--server-side", "-f", str(REPORTS_RBAC))
        self._kubectl(kubectl, "apply", "--server-side", "-f", str(KIND_DEFAULTS))
        self._kubectl(kubectl, "apply", "--server-side", "-f", "-", stdin=self._user_roles())

    def _user_roles(self) -> str:
        """The chart's ClusterRoles for policy users (aggregated into admin/view), under the names Kyverno's release
        ``kyverno`` gives them, as a cluster moving from Kyverno keeps them (``rbac.userRoles.namePrefix``)."""
        helm = find_binary("helm", "STOCKADE_HELM")
        chart = REPO_ROOT / "deploy" / "helm" / "stockade"
        command = [helm, "template", "kyverno", str(chart), "--set", "rbac.userRoles.namePrefix=kyverno", "--show-only", "templates/user-roles.yaml"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"helm template of the user roles failed: {result.stderr.strip()}")
        return result.stdout

    def reset_between_folders(self) -> None:
        """Kyverno's CI gives every folder a fresh kind cluster; one control plane serves them all here, so what a
        folder leaves in the shared namespaces is cleared before the next: the Events in ``default`` and ``kyverno``
        (several tests grep them), the ``kyverno`` ConfigMap, which tests patch and do not always restore, and
        Kyverno's controller Deployments, whose args tests patch (restored, serve restarted with the install's flags)."""
        kubectl = find_binary("kubectl", "STOCKADE_KUBECTL")
        self._restore_controllers(kubectl)
        for namespace in ("default", STOCKADE_NAMESPACE):
            self._kubectl(kubectl, "delete", "events", "--all", "-n", namespace, "--wait=false")
        configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kyverno", "namespace": STOCKADE_NAMESPACE}, "data": KYVERNO_CONFIG_DATA}
        try:
            self._kubectl(kubectl, "replace", "-f", "-", stdin=yaml.safe_dump(configmap))
        except ClusterError:  # a test deleted it
            self._kubectl(kubectl, "create", "-f", "-", stdin=yaml.safe_dump(configmap))

    def _start_stockade(self, plane: E2EControlPlane) -> None:
        plane.processes.append(self._launch_stockade(self.stockade_port, ()))

    def restart_stockade(self, extra_args: tuple[str, ...] | None = None, bridged: tuple[str, ...] | None = None) -> None:
        """Stop the running `stockade serve` and start it again on the same port with ``extra_args`` (kept until the
        next call that gives them): how a folder that Kyverno's CI runs against a differently installed Kyverno (its
        own Helm values) gets its install; ``bridged``: the flags translated from Kyverno's admission controller
        Deployment (the controller bridge's restarts), likewise kept.  One restart at a time across processes."""
        import fcntl

        with open(self.state_dir / "stockade.restart.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            pids = self._recorded_pids()
            if "stockade" not in pids:
                raise ClusterError(f"no stockade serve recorded in {self.pid_file}; is the cluster up?")
            if extra_args is not None:
                (self.state_dir / "stockade.profile.json").write_text(json.dumps(list(extra_args)))
            if bridged is not None:
                (self.state_dir / "stockade.bridged.json").write_text(json.dumps(list(bridged)))
            port = int((self.state_dir / "stockade.port").read_text())
            _stop_group(pids["stockade"], grace=20)
            process = self._launch_stockade(port, self._profile_args())
            pids = self._recorded_pids()  # as recorded now, the new server's pid in its place
            pids["stockade"] = process.pid
            self.pid_file.write_text(json.dumps(pids, indent=2))
            self.children.append(process)

    def _launch_stockade(self, port: int, extra_args: tuple[str, ...]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **self._proxy_env()}
        started = time.monotonic()
        with open(self.state_dir / "stockade.log", "ab") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [
                    self.python, "-m", "stockade", "serve",
                    "--from-cluster", "--register-webhooks",
                    f"--kubeconfig={self.state_dir / 'stockade.kubeconfig'}",
                    # registered as Kyverno registers itself: clientConfig.service kyverno-svc/kyverno (via the egress proxy)
                    "--host=127.0.0.1", f"--port={port}", f"--service-name={SERVICE_NAME}",
                    f"--namespace={STOCKADE_NAMESPACE}", "--no-leader-election",
                    # policy changes reach the snapshot within one reload interval (default 5 s); chainsaw creates the
                    # next test's namespace right after deleting a policy, and Kyverno drops it within milliseconds
                    "--reload-interval=0.25",
                    # Kyverno's suite asserts Kyverno's Event components (kyverno-admission, ...): the compatibility setting
                    "--event-components=kyverno",
                    # ... and Kyverno's webhook configuration names and managed-by label
                    "--webhook-names=kyverno",
                    # generate/mutate targets must fit the RBAC of Kyverno's background controller account
                    # (BACKGROUND_RBAC), and its requests are "background requests" (skipBackgroundRequests)
                    f"--background-service-account={BACKGROUND_USER}",
                    # Kyverno's standard values: features.validatingAdmissionPolicyReports.enabled
                    "--validating-admission-policy-reports",
                    # ... and keeps its certificates in Kyverno's Secrets (tls-certificates reads them)
                    "--kyverno-tls-secrets",
                    # global context data is loaded with the RBAC of Kyverno's admission controller account, and
                    # DeletingPolicies/CleanupPolicies delete with that of its cleanup controller account
                    f"--admission-service-account={KYVERNO_ADMISSION_USER}",
                    f"--cleanup-service-account={KYVERNO_CLEANUP_USER}",
                    # CEL policies' RBACPermissionsGranted: may Kyverno's reports controller account (REPORTS_RBAC)
                    # get/list/watch what they match
                    f"--reports-service-account={REPORTS_USER}",
                    f"--cert-dir={self.state_dir / 'stockade-certs'}",
                    *os.environ.get("STOCKADE_E2E_SERVE_ARGS", "").split(),
                    # what Kyverno's admission controller Deployment's args ask for (controllerbridge.py)
                    *self.bridged_args(),
                    *extra_args,
                ],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=REPO_ROOT,
            )
        try:
            self._wait_stockade_ready(process, port, started)
        except BaseException:
            _stop_group(process.pid, grace=5)
            raise
        return process

    def _wait_stockade_ready(self, process: subprocess.Popen[bytes], port: int, started: float) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ClusterError(f"stockade serve exited with {process.returncode}; see {self.state_dir / 'stockade.log'}")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/health/readiness", context=context, timeout=5) as response:
                    if response.status == 200:
                        self.timings["stockade_ready_s"] = time.monotonic() - started
                        (self.state_dir / "stockade.port").write_text(str(port))
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ClusterError(f"stockade serve not ready after 120s; see {self.state_dir / 'stockade.log'}")

    def _wait_nodes_ready(self, kubectl: str) -> None:
        self._kubectl(kubectl, "wait", "--for=condition=Ready", "node", "--all", "--timeout=120s")

    def _kubectl(self, kubectl: str, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [kubectl, f"--kubeconfig={self.kubeconfig}", *args], input=stdin, capture_output=True, text=True, timeout=180
        )
        if result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args[:3])} failed: {result.stderr.strip()}")
        return result.stdout

    def _record(self, processes: list[subprocess.Popen[bytes]]) -> None:
        self.children.extend(p for p in processes if p not in self.children)
        pids = {_process_name(p, self.python): p.pid for p in processes}
        self.pid_file.write_text(json.dumps(pids, indent=2))

    def _recorded_pids(self) -> dict[str, int]:
        try:
            return {name: int(pid) for name, pid in json.loads(self.pid_file.read_text()).items()}
        except (OSError, ValueError):
            return {}

    def down(self) -> list[str]:
        """Stop the recorded processes, newest first (each leads its own session, so its group is signalled)."""
        stopped = []
        for name, pid in reversed(list(self._recorded_pids().items())):
            if _stop_group(pid, grace=20 if name == "stockade" else 10):
                stopped.append(name)
        self.pid_file.unlink(missing_ok=True)
        for child in self.children:
            if child.poll() is None:  # its group was signalled above; reap it
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.children.clear()
        return stopped

    def env(self) -> str:
        bin_dir = REPO_ROOT / ".cache" / "bin"
        return f"export KUBECONFIG={self.kubeconfig}\nexport PATH={bin_dir}:$PATH\n"


def _egress_socket_path(state_dir: Path) -> str:
    """The proxy's Unix socket: in the state directory, or in a short temporary directory when that path would pass
    the kernel's 107-byte limit for socket paths (a deep checkout)."""
    path = state_dir / "egress.sock"
    if len(os.fsencode(path)) <= 100:
        return str(path)
    return str(Path(tempfile.mkdtemp(prefix="stockade-egress-")) / "egress.sock")


def _process_name(process: subprocess.Popen[bytes], python: str) -> str:
    """The binary's name, or for ``python -m MODULE`` the module's last part ("stockade" for the server)."""
    program, args = program_name(process), process.args
    if program == python and isinstance(args, (list, tuple)) and len(args) > 2:
        module = os.fsdecode(args[2])
        return "stockade" if module == "stockade" else module.rpartition(".")[2]
    return Path(program).name


def _fake_node(name: str) -> dict[str, Any]:
    """A Node that KWOK keeps Ready (it manages nodes carrying the kwok.x-k8s.io/node=fake annotation)."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
    spec: dict[str, Any] = {}
    if name.endswith("control-plane"):
        labels["node-role.kubernetes.io/control-plane"] = ""
        spec["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": spec,
    }


def kwok_pod_stages(kwok_binary: str) -> Path:
    """The KWOK pod stages .ci/build-kwok.sh writes beside the binary (ready and delete, no completion)."""
    stages = Path(kwok_binary).parent / "kwok-pod-stages.yaml"
    if not stages.is_file():
        raise ClusterError(f"{stages} is missing: run .ci/build-kwok.sh")
    return stages


def _stop_group(pid: int, grace: float) -> bool:
    """SIGTERM the process group ``pid`` leads, SIGKILL after ``grace`` seconds; False when it was already gone."""
    if not _alive(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    return True


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="e2ecluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down", "env"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    cluster = E2ECluster(state_dir=args.state_dir.resolve())
    if args.action == "env":
        sys.stdout.write(cluster.env())
        return 0
    if args.action == "down":
        stopped = cluster.down()
        print(f"e2e-cluster: stopped {', '.join(stopped) or 'nothing'}")
        return 0
    try:
        cluster.up()
    except (ClusterError, ControlPlaneUnavailable, RuntimeError) as exc:
        print(f"e2e-cluster: {exc}", file=sys.stderr)
        return 1
    figures = ", ".join(f"{name} {value:.1f}" for name, value in cluster.timings.items())
    print(f"e2e-cluster: up ({figures}); kubeconfig {cluster.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
