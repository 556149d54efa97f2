"""The main job never breaks unnoticed: `gazette demo --small` runs end to end in a temp dir."""

from __future__ import annotations

import subprocess
import sys


def test_demo_small(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gazette.cli.main", "demo", "--small", "--data-dir", str(tmp_path / "demo-data")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "demo ok" in proc.stdout
    assert "MISMATCH" not in proc.stdout
