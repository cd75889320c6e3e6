"""Every example runs (in its fast mode) so none rots."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")),
)
def test_example_runs(script, tmp_path):
    # each example runs alone: no sibling module on the path
    env = {**os.environ, "SMOOTHLEARN_EXAMPLES_FAST": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()
