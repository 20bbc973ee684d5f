"""Case 5: a ~600-byte YAML alias bomb as a policy file: nine levels of nine aliases expand to 9**9 (387 million)
strings for anything that walks the document as a tree."""

from __future__ import annotations

import time
from pathlib import Path

from hostile_server import Findings, Probe, ServeProcess, cluster_policy, pod, review

ALIAS_BOMB = """apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: alias-bomb
spec:
  validationFailureAction: Enforce
  rules:
  - name: bomb
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: boom
      deny:
        conditions:
          any:
          - key: x
            operator: AnyIn
            value: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""
LEVELS = """a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""
BOMB = "x-levels:\n" + "".join("  " + line + "\n" for line in LEVELS.splitlines()) + ALIAS_BOMB

REQUIRE_TEAM = cluster_policy("require-team", """
validate:
  message: "label team is required"
  pattern:
    metadata:
      labels:
        team: "?*"
""")


def test_alias_bomb_at_start_up_is_a_clear_error_exit(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, {"bomb.yaml": BOMB}, wait=False)
    try:
        started = time.monotonic()
        deadline = started + 10
        while time.monotonic() < deadline and server.process.poll() is None:
            time.sleep(0.1)
            if (server.cert_dir / "ca.crt").exists():
                try:
                    server.ca_pem = (server.cert_dir / "ca.crt").read_bytes()
                    if server.get("/health/readiness", timeout=1)[0] == 200:
                        break  # it is serving the bomb: wrong
                except OSError:
                    pass
        code = server.process.poll()
        log = server.log()
        assert code is not None and code != 0, f"still running (exit {code}) {time.monotonic() - started:.1f}s after start with an alias bomb:\n{log[-2000:]}"
        assert "bomb.yaml" in log and "Traceback" not in log, log[-2000:]
    finally:
        server.kill()


def test_alias_bomb_replacing_a_served_file_keeps_the_previous_policies(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, {"policies.yaml": REQUIRE_TEAM})
    try:
        findings = Findings()
        with Probe(server, findings):
            (server.policy_dir / "policies.yaml").write_text(BOMB)
            deadline = time.monotonic() + 10
            readiness = 200
            while time.monotonic() < deadline and readiness == 200:
                time.sleep(0.25)
                try:
                    readiness = server.get("/health/readiness", timeout=1)[0]
                except OSError:
                    pass
            findings.check(readiness == 503, f"/health/readiness still {readiness} 10s after the policy file became an alias bomb")
            try:
                status, body = server.post_review("/validate", review(pod("no-team")), timeout=1)
                findings.check(status == 200 and b'"allowed":false' in body.replace(b" ", b""), f"the previous policy no longer denies: {status} {body[:300]!r}")
            except OSError as exc:
                findings.add(f"a review after the reload: {exc!r}")
        server.sigterm_during(findings)
        findings.assert_none(server.log())
    finally:
        server.kill()
