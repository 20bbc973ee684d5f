"""Image reflection throughput for one repository with many tags: listing + selection, next to Flux's library.

Usage: .venv/bin/python bench/bench_reflector.py [--tags 10000] [--repeats 5] [--go]

- scan: an ImageRepository reconcile against a local registry-API server on 127.0.0.1 that pages the tag list
  the way docker-registry does (`n`, `last`, `Link: rel="next"`), including the exclusion filter and the store;
- select: ImagePolicy reconciles over the stored tags (semver range; semver with a filterTags regexp + extract;
  alphabetical; numerical), timed best-of-N;
- selection only: the same two semver cases timed on `select_latest` over the stored list (no store read, no status
  bookkeeping), which is the work the Go side times;
- with --go: the same semver selection (plain, and after the same filterTags pattern + extract done the way the
  controller's RegexFilter does it) by fluxcd/pkg/version + Masterminds/semver (what image-reflector-controller
  runs), built from the Go module proxy in bench/flux_policy_go with `nice -n 10`; also a cheaper Go filter that only
  asks MatchString. Both sides must elect the same tags, or the bench fails; `ours_vs_flux` divides Go's time by ours.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from stockade.reflector.imagepolicy import ImagePolicyReconciler  # noqa: E402
from stockade.reflector.models import ObjectKey  # noqa: E402
from stockade.reflector.policy import select_latest  # noqa: E402
from stockade.reflector.repository import ImageRepositoryReconciler  # noqa: E402
from stockade.reflector.store import TagStore  # noqa: E402

RANGE = ">=1.0.0 <40.0.0"
SEMVER_FILTER = {"pattern": r"^v?(?P<v>[0-9]+\.[0-9]+\.[0-9]+)$", "extract": "$v"}
FILTER = r"^main-(?P<ts>[0-9]+)-[a-f0-9]+$"


def generate_tags(count: int, seed: int = 7) -> list[str]:
    """A realistic mix: semver (some prereleases), CalVer, build tags, numbers, and signature tags."""
    rng = random.Random(seed)
    tags: set[str] = set()
    while len(tags) < count:
        kind = rng.random()
        if kind < 0.45:
            tag = f"{rng.randrange(60)}.{rng.randrange(30)}.{rng.randrange(30)}"
            if rng.random() < 0.2:
                tag += f"-rc.{rng.randrange(9)}"
            if rng.random() < 0.5:
                tag = "v" + tag
        elif kind < 0.6:
            tag = f"{rng.randrange(2019, 2027)}.{rng.randrange(1, 13):02d}.{rng.randrange(1, 29):02d}"
        elif kind < 0.85:
            tag = f"main-{1700000000 + rng.randrange(10**7)}-{rng.getrandbits(28):07x}"
        elif kind < 0.95:
            tag = str(rng.randrange(10**6))
        else:
            tag = f"sha256-{rng.getrandbits(64):016x}.sig"
        tags.add(tag)
    return sorted(tags)


def serve_tags(repository: str, tags: list[str]) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            headers: dict[str, str] = {}
            if url.path == "/v2/":
                body = b"{}"
            elif url.path == f"/v2/{repository}/tags/list":
                query = parse_qs(url.query)
                size = int(query.get("n", ["100"])[0])
                start = 0
                if "last" in query:
                    start = tags.index(query["last"][0]) + 1
                page = tags[start : start + size]
                if start + size < len(tags):
                    headers["Link"] = f'</v2/{repository}/tags/list?last={page[-1]}&n={size}>; rel="next"'
                body = json.dumps({"name": repository, "tags": page}).encode()
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def best_of(repeats: int, action: Callable[[], Any]) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = action()
        best = min(best, time.perf_counter() - start)
    return best, value


def policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
            "metadata": {"name": "bench", "namespace": "bench"},
            "spec": {"imageRepositoryRef": {"name": "app"}, **spec}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tags", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--go", action="store_true", help="also time Flux's Go library (built with nice -n 10)")
    args = parser.parse_args()

    tags = generate_tags(args.tags)
    server, host = serve_tags("bench/app", tags)
    repository = {"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
                  "metadata": {"name": "app", "namespace": "bench"},
                  "spec": {"image": f"{host}/bench/app", "interval": "5m", "insecure": True}}
    results: dict[str, Any] = {"tags": len(tags)}
    with tempfile.TemporaryDirectory() as state:
        store = TagStore(state)
        scanner = ImageRepositoryReconciler(store)
        scan_seconds, scanned = best_of(args.repeats, lambda: scanner.reconcile(repository, force=True))
        assert scanned.ready, scanned.error
        stored = scanned.status["lastScanResult"]["tagCount"]
        results["scan"] = {"seconds": round(scan_seconds, 4), "tags_per_second": round(len(tags) / scan_seconds),
                           "stored_after_exclusions": stored}
        repo_obj = scanned.object
        policies = ImagePolicyReconciler(store, lambda key: repo_obj)
        cases = {
            "semver": {"policy": {"semver": {"range": RANGE}}},
            "semver+filterTags": {"policy": {"semver": {"range": RANGE}}, "filterTags": SEMVER_FILTER},
            "numerical+filterTags": {"policy": {"numerical": {"order": "asc"}}, "filterTags": {"pattern": FILTER, "extract": "$ts"}},
            "alphabetical": {"policy": {"alphabetical": {"order": "asc"}}},
        }
        results["select"] = {}
        for name, spec in cases.items():
            seconds, result = best_of(args.repeats, lambda spec=spec: policies.reconcile(policy(spec)))
            assert result.ready, (name, result.error)
            results["select"][name] = {"seconds": round(seconds, 4), "tags_per_second": round(stored / seconds),
                                       "winner": result.status["latestRef"]["tag"]}
        kept = store.tags(ObjectKey("bench", "app")) or []
    server.shutdown()
    results["selection_only"] = {}
    for name in ("semver", "semver+filterTags"):
        spec = cases[name]
        seconds, winner = best_of(args.repeats, lambda spec=spec: select_latest(kept, spec["policy"], spec.get("filterTags")))
        assert winner == results["select"][name]["winner"], (name, winner)
        results["selection_only"][name] = {"seconds": round(seconds, 5), "tags_per_second": round(stored / seconds),
                                           "winner": winner}

    if args.go:
        go_dir = os.path.join(HERE, "flux_policy_go")
        binary = os.path.join(tempfile.gettempdir(), "stockade-flux-policy-bench")
        build = subprocess.run(["nice", "-n", "10", "go", "build", "-o", binary, "."], cwd=go_dir,
                               capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
        if build.returncode != 0:
            results["flux_go"] = {"error": f"did not build: {build.stderr.strip()[-500:]}"}
        else:
            run = subprocess.run([binary, RANGE, SEMVER_FILTER["pattern"], SEMVER_FILTER["extract"], str(args.repeats)],
                                 input="\n".join(kept) + "\n", capture_output=True, text=True, check=True)
            flux = json.loads(run.stdout)
            assert flux["semver_winner"] == results["select"]["semver"]["winner"], flux
            assert flux["filter_tags_winner"] == results["select"]["semver+filterTags"]["winner"], flux
            results["flux_go"] = {
                "semver": {"seconds": round(flux["semver_seconds"], 5), "tags_per_second": round(stored / flux["semver_seconds"]),
                           "winner": flux["semver_winner"]},
                "semver+filterTags": {"seconds": round(flux["filter_tags_seconds"], 5),
                                      "tags_per_second": round(stored / flux["filter_tags_seconds"]),
                                      "winner": flux["filter_tags_winner"]},
                "semver+MatchString filter": {"seconds": round(flux["filtered_seconds"], 5),
                                              "tags_per_second": round(stored / flux["filtered_seconds"]),
                                              "winner": flux["filtered_winner"]},
            }
            results["ours_vs_flux"] = {
                f"{name} ({where})": round(flux[key] / results[where][name]["seconds"], 2)
                for name, key in (("semver", "semver_seconds"), ("semver+filterTags", "filter_tags_seconds"))
                for where in ("select", "selection_only")
            }
    results["when"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
