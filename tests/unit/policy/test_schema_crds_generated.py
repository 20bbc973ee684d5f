"""deploy/crds/policies.yaml is exactly what hack/gen-crds.py renders from stockade.policy.schema: the API server
and the offline check enforce one schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_deploy_crds_are_generated_from_the_schema_definitions() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "hack" / "gen-crds.py"), "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
