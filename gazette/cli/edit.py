"""`journals edit` and `shards edit`: YAML opened in $EDITOR and applied when it exits, as gazctl's.

One retry loop serves both (gazctl's editor.EditRetryLoop): the selected specs, with revisions, are
written to a temporary file under a header; what is saved is parsed and applied; a failed apply
opens the edits again with the error on top. Saving it empty, or unchanged, gives up and changes
nothing. Nothing is applied unless the parse and the apply both succeed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from rich.console import Console

from gazette.protocol.errors import GazetteError, ValidationError

HEADER = """\
# Edit the {what} below and save: they are applied when the editor exits (each "revision" makes its
# change a compare-and-swap, so edits racing another writer fail rather than overwrite it).
# Delete {one} with "delete: true". An empty file cancels; so does leaving it unchanged.
"""


def without_header(text: str) -> str:
    """`text` without its leading comment lines (the header, and a previous attempt's error)."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def run_editor(path: str) -> None:
    """Opens `path` in $GAZ_EDITOR, else $EDITOR, else vi (as gazctl picks it); waits for it to exit."""
    editor = os.environ.get("GAZ_EDITOR") or os.environ.get("EDITOR") or "vi"
    proc = subprocess.run(["/bin/sh", "-c", f'{editor} "$0"', path])
    if proc.returncode != 0:
        raise ValidationError(f"the editor ({editor}) exited with status {proc.returncode}; nothing applied")


def edit_and_apply(body: str, what: str, one: str, apply: Callable[[str], str], console: Console) -> None:
    """Runs the edit loop over `body` (YAML of `what`, e.g. "journals"; `one` e.g. "a journal");
    `apply(edited text)` parses and applies it, returning what to print, or raises GazetteError or
    a YAML error (then the user edits again, with the error shown)."""
    header = HEADER.format(what=what, one=one)
    error = ""
    fd, path = tempfile.mkstemp(prefix=f"gazette-{what}-edit-", suffix=".yaml")
    os.close(fd)
    try:
        while True:
            notice = "".join(f"# {line}\n" for line in f"Apply failed: {error}".splitlines() if error)
            Path(path).write_text(header + notice + body)
            run_editor(path)
            edited = without_header(Path(path).read_text())
            if not edited.strip():
                console.print("Cancelled; empty file.")
                return
            if edited == body:
                console.print(f"Cancelled; {'no changes to invalid file.' if error else 'nothing to do.'}")
                return
            try:
                done = apply(edited)
            except (GazetteError, yaml.YAMLError) as exc:
                body, error = edited, str(exc)
                continue
            console.print(done, soft_wrap=True, markup=False)
            return
    finally:
        os.unlink(path)
