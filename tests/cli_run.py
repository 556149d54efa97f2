"""Running the `gazette` command in tests: `python -m gazette.cli.main` in a subprocess with a clean
GAZETTE_* environment, and the two outcomes every CLI test checks (success, or one error line)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

CLI_TIMEOUT_S = 120


def gazette(
    *args: str, env: Mapping[str, str] | None = None, input: bytes | str = b""
) -> subprocess.CompletedProcess:
    """Runs `gazette ARGS`; the caller's GAZETTE_* variables are dropped, `env` adds its own."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("GAZETTE_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gazette.cli.main", *args],
        env=full,
        input=input.encode() if isinstance(input, str) else input,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    """Asserts success; returns stdout."""
    assert proc.returncode == 0, f"{proc.args[3:]} exited {proc.returncode}: {proc.stderr.decode()}"
    return proc.stdout.decode()


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """Asserts a clean failure: exit 1 and a single `error: ...` line on stderr; returns that line."""
    err = proc.stderr.decode()
    assert proc.returncode == 1, f"{proc.args[3:]} exited {proc.returncode}; stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{err}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]
