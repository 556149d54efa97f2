"""The committed *_pb2 modules match what the pinned generator produces from the .proto files."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_not_stale() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gazette.protocol.generate", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
