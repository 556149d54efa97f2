"""A small tmpfs mounted for a test (a full disk on demand); needs root. Shared by the full-disk tests."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

MOUNT_TIMEOUT_S = 10.0


@contextlib.contextmanager
def mounted(path: Path, size: str) -> Iterator[Path]:
    """Mounts a tmpfs of `size` (e.g. "512k") at `path` (an existing directory); unmounts it lazily
    after (an in-process broker's closed files are freed only when collected)."""
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=True, capture_output=True, timeout=MOUNT_TIMEOUT_S,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=MOUNT_TIMEOUT_S)


def resize(path: Path, size: str) -> None:
    """Gives the tmpfs at `path` room again (the disk freed)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, timeout=MOUNT_TIMEOUT_S)
