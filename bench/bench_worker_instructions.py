"""Instructions an evaluation worker of `stockade serve` executes per admission review, counted by callgrind.

Usage: .venv/bin/python bench/bench_worker_instructions.py [--sets pss,mix17,vpol] [--requests 1500] [--warmup 300]
       [--top 12] [--keep DIR] [--profile K]
Needs valgrind.  bench/bench_engine.py --reviews times the same work in CPU microseconds, which move with whatever
else runs on a shared machine; an instruction count does not.  For each policy set this process loads the policies
as the server does (a PolicyStore over the files), starts one worker process exactly as the server's pool runs it
(``logging_worker_main`` with the ``serve`` setup for policy files and no cluster, at log level warning, over a
socketpair) under ``valgrind --tool=callgrind``, sends it the policy frame the pool sends a new worker, then Pod
CREATE review frames (the bodies bench_admission.py posts, for the set's endpoint: ``/validate/fail``, the vpol set
``/vpol/vpol-restricted``) one at a time, each answered before the next is sent.  After ``--warmup`` reviews the
counters are zeroed (``callgrind_control -z``), ``--requests`` reviews follow and the counters are dumped: what the
worker did per review from reading the frame to writing the answer (decode, match, evaluate, encode, summarize).
Prints the instructions per review and their split over the libraries that ran them (the interpreter's share is
Python code).  The worker's memory cap (RLIMIT_DATA) is not set: valgrind's own allocations would count against it.

``--profile K`` runs the same loop once more without valgrind, with cProfile enabled in the worker's evaluation thread
from the first measured review on, and prints its K most expensive functions (cumulative and own time): where the
instructions go, at Python level.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pickle
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_engine import generate_pods, review_for  # noqa: E402
from bench_server_instructions import self_cost_by_object, total_instructions  # noqa: E402

SETS = {
    "pss": (HERE / "policies" / "pss-restricted.yaml", "/validate/fail"),
    "mix17": (HERE / "policies" / "mix17", "/validate/fail"),
    "vpol": (HERE / "policies" / "vpol-restricted.yaml", "/vpol/vpol-restricted"),
}


def worker_setup() -> Any:
    """What ``stockade serve POLICY_FILES`` gives each worker (no cluster, default settings)."""
    from stockade.cli.serve_cmd import EvaluationSettings, evaluation_store_options

    settings = EvaluationSettings(kubeconfig=None, cluster=False, insecure_registries=(), registry_ca_file=None, webhook_timeout=10.0, exception_namespaces=())
    return partial(evaluation_store_options, settings)


def run_child(fd: int, profile_after: int, profile_out: str) -> None:
    """The worker process: the pool's entry point on the inherited socket (``--profile``: cProfile in the evaluation
    thread, enabled when review number ``profile_after`` + 1 arrives, written to ``profile_out`` when the parent
    closes the socket)."""
    from multiprocessing.connection import Connection

    from stockade.webhook import isolation

    if profile_out:
        profiler = cProfile.Profile()
        decode_scope = isolation.decode_scope
        seen = [0]

        def counting_decode_scope(data: bytes) -> Any:
            seen[0] += 1
            if seen[0] == profile_after + 1:
                profiler.enable()  # decode_scope runs first thing for each review, in the evaluation thread
            return decode_scope(data)

        isolation.decode_scope = counting_decode_scope  # type: ignore[assignment]
        serve = isolation._serve_worker

        def serve_then_dump(channel: socket.socket, setup: Any, done: threading.Event) -> None:
            try:
                serve(channel, setup, threading.Event())
            finally:
                profiler.disable()
                profiler.dump_stats(profile_out)
                done.set()  # the process exits when this is set: only after the dump

        isolation._serve_worker = serve_then_dump  # type: ignore[assignment]
    isolation.logging_worker_main(logging.WARNING, False, Connection(fd), worker_setup(), None)


def policy_frame(policy_path: Path) -> tuple[bytes, int]:
    """The frame the pool sends a starting worker for the set, and its generation."""
    from stockade.webhook.isolation import MESSAGE_POLICIES, PolicyUpdate, frame
    from stockade.webhook.policystore import PolicyStore

    snapshot = PolicyStore([str(policy_path)], log_rejections=False).load()
    if snapshot.errors:
        raise SystemExit(f"{policy_path}: {snapshot.errors}")
    generation = max(1, snapshot.generation)
    update = PolicyUpdate(generation, snapshot.document_keys, dict(zip(snapshot.document_keys, snapshot.documents)), {})
    return frame(MESSAGE_POLICIES, pickle.dumps(update, protocol=pickle.HIGHEST_PROTOCOL)), generation


class Driver:
    """The parent's end of the worker's socket: one review frame out, its result frame back."""

    def __init__(self, channel: socket.socket, route_path: str, generation: int) -> None:
        from stockade.webhook.admission import parse_route

        route = parse_route(route_path)
        if route is None:
            raise SystemExit(f"no route {route_path}")
        self.channel, self.route, self.generation = channel, route, generation
        self.incoming = channel.makefile("rb")
        self.ids = 0

    def read_frame(self) -> tuple[int, bytes]:
        from stockade.webhook.isolation import _FRAME

        header = self.incoming.read(_FRAME.size)
        if len(header) < _FRAME.size:
            raise SystemExit("the worker closed its socket")
        size, kind = _FRAME.unpack(header)
        return kind, self.incoming.read(size)

    def review(self, body: bytes) -> bool:
        """Allowed or not; exits on a worker error (the figures would not be of a real evaluation)."""
        from stockade.webhook.isolation import MESSAGE_RESULT, parse_result, review_frame

        self.ids += 1
        self.channel.sendall(review_frame(self.ids, self.route.phase, self.route.failure, time.monotonic(), body, self.generation, self.route.scope))
        kind, payload = self.read_frame()
        request_id, answer = parse_result(payload)
        if kind != MESSAGE_RESULT or request_id != self.ids or answer.error:
            raise SystemExit(f"worker answered {kind} for {request_id}: {answer.error}")
        return answer.allowed


def run_worker(policy_path: Path, route_path: str, bodies: list[bytes], warmup: int, command_prefix: list[str], profile_out: str = "") -> tuple[subprocess.Popen[bytes], Driver, int]:
    """Start a worker (under ``command_prefix``), give it the policies, run the warm-up reviews."""
    from stockade.webhook.isolation import MESSAGE_READY

    payload, generation = policy_frame(policy_path)
    parent_end, child_end = socket.socketpair()
    command = [*command_prefix, sys.executable, str(Path(__file__).resolve()), "--child", str(child_end.fileno()),
               "--profile-after", str(warmup), "--profile-out", profile_out]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(command, pass_fds=[child_end.fileno()], stdout=subprocess.DEVNULL, env=env)
    child_end.close()
    driver = Driver(parent_end, route_path, generation)
    parent_end.sendall(payload)
    kind, _ = driver.read_frame()
    if kind != MESSAGE_READY:
        raise SystemExit(f"worker answered {kind} to the policy frame")
    denied = sum(1 for body in bodies[:warmup] if not driver.review(body))
    return process, driver, denied


def finish(process: subprocess.Popen[bytes], driver: Driver) -> None:
    """End of input for the worker (it returns, as when the server goes), then wait for it to exit."""
    driver.channel.shutdown(socket.SHUT_WR)
    driver.incoming.close()
    driver.channel.close()
    try:
        process.wait(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measure(name: str, bodies: list[bytes], args: argparse.Namespace) -> None:
    policy_path, route_path = SETS[name]
    with tempfile.TemporaryDirectory(prefix="stockade-worker-callgrind-") as scratch_name:
        output = (args.keep or Path(scratch_name)) / f"callgrind.{name}.out"
        output.parent.mkdir(parents=True, exist_ok=True)
        prefix = ["valgrind", "-q", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={output}"]
        process, driver, denied = run_worker(policy_path, route_path, bodies, args.warmup, prefix)
        try:
            subprocess.run(["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True)
            denied = sum(1 for body in bodies[args.warmup :] if not driver.review(body))
            subprocess.run(["callgrind_control", "-d", "measured", str(process.pid)], check=True, capture_output=True)
        finally:
            finish(process, driver)
        dumps = sorted(output.parent.glob(output.name + "*"), key=lambda p: p.stat().st_mtime)
        measured = [d for d in dumps if "measured" in d.read_text(errors="replace")[:4000]]
        if not measured:
            raise SystemExit(f"no measured dump among {dumps}")
        dump = measured[-1]
        count = len(bodies) - args.warmup
        instructions = total_instructions(dump)
        print(f"{name}: {policy_path.name} at {route_path}, {count} reviews ({denied} denied)")
        print(f"{name}: worker instructions per review: {instructions / count / 1e6:.3f} M ({instructions} in total)")
        for library, cost in self_cost_by_object(dump).most_common(args.top):
            print(f"  {cost / count / 1e3:9.1f} k  {library}")


def profile(name: str, bodies: list[bytes], args: argparse.Namespace) -> None:
    policy_path, route_path = SETS[name]
    with tempfile.TemporaryDirectory(prefix="stockade-worker-profile-") as scratch:
        stats_file = str(Path(scratch) / "worker.prof")
        process, driver, _ = run_worker(policy_path, route_path, bodies, args.warmup, [], stats_file)
        try:
            for body in bodies[args.warmup :]:
                driver.review(body)
        finally:
            finish(process, driver)
        stats = pstats.Stats(stats_file)
        if args.keep:
            shutil.copy(stats_file, args.keep / f"worker.{name}.prof")
        for order in ("cumulative", "tottime"):
            print(f"-- {name}: worker profile over {len(bodies) - args.warmup} reviews, top {args.profile} by {order}")
            stats.sort_stats(order).print_stats(args.profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", default="pss,mix17", help=f"comma-separated, of {sorted(SETS)}")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--keep", type=Path, help="write the callgrind dumps into this directory")
    parser.add_argument("--profile", type=int, default=0, metavar="K", help="cProfile's top K functions instead of callgrind")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-after", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        run_child(args.child, args.profile_after, args.profile_out)
        return
    if not args.profile:
        for tool in ("valgrind", "callgrind_control"):
            if shutil.which(tool) is None:
                raise SystemExit(f"bench_worker_instructions: {tool} not found")
    bodies = [review_for(pod) for pod in generate_pods(args.requests + args.warmup)]
    for name in args.sets.split(","):
        (profile if args.profile else measure)(name, bodies, args)


if __name__ == "__main__":
    main()
