"""cel-expr-python's native libraries keep about 30 MiB resident per process, cryptography's about 8 MiB, and
`stockade serve` runs several processes (the server, the forkserver, each evaluation worker).  A policy set
without CEL must never load the first, an evaluation without signatures or certificates never the second; the
first CEL expression must load the backend.  Each check runs in a fresh interpreter: this one has long loaded both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PATTERN_POLICIES = ROOT / "bench" / "policies" / "pss-restricted.yaml"

_SCRIPT = """
import json, sys
from stockade.webhook.policystore import PolicyStore
from stockade.webhook.isolation import _evaluate_in_worker
import stockade.celpolicy  # what serve's forkserver imports for its workers
if sys.argv[2] == "cli":
    import stockade.cli.main, stockade.cli.serve_cmd
from stockade.cel.environment import backend_loaded
options = {}
if sys.argv[2] == "serve-options":  # what a worker of `stockade serve` builds (no cluster), image verifier included
    from stockade.cli.serve_cmd import EvaluationSettings, evaluation_store_options
    options = evaluation_store_options(EvaluationSettings(None, False, (), None, 10.0, ()))
snapshot = PolicyStore([sys.argv[1]], log_rejections=False, **options).load()
assert not snapshot.errors, snapshot.errors
review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
    "namespace": "default", "name": "p", "userInfo": {"username": "someone"},
    "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": True}}]}}}}
answer, allowed, _, _, error = _evaluate_in_worker(snapshot.evaluator, json.dumps(review).encode(), "validate", "Fail", 0.0)
print(json.dumps({"allowed": allowed, "error": error, "module": "cel_expr_python.cel" in sys.modules, "backend": backend_loaded(), "cryptography": "cryptography" in sys.modules}))
"""


def _run(policy: Path, imports: str = "worker") -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(policy), imports], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def test_a_worker_evaluates_a_pattern_policy_set_without_either_native_library() -> None:
    result = _run(PATTERN_POLICIES)
    assert result["error"] == ""
    assert result["allowed"] is False  # the privileged container is denied: the policies did run
    assert result["module"] is False and result["backend"] is False
    assert result["cryptography"] is False


def test_a_serve_worker_builds_its_image_verifier_without_loading_cryptography() -> None:
    result = _run(PATTERN_POLICIES, "serve-options")
    assert result["allowed"] is False and result["error"] == ""
    assert result["cryptography"] is False and result["module"] is False


def test_the_cli_and_server_modules_do_not_load_the_cel_backend() -> None:
    result = _run(PATTERN_POLICIES, "cli")
    assert result["allowed"] is False
    assert result["module"] is False and result["backend"] is False


def test_the_first_cel_policy_loads_the_backend(tmp_path: Path) -> None:
    policy = {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "no-privileged-cel"},
        "spec": {
            "validationFailureAction": "Enforce",
            "rules": [
                {
                    "name": "privileged",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": {
                        "cel": {
                            "expressions": [
                                {
                                    "expression": "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
                                    "message": "privileged containers are not allowed",
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps(policy))
    result = _run(path)
    assert result["error"] == ""
    assert result["allowed"] is False
    assert result["module"] is True and result["backend"] is True
