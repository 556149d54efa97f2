"""A test-only encoder of gazette-py's earlier recovery-log records (a JSON payload in a fixed frame,
paths without Gazette's leading "/"), to check that playback still reads logs written so."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from gazette.consumer.recoverylog import FSM, RecordedOp
from gazette.message.framing.fixed import frame


def legacy_payload(op: RecordedOp) -> bytes:
    """The JSON payload gazette-py's recorder wrote for `op` before it wrote Gazette's protobuf."""
    doc: dict[str, Any] = {"seq_no": op.seq_no, "checksum": op.checksum, "author": op.author}
    if op.kind == "create":
        doc["create"] = {"path": op.path.lstrip("/")}
    elif op.kind in ("link", "unlink"):
        doc[op.kind] = {"fnode": op.fnode, "path": op.path.lstrip("/")}
    elif op.kind == "write":
        doc["write"] = {"fnode": op.fnode, "offset": op.offset, "length": op.length}
    elif op.kind:
        raise ValueError(f"the earlier encoding had no {op.kind!r} ops")
    return orjson.dumps(doc)


def legacy_records(fsm: FSM, author: int, ops: list[tuple[RecordedOp, bytes]]) -> bytes:
    """Sequences `ops` (op templates and a write's contents) as the earlier recorder did: each
    carries `fsm`'s next seq_no and checksum and is applied to it; returns the log bytes."""
    out = b""
    for template, data in ops:
        op = dataclasses.replace(template, seq_no=fsm.next_seq_no, checksum=fsm.next_checksum, author=author,
                                 length=len(data) if template.kind == "write" else 0)  # fmt: skip
        payload = legacy_payload(op)
        outcome = fsm.apply(op, payload)
        assert outcome.name == "APPLIED", (op, outcome)
        out += frame(payload) + data
    return out
