"""The bench's ValidatingPolicy must judge Pods exactly like the pattern-rule set it is compared with."""

from __future__ import annotations

import copy
import os
import sys
from typing import Any, Callable

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from bench_cel import CelSet, PatternSet  # noqa: E402
from bench_engine import generate_pods  # noqa: E402

from stockade.celpolicy import AdmissionInput  # noqa: E402


def _compliant_pod() -> dict[str, Any]:
    secure = {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sample", "namespace": "bench"},
        "spec": {
            "containers": [{"name": "app", "image": "nginx", "securityContext": secure}],
            "initContainers": [{"name": "init", "image": "busybox", "securityContext": copy.deepcopy(secure)}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    pod = _compliant_pod()
    change(pod)
    return pod


def _sc(pod: dict[str, Any], index: int = 0, list_name: str = "containers") -> dict[str, Any]:
    return pod["spec"][list_name][index]["securityContext"]


# (description, pod, whether it complies) - one or more cases per control, incl. "allowed" edge values.
CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("compliant", _compliant_pod(), True),
    ("hostIPC", _with(lambda p: p["spec"].update(hostIPC=True)), False),
    ("hostPID false", _with(lambda p: p["spec"].update(hostPID=False)), True),
    ("privileged init", _with(lambda p: _sc(p, 0, "initContainers").update(privileged=True)), False),
    ("privileged false", _with(lambda p: _sc(p).update(privileged=False)), True),
    ("hostPath", _with(lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})), False),
    ("hostPort", _with(lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])), False),
    ("hostPort 0", _with(lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 0}])), True),
    ("procMount", _with(lambda p: _sc(p).update(procMount="Unmasked")), False),
    ("procMount default", _with(lambda p: _sc(p).update(procMount="Default")), True),
    ("selinux type", _with(lambda p: _sc(p).update(seLinuxOptions={"type": "spc_t"})), False),
    ("selinux allowed", _with(lambda p: _sc(p).update(seLinuxOptions={"type": "container_t", "level": "s0"})), True),
    ("selinux user", _with(lambda p: p["spec"].update(securityContext={"runAsNonRoot": True, "seLinuxOptions": {"user": "root"}})), False),
    ("sysctl", _with(lambda p: p["spec"].update(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]})), False),
    ("sysctl allowed", _with(lambda p: p["spec"].update(securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]})), True),
    ("cap add baseline", _with(lambda p: _sc(p)["capabilities"].update(add=["NET_RAW"])), False),
    ("cap add allowed", _with(lambda p: _sc(p)["capabilities"].update(add=["NET_BIND_SERVICE"])), True),
    ("cap add default-set", _with(lambda p: _sc(p)["capabilities"].update(add=["CHOWN"])), False),
    ("no drop ALL", _with(lambda p: _sc(p, 0, "initContainers").update(capabilities={"drop": ["NET_RAW"]})), False),
    ("volume type", _with(lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})), False),
    ("volume projected", _with(lambda p: p["spec"]["volumes"].append({"name": "p", "projected": {"sources": []}})), True),
    ("escalation unset", _with(lambda p: _sc(p).pop("allowPrivilegeEscalation")), False),
    ("root unset", _with(lambda p: _sc(p).pop("runAsNonRoot")), False),
    ("root at pod level", _with(lambda p: (_sc(p).pop("runAsNonRoot"), p["spec"].update(securityContext={"runAsNonRoot": True}))), True),
    ("root overridden", _with(lambda p: (_sc(p).update(runAsNonRoot=False), p["spec"].update(securityContext={"runAsNonRoot": True}))), False),
    ("runAsUser 0", _with(lambda p: _sc(p).update(runAsUser=0)), False),
    ("runAsUser 1000", _with(lambda p: _sc(p).update(runAsUser=1000)), True),
    ("seccomp unconfined", _with(lambda p: _sc(p).update(seccompProfile={"type": "Unconfined"})), False),
    ("seccomp localhost", _with(lambda p: p["spec"].update(securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "Localhost"}})), True),
    ("ephemeral privileged", _with(lambda p: p["spec"].update(ephemeralContainers=[{"name": "e", "securityContext": {"privileged": True}}])), False),
]


@pytest.fixture(scope="module")
def sets() -> tuple[PatternSet, CelSet]:
    return PatternSet(), CelSet()


@pytest.mark.parametrize("description,pod,complies", CASES, ids=[case[0] for case in CASES])
def test_both_sets_judge_each_control_alike(sets: tuple[PatternSet, CelSet], description: str, pod: dict[str, Any], complies: bool) -> None:
    patterns, cel_set = sets
    assert patterns.complies(pod) is complies, f"pattern set on {description}"
    assert cel_set.complies(pod) is complies, f"ValidatingPolicy on {description}"


def test_both_sets_agree_on_generated_sample(sets: tuple[PatternSet, CelSet]) -> None:
    pods = generate_pods(60)
    patterns, cel_set = sets
    verdicts = [(patterns.complies(pod), cel_set.complies(pod)) for pod in pods]
    assert all(pattern == cel for pattern, cel in verdicts)
    assert {pattern for pattern, _ in verdicts} == {True, False}


def test_failing_pod_reports_the_control_message(sets: tuple[PatternSet, CelSet]) -> None:
    _, cel_set = sets
    pod = _with(lambda p: p["spec"].update(hostNetwork=True))
    response = cel_set.evaluator.validate(cel_set.policies[0], AdmissionInput(object=pod))
    assert response is not None
    assert [(rule.status, rule.message) for rule in response.rules] == [("fail", "Sharing the host namespaces is disallowed.")]
