"""Kyverno's controller Deployments as stand-ins on the e2e control plane, bridged to ``stockade serve``.

Several of Kyverno's e2e tests reconfigure or restart Kyverno by its Deployments: they patch the args of
``deployment/kyverno-admission-controller`` (``--allowHTTPInNamespacedPolicies=true``, ``--httpBlocklist=...``) or
``kubectl rollout restart`` one of them, then wait for ``kubectl rollout status``.  `stockade serve` does the work of
all four controllers from one host process, so the cluster gets stand-in Deployments named, labelled and argued as
Kyverno's chart makes them (`controller_deployments`), and this bridge makes their rollouts real:

- every Pod template carries a scheduling gate (`GATE`), so a new Pod stays Pending until the bridge lets it go;
- for a new Pod whose template differs from the one ``stockade serve`` last started for (its ``pod-template-hash``),
  the bridge restarts ``stockade serve`` with the admission controller's Kyverno flags translated into serve flags
  (`translate`; flags without a counterpart are logged and ignored), waits until it is ready, and only then lifts
  the gate: KWOK then runs the Pod, the Deployment finishes its rollout, and ``kubectl rollout status`` returns once
  the restarted server answers;
- a Pod that only replaces a deleted one (same template) is let go at once.

``E2ECluster.reset_between_folders`` puts the Deployments back to these manifests (and waits for that rollout), as
Kyverno's CI starts every folder on a fresh cluster.  Test tooling.

    python -m stockade.testing.controllerbridge --state-dir DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("stockade.controllerbridge")

NAMESPACE = "kyverno"
GATE = "stockade.io/controller-bridge"
ADMISSION = "admission-controller"
# component -> (Deployment name, container name, Kyverno flags as its chart passes them)
CONTROLLERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    ADMISSION: (
        "kyverno-admission-controller",
        "kyverno",
        (
            "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
            "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
            "--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller",
            "--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller",
            "--servicePort=443",
            "--webhookServerPort=9443",
            "--resyncPeriod=15m",
            "--disableMetrics=false",
            "--otelConfig=prometheus",
            "--metricsPort=8000",
            "--admissionReports=true",
            "--autoUpdateWebhooks=true",
            "--enableConfigMapCaching=true",
            "--enableDeferredLoading=true",
            "--dumpPayload=false",
            "--forceFailurePolicyIgnore=false",
            "--generateValidatingAdmissionPolicy=true",
            "--generateMutatingAdmissionPolicy=false",
            "--maxAPICallResponseLength=2000000",
            "--loggingFormat=text",
            "--v=2",
            "--enablePolicyException=true",
            "--protectManagedResources=false",
            "--allowInsecureRegistry=false",
            "--registryCredentialHelpers=default,google,amazon,azure,github",
            "--enableReporting=validate,mutate,mutateExisting,imageVerify,generate",
        ),
    ),
    "background-controller": (
        "kyverno-background-controller",
        "controller",
        ("--disableMetrics=false", "--otelConfig=prometheus", "--metricsPort=8000", "--enableConfigMapCaching=true", "--enableDeferredLoading=true", "--maxAPICallResponseLength=2000000", "--loggingFormat=text", "--v=2", "--enablePolicyException=true", "--enableReporting=validate,mutate,mutateExisting,imageVerify,generate"),
    ),
    "cleanup-controller": (
        "kyverno-cleanup-controller",
        "controller",
        ("--caSecretName=kyverno-cleanup-controller.kyverno.svc.kyverno-tls-ca", "--tlsSecretName=kyverno-cleanup-controller.kyverno.svc.kyverno-tls-pair", "--servicePort=443", "--cleanupServerPort=9443", "--webhookServerPort=9443", "--resyncPeriod=15m", "--disableMetrics=false", "--otelConfig=prometheus", "--metricsPort=8000", "--enableDeferredLoading=true", "--loggingFormat=text", "--v=2"),
    ),
    "reports-controller": (
        "kyverno-reports-controller",
        "controller",
        ("--disableMetrics=false", "--otelConfig=prometheus", "--metricsPort=8000", "--admissionReports=true", "--aggregateReports=true", "--policyReports=true", "--validatingAdmissionPolicyReports=true", "--backgroundScan=true", "--backgroundScanWorkers=2", "--backgroundScanInterval=1h", "--skipResourceFilters=true", "--enableConfigMapCaching=true", "--enableDeferredLoading=true", "--maxAPICallResponseLength=2000000", "--loggingFormat=text", "--v=2", "--enablePolicyException=true", "--allowInsecureRegistry=false", "--registryCredentialHelpers=default,google,amazon,azure,github", "--enableReporting=validate,mutate,mutateExisting,imageVerify,generate"),
    ),
}
IMAGES = {ADMISSION: "ghcr.io/kyverno/kyverno:v1.19.1", "background-controller": "ghcr.io/kyverno/background-controller:v1.19.1",
          "cleanup-controller": "ghcr.io/kyverno/cleanup-controller:v1.19.1", "reports-controller": "ghcr.io/kyverno/reports-controller:v1.19.1"}

# Without cluster DNS on this host a Service name resolves only in the host pod runner's proxy, and under Kyverno's
# rule a proxied destination that cannot be resolved here is refused whenever ranges are blocked: so where Kyverno
# would use its default list, the harness blocks only that list's host name (Kyverno's ranges spare Service
# addresses, which is what the suite relies on).
HARNESS_DEFAULT_BLOCKLIST = "--http-blocklist=metadata.google.internal"


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": component, "app.kubernetes.io/instance": "kyverno", "app.kubernetes.io/part-of": "kyverno"}


def controller_deployments() -> list[dict[str, Any]]:
    """The stand-in Deployments (one replica each, Pods gated until the bridge lets them go)."""
    deployments = []
    for component, (name, container, args) in CONTROLLERS.items():
        labels = _labels(component)
        deployments.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": {**labels, "app.kubernetes.io/name": name}},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": {**labels, "app.kubernetes.io/name": name}},
                        "spec": {
                            "schedulingGates": [{"name": GATE}],
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": container, "image": IMAGES[component], "args": list(args)}],
                        },
                    },
                },
            }
        )
    return deployments


# -- Kyverno flags -> serve flags -----------------------------------------------------------------------------------


def _truth(value: str | None) -> bool:
    """Go's strconv.ParseBool for a flag: a bare boolean flag is true."""
    return value is None or value.strip().lower() in ("1", "t", "true")


