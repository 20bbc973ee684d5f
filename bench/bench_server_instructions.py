"""Instructions the `stockade serve` process executes per admission review, counted by callgrind.

Usage: .venv/bin/python bench/bench_server_instructions.py [--requests 1500] [--warmup 300] [--connections 8]
       [--policies bench/policies/pss-restricted.yaml] [--endpoint /validate/fail] [--top 12] [--keep DIR]
Needs valgrind.  CPU time per review (bench_admission) moves with whatever else runs on a shared machine; an
instruction count does not.  The server runs under ``valgrind --tool=callgrind`` (its evaluation workers, started by
exec, run natively and are not counted), is warmed up, its counters are zeroed (``callgrind_control -z``), this
process sends ``--requests`` Pod CREATE reviews over HTTPS keep-alive, and the counters are dumped.  Prints the
instructions per review of the server process and how they split over the libraries that ran them (Python code is
the interpreter's share; bench/profile_admission.py --gil gives Python-level shares).  Kernel work (syscalls, page
faults) is not counted: compare the system time of bench/bench_admission.py for that.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_admission import drive, free_port, wait_ready  # noqa: E402
from bench_engine import generate_pods, review_for  # noqa: E402


def start_under_callgrind(policies: str, port: int, cert_dir: Path, output: Path) -> subprocess.Popen[bytes]:
    command = [
        "valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={output}",
        sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", policies,
        "--host", "127.0.0.1", "--port", str(port), "--cert-dir", str(cert_dir), "--log-level", "warning", "--workers", "1",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def total_instructions(dump: Path) -> int:
    """The ``totals:`` (or ``summary:``) line of a callgrind dump: instructions executed (Ir)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def self_cost_by_object(dump: Path) -> collections.Counter[str]:
    """Instructions executed in each shared object's own code, from a callgrind dump: cost lines count towards
    the current ``ob=``; the line after a ``calls=`` line is the callee's inclusive cost and is skipped."""
    names: dict[str, str] = {}
    costs: collections.Counter[str] = collections.Counter()
    current = "?"
    after_call = False
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("ob="):
            match = re.match(r"\((\d+)\)(?: (.*))?", line[3:])
            if match is None:
                current = line[3:]
            else:
                if match.group(2) is not None:
                    names[match.group(1)] = match.group(2)
                current = names.get(match.group(1), line[3:])
        elif line.startswith("cob="):
            match = re.match(r"\((\d+)\) (.*)", line[4:])
            if match is not None:
                names[match.group(1)] = match.group(2)
        elif line.startswith("calls="):
            after_call = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if after_call:
                after_call = False
                continue
            fields = line.split()
            if len(fields) >= 2:
                costs[current.rsplit("/", 1)[-1]] += int(fields[1])
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--policies", default=str(HERE / "policies" / "pss-restricted.yaml"))
    parser.add_argument("--endpoint", default="/validate/fail")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--keep", type=Path, help="write the callgrind dump into this directory")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_server_instructions: {tool} not found")
    bodies = [review_for(pod) for pod in generate_pods(args.requests + args.warmup)]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="stockade-callgrind-") as scratch_name:
        scratch = Path(scratch_name)
        output = (args.keep or scratch) / "callgrind.out"
        output.parent.mkdir(parents=True, exist_ok=True)
        cert_dir = scratch / "certs"
        process = start_under_callgrind(args.policies, port, cert_dir, output)
        try:
            deadline = time.monotonic() + 600
            while not (cert_dir / "ca.crt").exists() and time.monotonic() < deadline:
                if process.poll() is not None:
                    raise SystemExit(f"server exited: {process.stderr.read().decode() if process.stderr else ''}")
                time.sleep(0.5)
            context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
            asyncio.run(wait_ready(port, context, process, timeout=600))
            asyncio.run(drive(port, context, bodies[: args.warmup], args.connections, 3600, args.endpoint))
            subprocess.run(["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True)
            latencies, denied, errors, _ = asyncio.run(drive(port, context, bodies[args.warmup :], args.connections, 3600, args.endpoint))
            subprocess.run(["callgrind_control", "-d", "measured", str(process.pid)], check=True, capture_output=True)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
        dumps = sorted(output.parent.glob(output.name + ".*"), key=lambda p: p.stat().st_mtime)
        measured = [d for d in dumps if "measured" in d.read_text(errors="replace")[:4000]]
        if not measured:
            raise SystemExit(f"no measured dump among {dumps}")
        dump = measured[-1]
        count = len(latencies)
        instructions = total_instructions(dump)
        print(f"policies: {args.policies}")
        print(f"requests: {count} over {args.connections} keep-alive connections ({denied} denied, {errors} errors)")
        print(f"server instructions per review: {instructions / max(1, count) / 1e6:.3f} M ({instructions} in total)")
        if args.top:
            print(f"instructions per review executed in each library (self cost; the interpreter's share is Python code):")
            for library, cost in self_cost_by_object(dump).most_common(args.top):
                print(f"  {cost / max(1, count) / 1e3:9.1f} k  {library}")

if __name__ == "__main__":
    main()
