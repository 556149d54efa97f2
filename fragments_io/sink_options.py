"""The `gazette` sink's options (`df.write` / `df.writeStream`), parsed once into a picklable WriteOptions.

Kept apart from the read options (options.py): a write takes other options, and both sides reject
what they do not know. Spark hands options case-insensitively, so keys are looked up in lower case
and named in camelCase in errors and docs (docs/sink.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from fragments_io.errors import OptionError

DEFAULT_UUID_POINTER = "/_meta/uuid"
DEFAULT_WRITE_TIMEOUT_S = 60.0
MAPPINGS = ("modulo", "rendezvous")
WRITE_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

KNOWN_WRITE_OPTIONS = {
    name.lower(): name
    for name in (
        "broker",
        "journal",
        "path",  # save(path): the journal
        "journals",
        "key",
        "mapping",
        "uuidPointer",
        "writeId",
        "checkpointLocation",
        "timeout",
    )
}
# What a Kafka sink option is called here (named in the unknown-option error).
KAFKA_WRITE_HINTS = {
    "topic": "journal (one journal) or journals (a label selector) with key",
    "kafka.bootstrap.servers": "broker (a broker's URL, or several separated by commas)",
}


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """What a write needs: where (broker, journal or selector + key columns + mapping), how to frame
    (uuid_pointer), and where the driver records its ACK intents (checkpoint_location, write_id)."""

    broker: str
    journal: str | None = None  # one journal, or None with `selector`
    selector: str | None = None  # a label selector's text; rows are routed by `key`
    key: tuple[str, ...] = ()
    mapping: str = "modulo"
    uuid_pointer: str = DEFAULT_UUID_POINTER
    write_id: str | None = None  # batch: names this write, so a restarted driver completes it once
    checkpoint_location: str | None = None  # directory of the driver's intent records (local path or file://)
    timeout_s: float = DEFAULT_WRITE_TIMEOUT_S


def _checkpoint_dir(value: str) -> str:
    if value.startswith("file://"):
        return value[len("file://") :] or "/"
    if "://" in value:
        raise OptionError(
            f"option checkpointLocation {value!r}: the gazette sink records its ACK intents on a local or "
            "mounted filesystem of the driver (a path or a file:// URL), not at a "
            f"{value.split('://', 1)[0]}:// URL"
        )
    return value


def parse_write_options(raw: Mapping[str, Any], *, streaming: bool) -> WriteOptions:
    """WriteOptions from Spark's options; OptionError naming the option that is unknown, missing,
    malformed or not allowed for this kind of write."""
    opts = {str(k).lower(): v for k, v in raw.items()}
    for k in opts:
        if k not in KNOWN_WRITE_OPTIONS:
            hint = KAFKA_WRITE_HINTS.get(k)
            known = ", ".join(sorted(set(KNOWN_WRITE_OPTIONS.values()) - {"path"}))
            more = f"; the gazette sink's counterpart is {hint}" if hint else ""
            raise OptionError(f"unknown option {k!r} of the gazette sink{more} (known: {known})")
    broker = str(opts.get("broker") or "").strip()
    if not broker:
        raise OptionError(
            "option broker is required: the URL of a Gazette broker, e.g. http://127.0.0.1:8080"
        )
    journal = opts.get("journal") or opts.get("path") or None
    if opts.get("journal") and opts.get("path") and opts["journal"] != opts["path"]:
        raise OptionError(f"option journal {opts['journal']!r} and save(path) {opts['path']!r} disagree")
    selector = opts.get("journals") or None
    if (journal is None) == (selector is None):
        raise OptionError(
            "give exactly one of option journal (every row goes to it) or option journals (a label selector, "
            "e.g. 'app=orders'; each row goes to the journal its key columns map to)"
        )
    key = tuple(c.strip() for c in str(opts.get("key") or "").split(",") if c.strip())
    if selector is not None and not key:
        raise OptionError(
            f"option journals={selector!r} needs option key: the column(s) whose values map a row to a journal"
        )
    if journal is not None and key:
        raise OptionError(
            "option key routes rows among the journals of option journals; with one journal drop it"
        )
    mapping = str(opts.get("mapping") or "modulo").lower()
    if mapping not in MAPPINGS:
        raise OptionError(f"option mapping={mapping!r} is not one of {', '.join(MAPPINGS)}")
    pointer = str(opts.get("uuidpointer") or DEFAULT_UUID_POINTER)
    if not pointer.startswith("/") or pointer == "/":
        raise OptionError(
            f"option uuidPointer={pointer!r} is not a JSON pointer to a member (like /_meta/uuid)"
        )
    write_id = opts.get("writeid") or None
    if write_id is not None:
        if streaming:
            raise OptionError(
                "option writeId is for batch writes; a streaming write is made exactly once by its "
                "checkpointLocation and each micro-batch's id"
            )
        if not WRITE_ID_PATTERN.fullmatch(write_id):
            raise OptionError(
                f"option writeId={write_id!r} must be 1-200 letters, digits, '.', '_' or '-' (it names a file)"
            )
    checkpoint = opts.get("checkpointlocation") or None
    if checkpoint is not None:
        checkpoint = _checkpoint_dir(str(checkpoint))
    if streaming and checkpoint is None:
        raise OptionError("a streaming write to gazette needs option checkpointLocation")
    if write_id is not None and checkpoint is None:
        raise OptionError(
            "option writeId needs option checkpointLocation: the directory where the driver records the "
            "write's ACK intents before appending them"
        )
    try:
        timeout_s = float(opts.get("timeout") or DEFAULT_WRITE_TIMEOUT_S)
    except ValueError:
        raise OptionError(f"option timeout={opts.get('timeout')!r} is not a number of seconds") from None
    if not timeout_s > 0:
        raise OptionError(f"option timeout={timeout_s} must be positive (seconds)")
    return WriteOptions(
        broker=broker,
        journal=journal,
        selector=selector,
        key=key,
        mapping=mapping,
        uuid_pointer=pointer,
        write_id=write_id,
        checkpoint_location=checkpoint,
        timeout_s=timeout_s,
    )
