"""A kyverno-test.yaml holding several Test documents runs each of them, as `kyverno test` does."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"


def test_every_document_of_a_test_file_runs(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(QUICKSTART, suite)
    test_file = suite / "kyverno-test.yaml"
    original = test_file.read_text()
    flipped = original.replace("result: fail", "result: pass", 1)
    assert flipped != original
    test_file.write_text(original.rstrip("\n") + "\n---\n" + flipped)
    env = {**os.environ, "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-m", "stockade", "test", str(suite)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("Loading test") == 2
    assert "Want pass, got fail" in result.stdout
