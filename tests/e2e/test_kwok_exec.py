"""`kubectl exec` into a Pod on a KWOK node: the API server streams it to the kubelet API KWOK serves for its fake
nodes, and KWOK runs the command on this host in the cluster's scratch directory (Kyverno's suite execs into Pods to
send `pods/exec` CONNECT admission requests)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from stockade.testing.apiserver import find_binary
from stockade.testing.e2ecluster import E2ECluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    cluster = E2ECluster(state_dir=tmp_path_factory.mktemp("kwok-exec") / "cluster")
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def _kubectl(cluster: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_binary("kubectl", "STOCKADE_KUBECTL"), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def pod(cluster: E2ECluster) -> str:
    created = _kubectl(cluster, "run", "web", "--image=nginx", "-n", "default")
    assert created.returncode == 0, created.stderr
    ready = _kubectl(cluster, "wait", "--for=condition=Ready", "pod/web", "-n", "default", "--timeout=90s")
    assert ready.returncode == 0, ready.stderr
    node = _kubectl(cluster, "get", "pod", "web", "-n", "default", "-o", "jsonpath={.spec.nodeName}")
    assert node.stdout in {"kind-control-plane", "kind-worker"}, node
    return "web"


def test_exec_runs_the_command_and_returns_its_output(cluster: E2ECluster, pod: str) -> None:
    result = _kubectl(cluster, "exec", "-n", "default", pod, "--", "sh", "-c", "echo out-$((6 * 7)); echo err-text >&2; pwd")
    assert result.returncode == 0, result.stderr
    scratch = cluster.state_dir / "kwok-exec"
    assert result.stdout.splitlines() == ["out-42", str(scratch)]
    assert "err-text" in result.stderr


def test_exec_with_a_tty_as_the_suite_asks(cluster: E2ECluster, pod: str) -> None:
    # the suite's `kubectl exec -n NS nginx -it -- ls`; without a terminal kubectl falls back to plain streams
    marker = cluster.state_dir / "kwok-exec" / "listed-by-exec"
    marker.write_text("")
    result = _kubectl(cluster, "exec", "-n", "default", pod, "-it", "--", "ls")
    assert result.returncode == 0, result.stderr
    assert "listed-by-exec" in result.stdout.split()


def test_exec_of_a_failing_command_fails(cluster: E2ECluster, pod: str) -> None:
    result = _kubectl(cluster, "exec", "-n", "default", pod, "--", "sh", "-c", "exit 3")
    assert result.returncode != 0
    assert "exit status 3" in result.stderr