# Kyverno flag -> serve arguments for its value (None: a bare flag)
_TRANSLATED: dict[str, Callable[[str | None], list[str]]] = {
    "allowHTTPInNamespacedPolicies": lambda v: ["--allow-http-in-namespaced-policies"] if _truth(v) else [],
    "httpBlocklist": lambda v: [f"--http-blocklist={v or ''}"],
    "forceFailurePolicyIgnore": lambda v: ["--force-failure-policy-ignore"] if _truth(v) else [],
    "enablePolicyException": lambda v: [] if _truth(v) else ["--no-policy-exceptions"],
    "tlsKeyAlgorithm": lambda v: [f"--tls-key-algorithm={v or ''}"],
}
# flags the harness already sets the serve counterpart of, or that change nothing observable here
_HARNESS_OWNED = frozenset(
    {
        "caSecretName", "tlsSecretName", "backgroundServiceAccountName", "reportsServiceAccountName", "servicePort",
        "webhookServerPort", "cleanupServerPort", "resyncPeriod", "disableMetrics", "otelConfig", "metricsPort",
        "admissionReports", "aggregateReports", "policyReports", "validatingAdmissionPolicyReports", "backgroundScan",
        "backgroundScanWorkers", "backgroundScanInterval", "skipResourceFilters", "autoUpdateWebhooks",
        "enableConfigMapCaching", "enableDeferredLoading", "dumpPayload", "generateValidatingAdmissionPolicy",
        "generateMutatingAdmissionPolicy", "maxAPICallResponseLength", "loggingFormat", "v", "protectManagedResources",
        "allowInsecureRegistry", "registryCredentialHelpers", "enableReporting",
    }
)
_BOOLEAN = frozenset({"allowHTTPInNamespacedPolicies", "forceFailurePolicyIgnore", "enablePolicyException"})


def parse_go_flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """(name, value) pairs of Go flag arguments: ``--name=value``, ``-name=value``, a bare boolean ``--name``, and
    ``--name value`` for the others (value None for a bare boolean)."""
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        arg = str(args[index])
        index += 1
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.lstrip("-").partition("=")
        if equals:
            pairs.append((name, value))
        elif name in _BOOLEAN or index >= len(args) or str(args[index]).startswith("-"):
            pairs.append((name, None))
        else:
            pairs.append((name, str(args[index])))
            index += 1
    return pairs


