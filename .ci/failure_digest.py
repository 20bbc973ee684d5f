"""Prints the first failures of a pytest JUnit report, last in the CI log: a CI log keeps only its tail, and one
early failure (a leaked webhook, say) explains every failure after it."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree

FIRST = 3
LINES = 40


def main(path: str) -> int:
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        print(f"no JUnit report at {path}: {exc}", file=sys.stderr)
        return 1
    shown = 0
    for case in root.iter("testcase"):
        for outcome in list(case.findall("failure")) + list(case.findall("error")):
            name = f"{case.get('classname')}::{case.get('name')}"
            text = (outcome.text or outcome.get("message") or "").rstrip().splitlines()
            print(f"=== first failures, in run order ({shown + 1}/{FIRST}): {name} [{outcome.tag}]")
            print("\n".join(text[-LINES:]))
            shown += 1
            if shown >= FIRST:
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
