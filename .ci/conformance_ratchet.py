"""Run Kyverno's CLI conformance cases and fail if a group's pass count drops below the recorded floor."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared", "conformance")
CEL_FEATURES = {"vpol", "validate.cel", "mpol", "gpol", "vap", "map", "dpol", "ivpol"}


def main() -> int:
    with open(os.path.join(HERE, "conformance-floor.json"), encoding="utf-8") as handle:
        floor = json.load(handle)
    features = {}
    with open(os.path.join(SHARED, "cases.tsv"), encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            features[row["case_dir"].removeprefix("cases/")] = row["main_feature"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "conformance.json")
        cli = os.path.join(ROOT, ".venv", "bin", "stockade")
        subprocess.run([sys.executable, os.path.join(SHARED, "run.py"), "--cli", cli, "--jobs", "2", "--json", out], check=True)
        with open(out, encoding="utf-8") as handle:
            cases = json.load(handle)["cases"]
    passed = {"engine": 0, "cel": 0}
    totals = {"engine": 0, "cel": 0}
    for case in cases:
        group = "cel" if features.get(case["case"]) in CEL_FEATURES else "engine"
        totals[group] += 1
        passed[group] += bool(case["passed"])
    failed = False
    for group in ("engine", "cel"):
        share = 100.0 * passed[group] / max(totals[group], 1)
        print(f"conformance {group}: {passed[group]}/{totals[group]} ({share:.1f}%), floor {floor[group]}")
        if passed[group] < floor[group]:
            failed = True
    total = sum(passed.values())
    print(f"conformance all: {total}/{sum(totals.values())} ({100.0 * total / max(sum(totals.values()), 1):.1f}%)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