def translate(args: Sequence[str], warn: Callable[[str], None] = log.warning) -> tuple[str, ...]:
    """The serve arguments for the admission controller's Kyverno ``args``: a later flag wins over an earlier one of
    the same name, as Go's flag package has it; unknown flags are reported through ``warn`` and ignored."""
    chosen: dict[str, list[str]] = {}
    for name, value in parse_go_flags(args):
        if name in _TRANSLATED:
            chosen[name] = _TRANSLATED[name](value)
        elif name not in _HARNESS_OWNED:
            warn(f"Kyverno flag --{name} has no stockade serve counterpart here: ignored")
    if "httpBlocklist" not in chosen:
        chosen["httpBlocklist"] = [HARNESS_DEFAULT_BLOCKLIST]
    return tuple(arg for name in sorted(chosen) for arg in chosen[name])


def baseline_serve_args() -> tuple[str, ...]:
    return translate(CONTROLLERS[ADMISSION][2], warn=lambda _message: None)


# -- the bridge -----------------------------------------------------------------------------------------------------


class Bridge:
    """Polls the gated Pods of the stand-in Deployments; ``restart(serve_args)`` restarts ``stockade serve``."""

    def __init__(self, kubectl: Callable[..., str], restart: Callable[[tuple[str, ...]], None], current_args: Callable[[], tuple[str, ...]]) -> None:
        self.kubectl = kubectl
        self.restart = restart
        self.current_args = current_args  # the bridged args the running serve was started with
        self.served: dict[str, str] = {}  # component -> pod-template-hash serve last (re)started for

    def _admission_args(self) -> list[str]:
        deployment = json.loads(self.kubectl("get", "deployment", CONTROLLERS[ADMISSION][0], "-n", NAMESPACE, "-o", "json"))
        containers = deployment["spec"]["template"]["spec"].get("containers") or [{}]
        return [str(a) for a in containers[0].get("args") or []]

    def step(self) -> None:
        pods = json.loads(self.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/part-of=kyverno", "-o", "json")).get("items") or []
        gated = [p for p in pods if any(g.get("name") == GATE for g in (p["spec"].get("schedulingGates") or [])) and not p["metadata"].get("deletionTimestamp")]
        if not gated:
            return
        restart_needed = False
        served = dict(self.served)
        for pod in gated:
            labels = pod["metadata"].get("labels") or {}
            component, template = labels.get("app.kubernetes.io/component", ""), labels.get("pod-template-hash", "")
            known = served.get(component)
            if known is not None and known != template:
                restart_needed = True
            served[component] = template
        wanted = translate(self._admission_args())
        if restart_needed or wanted != self.current_args():
            log.info("restarting stockade serve with %s", " ".join(wanted))
            self.restart(wanted)  # raises when serve does not come back: the Pods stay gated, the next step retries
        self.served = served
        for pod in gated:
            name = pod["metadata"]["name"]
            gates = [g for g in pod["spec"].get("schedulingGates") or [] if g.get("name") != GATE]
            patch = json.dumps({"spec": {"schedulingGates": gates}})
            try:
                self.kubectl("patch", "pod", name, "-n", NAMESPACE, "--type=merge", "-p", patch)
            except subprocess.CalledProcessError as exc:  # the Pod went away meanwhile
                log.info("could not ungate %s: %s", name, exc.stderr)


def main(argv: list[str] | None = None) -> int:
    from stockade.testing.apiserver import find_binary
    from stockade.testing.e2ecluster import E2ECluster

    parser = argparse.ArgumentParser(prog="controllerbridge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cluster = E2ECluster(state_dir=args.state_dir.resolve())
    binary = find_binary("kubectl", "STOCKADE_KUBECTL")

    def kubectl(*words: str) -> str:
        return subprocess.run([binary, f"--kubeconfig={cluster.kubeconfig}", *words], capture_output=True, text=True, timeout=60, check=True).stdout

    bridge = Bridge(kubectl, lambda serve_args: cluster.restart_stockade(bridged=serve_args), cluster.bridged_args)
    while True:
        try:
            bridge.step()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            log.warning("bridge step failed: %s", getattr(exc, "stderr", None) or exc)
        except Exception:  # keep bridging; the next step retries
            log.exception("bridge step failed")
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
