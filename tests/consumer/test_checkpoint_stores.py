"""Consumer checkpoints as Gazette stores them: ConsumerCheckpoint <-> consumer.Checkpoint bytes;
SQLStore's gazette_checkpoints rows as Gazette's SQLStore reads and writes them (sqlite and
PostgreSQL), migrating gazette-py's earlier JSON rows and refusing corrupt ones; and JSONFileStore's
state.json in the layout of Gazette's store-json-file. Expected bytes and files are written out by
hand from protocol.proto and Go's encoding/json rules, not produced by the code under test."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gazette.consumer import ConsumerCheckpoint, FencingError, SQLStore
from gazette.consumer.json_store import StateFile, decode_state_file, encode_state_file
from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.protocol import shard_pb2
from gazette.protocol.errors import ValidationError

pytest_plugins = ["fixtures_postgres"]

SHARD = SimpleNamespace(fqn="/root/items/enc-000")
WHERE = f"gazette_checkpoints.checkpoint of shard {SHARD.fqn}"
P1 = bytes.fromhex("0a0b0c0d0e0f")
P2 = bytes.fromhex("010203040506")
BIG = (1 << 64) - 3  # a clock above int64's range: fixed64 on the wire


# ---- consumer.Checkpoint on the wire, written out by field number (protocol.proto)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _entry(producer: bytes, last_ack: int, begin: int) -> bytes:
    state = (b"\x09" + last_ack.to_bytes(8, "little") if last_ack else b"") + (
        b"\x10" + _varint(begin) if begin else b""
    )
    return _ld(1, producer) + _ld(2, state)


def _source(journal: str, read_through: int, *entries: bytes) -> bytes:
    value = (b"\x08" + _varint(read_through) if read_through else b"") + b"".join(_ld(2, e) for e in entries)
    return _ld(1, _ld(1, journal.encode()) + _ld(2, value))


def _intent(journal: str, intent: bytes) -> bytes:  # gogo leaves an empty value out of the entry
    return _ld(2, _ld(1, journal.encode()) + (_ld(2, intent) if intent else b""))


RICH = ConsumerCheckpoint(
    Checkpoint(
        {"in/a": 1024, "in/b": 7},
        [
            ProducerState("in/a", P2, BIG, -1),
            ProducerState("in/a", P1, 99, 900),
            ProducerState("in/b", P1, 0, 0),
        ],
    ),
    {"out/x": b"ack x\n", "out/y": b"ack y\n"},
)
RICH_WIRE = (  # as to_bytes writes it: map keys sorted, producers in their list order
    _source("in/a", 1024, _entry(P2, BIG, -1), _entry(P1, 99, 900))
    + _source("in/b", 7, _entry(P1, 0, 0))
    + _intent("out/x", b"ack x\n")
    + _intent("out/y", b"ack y\n")
)
RICH_WIRE_GO = (  # the same as Go may write it: maps in another order, ACK intents first
    _intent("out/y", b"ack y\n")
    + _source("in/b", 7, _entry(P1, 0, 0))
    + _intent("out/x", b"ack x\n")
    + _source("in/a", 1024, _entry(P2, BIG, -1), _entry(P1, 99, 900))
)


def test_consumer_checkpoint_bytes_are_gazettes() -> None:
    assert ConsumerCheckpoint().to_bytes() == b""
    assert ConsumerCheckpoint.from_bytes(b"") == ConsumerCheckpoint()
    assert RICH.to_bytes() == RICH_WIRE
    assert ConsumerCheckpoint.from_bytes(RICH_WIRE) == RICH
    assert ConsumerCheckpoint.from_bytes(RICH_WIRE_GO) == RICH
    msg = shard_pb2.Checkpoint.FromString(RICH.to_bytes())
    assert dict(msg.ack_intents) == {"out/x": b"ack x\n", "out/y": b"ack y\n"}
    assert msg.sources["in/a"].producers[0].state.last_ack == BIG
    assert ConsumerCheckpoint.from_proto(RICH.to_proto()) == RICH
    # An empty ACK intent (gogo omits the empty value) reads back as b"".
    assert ConsumerCheckpoint.from_bytes(_intent("out/z", b"")).ack_intents == {"out/z": b""}
    # The JSON view is unchanged (Inspect, `gazette shards inspect`).
    assert ConsumerCheckpoint.from_json(RICH.to_json()) == RICH
    assert RICH.to_dict()["ack_intents"] == {"out/x": "YWNrIHgK", "out/y": "YWNrIHkK"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x0a\x05ab", "not a marshaled consumer.Checkpoint protobuf"),
        (b"\x0a\x03\x0a\x01\xff", "not a marshaled consumer.Checkpoint protobuf"),  # a key not UTF-8
        (_source("in/a", 1, _entry(b"\x01\x02", 1, -1)), r"sources\['in/a'\]\.producers\[0\]\.id 0102"),
        (_intent("", b"x"), "ack_intents has an empty journal name"),
        (_varint(3 << 3) + b"\x01", r"field number\(s\) \[3\]"),
    ],
)
def test_consumer_checkpoint_bytes_are_validated(raw: bytes, message: str) -> None:
    with pytest.raises(ValidationError, match=f"^shard s checkpoint.*{message}"):
        ConsumerCheckpoint.from_bytes(raw, where="shard s checkpoint")


def test_from_bytes_needs_bytes() -> None:
    with pytest.raises(ValidationError, match="consumer checkpoint is a str, expected protobuf bytes"):
        ConsumerCheckpoint.from_bytes("{}")  # type: ignore[arg-type]


# ---- SQLStore: gazette_checkpoints as Gazette's SQLStore keeps it


GAZETTE_DDL = {  # Gazette's own: consumer/store_sql.go's doc (sqlite), kustomize postgres_tables.sql
    "sqlite": "CREATE TABLE gazette_checkpoints (shard_fqn TEXT PRIMARY KEY NOT NULL, "
    "fence INTEGER NOT NULL, checkpoint BLOB NOT NULL)",
    "postgresql": "CREATE TABLE gazette_checkpoints (shard_fqn TEXT PRIMARY KEY NOT NULL, "
    "fence INTEGER NOT NULL, checkpoint BYTEA NOT NULL)",
}


@dataclass
class DB:
    """A database of either dialect, run outside any store: `run` autocommits one statement
    (`?` placeholders) and returns its rows."""

    name: str
    url: str
    run: Callable[..., list[tuple[Any, ...]]]

    def store(self) -> SQLStore:
        return SQLStore(SHARD, self.url)

    def row(self) -> tuple[int, bytes]:
        [(fence, raw)] = self.run(
            "SELECT fence, checkpoint FROM gazette_checkpoints WHERE shard_fqn = ?", SHARD.fqn
        )
        return int(fence), bytes(raw) if not isinstance(raw, str) else raw.encode()

    def gazette_restore(self) -> tuple[int, shard_pb2.Checkpoint]:
        """What Gazette's SQLStore.RestoreCheckpoint reads: fence+1, then its fence and checkpoint."""
        self.run("UPDATE gazette_checkpoints SET fence=fence+1 WHERE shard_fqn=?", SHARD.fqn)
        fence, raw = self.row()
        return fence, shard_pb2.Checkpoint.FromString(raw)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path) -> DB:
    if request.param == "sqlite":
        path = str(tmp_path / "shard.db")

        def run_sqlite(sql: str, *params: Any) -> list[tuple[Any, ...]]:
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                conn.close()

        return DB("sqlite", f"sqlite://{path}", run_sqlite)
    import psycopg

    url = request.getfixturevalue("postgres_url")

    def run_postgres(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

    return DB("postgresql", url, run_postgres)


@pytest.fixture
def stores() -> Iterator[list[SQLStore]]:
    opened: list[SQLStore] = []
    yield opened
    for store in opened:
        store.destroy()


def test_sql_round_trip_is_gazettes_bytes(db: DB, stores: list[SQLStore]) -> None:
    store = db.store()
    stores.append(store)
    assert store.restore_checkpoint(SHARD) == ConsumerCheckpoint()
    assert db.row() == (1, b"")  # Gazette's empty checkpoint: zero bytes, fence 1
    store.start_commit(SHARD, RICH, []).result()
    assert db.row() == (1, RICH_WIRE)
    again = db.store()
    stores.append(again)
    assert again.restore_checkpoint(SHARD) == RICH and again.fence == 2
    assert db.row() == (2, RICH_WIRE)  # already in this store's encoding: not rewritten

    # A Go consumer restoring it (Gazette's statements, protobuf unmarshal) reads what we committed.
    fence, msg = db.gazette_restore()
    assert fence == 3 and set(msg.sources) == {"in/a", "in/b"}
    assert msg.sources["in/a"].read_through == 1024
    assert [(e.id, e.state.last_ack, e.state.begin) for e in msg.sources["in/a"].producers] == [
        (P2, BIG, -1),
        (P1, 99, 900),
    ]
    assert dict(msg.ack_intents) == RICH.ack_intents
    with pytest.raises(FencingError, match="fence is no longer 2"):
        again.start_commit(SHARD, ConsumerCheckpoint(), []).result()


def test_sql_restores_a_row_gazettes_store_wrote(db: DB, stores: list[SQLStore]) -> None:
    db.run(GAZETTE_DDL[db.name])  # the table as Gazette's docs create it
    db.run(
        "INSERT INTO gazette_checkpoints (shard_fqn, checkpoint, fence) VALUES (?, ?, 1)",
        SHARD.fqn,
        RICH_WIRE_GO,
    )
    store = db.store()  # CREATE TABLE IF NOT EXISTS leaves Gazette's table as it is
    stores.append(store)
    assert store.restore_checkpoint(SHARD) == RICH and store.fence == 2
    assert db.row() == (2, RICH_WIRE)  # rewritten in the transaction that moved the fence (sorted maps)
    store.start_commit(SHARD, ConsumerCheckpoint(Checkpoint({"in/a": 2048}, []), {}), []).result()
    assert db.row() == (2, _source("in/a", 2048))


def test_sql_migrates_gazette_py_json_rows(db: DB, stores: list[SQLStore]) -> None:
    db.store().destroy()  # creates the table
    old_json = (  # gazette-py's earlier stored form, written out by hand
        b'{"sequencer":{"offsets":{"in/a":1024,"in/b":7},"producers":['
        b'{"journal":"in/a","producer":"010203040506","last_ack":%d,"begin":-1},'
        b'{"journal":"in/a","producer":"0a0b0c0d0e0f","last_ack":99,"begin":900},'
        b'{"journal":"in/b","producer":"0a0b0c0d0e0f","last_ack":0,"begin":0}]},'
        b'"ack_intents":{"out/x":"YWNrIHgK","out/y":"YWNrIHkK"}}' % BIG
    )
    db.run(
        "INSERT INTO gazette_checkpoints (shard_fqn, fence, checkpoint) VALUES (?, 4, ?)", SHARD.fqn, old_json
    )
    store = db.store()
    stores.append(store)
    assert store.restore_checkpoint(SHARD) == RICH and store.fence == 5
    assert db.row() == (5, RICH_WIRE)  # migrated with the fence, in one transaction
    fence, msg = db.gazette_restore()  # and now a Go consumer can read it
    assert fence == 6 and ConsumerCheckpoint.from_proto(msg) == RICH


def test_sql_migrates_a_json_row_kept_as_text_by_sqlite(tmp_path) -> None:
    path = str(tmp_path / "text.db")
    SQLStore(SHARD, path).destroy()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO gazette_checkpoints VALUES (?, 1, ?)",
        (SHARD.fqn, ConsumerCheckpoint().to_json().decode()),
    )
    store = SQLStore(SHARD, path)
    try:
        assert store.restore_checkpoint(SHARD) == ConsumerCheckpoint()
        assert conn.execute(
            "SELECT fence, checkpoint, typeof(checkpoint) FROM gazette_checkpoints"
        ).fetchall() == [(2, b"", "blob")]
    finally:
        store.destroy()
        conn.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"\x0a\x05ab", "is not a marshaled consumer.Checkpoint protobuf"),
        (
            _source("in/a", 1, _entry(b"\x01\x02", 1, -1)),
            r"\.sources\['in/a'\]\.producers\[0\]\.id 0102 is not",
        ),
        (
            b'{"sequencer": {"offsets": {}}',
            "begins with '{' like gazette-py's earlier JSON checkpoint but is not one",
        ),
        (
            b'{"offsets": {}, "producers": []}',
            "begins with '{' like .* exactly the keys sequencer, ack_intents",
        ),
    ],
    ids=["truncated-protobuf", "bad-producer-id", "bad-json", "other-json"],
)
def test_sql_refuses_a_corrupt_row_leaving_the_fence(
    db: DB, stores: list[SQLStore], value: bytes, message: str
) -> None:
    db.store().destroy()
    db.run(
        "INSERT INTO gazette_checkpoints (shard_fqn, fence, checkpoint) VALUES (?, 3, ?)", SHARD.fqn, value
    )
    store = db.store()
    stores.append(store)
    with pytest.raises(ValidationError, match=message) as info:
        store.restore_checkpoint(SHARD)
    assert str(info.value).startswith(WHERE) and "restore refused: the fence stays at 3" in str(info.value)
    assert db.row() == (3, value) and store.fence is None  # rolled back: nothing moved
    with pytest.raises(FencingError, match="before restore_checkpoint"):
        store.start_commit(SHARD, ConsumerCheckpoint(), []).result()


# ---- JSONFileStore: state.json as Gazette's store-json-file writes it


GO_STATE_FILE = (  # what Go's json.Encoder writes for offsets, a state and RICH: one value a line
    b'{"in/a":1024,"in/b":7}\n'
    b'{"counts":{"k":3}}\n'
    b'{"sources":{"in/a":{"read_through":1024,"producers":['
    b'{"id":"AQIDBAUG","state":{"last_ack":%d,"begin":-1}},'
    b'{"id":"CgsMDQ4P","state":{"last_ack":99,"begin":900}}]},'
    b'"in/b":{"read_through":7,"producers":[{"id":"CgsMDQ4P","state":{}}]}},'
    b'"ack_intents":{"out/x":"YWNrIHgK","out/y":"YWNrIHkK"}}\n' % BIG
)


def test_state_file_is_gazettes_layout() -> None:
    assert encode_state_file({"counts": {"k": 3}}, RICH) == GO_STATE_FILE
    assert decode_state_file(GO_STATE_FILE) == StateFile({"counts": {"k": 3}}, RICH, legacy=False)
    # Nothing yet: Go's zero-valued fields are left out and a source without producers is null.
    empty = ConsumerCheckpoint(Checkpoint({"in/a": 0}, []), {})
    assert encode_state_file([], empty) == b'{"in/a":0}\n[]\n{"sources":{"in/a":{"producers":null}}}\n'
    assert encode_state_file(None, ConsumerCheckpoint()) == b'{}\nnull\n{"sources":{}}\n'
    assert decode_state_file(b'{}\nnull\n{"sources":null}\n') == StateFile(None, ConsumerCheckpoint())


def test_state_file_reads_as_gazette_does() -> None:
    # The offsets line overrides read_through; map and line spacing as any JSON decoder takes them.
    text = (
        b'{"in/b":70, "in/a":1}\n\n {"s":1}\n{"ack_intents":{"out/x":"YWNrIHgK"},"sources":{"in/b":'
        b'{"producers":[{"state":{"begin":5,"last_ack":2},"id":"CgsMDQ4P"}],"read_through":7},"in/a":{}}}'
    )
    assert decode_state_file(text) == StateFile(
        {"s": 1},
        ConsumerCheckpoint(
            Checkpoint({"in/a": 1, "in/b": 70}, [ProducerState("in/b", P1, 2, 5)]), {"out/x": b"ack x\n"}
        ),
    )
    # Gazette's older files had no checkpoint line: offsets alone.
    assert decode_state_file(b'{"in/a":5}\n{"s":1}\n').checkpoint == ConsumerCheckpoint(
        Checkpoint({"in/a": 5}, [])
    )


def test_state_file_of_gazette_py_before_is_read_as_legacy() -> None:
    old = orjson.dumps({"state": {"counts": {"k": 3}}, "checkpoint": RICH.to_dict()})
    assert decode_state_file(old) == StateFile({"counts": {"k": 3}}, RICH, legacy=True)
    with pytest.raises(
        ValidationError, match=r"^f\.json \(gazette-py's earlier state file format\): .*sequencer"
    ):
        decode_state_file(b'{"state": 1, "checkpoint": {"offsets": {}}}', "f.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", r"holds 0 JSON value\(s\)"),
        (b'{"in/a":1}\n', r"holds 1 JSON value\(s\): expected Gazette's JSONFileStore layout"),
        (b"{}\n{}\n{}\n{}\n", r"holds 4 JSON value\(s\)"),
        (b"{}\n{\n", "is not JSON"),
        (b"{}\nNaN\n", "is not JSON: NaN"),
        (b"\xff", "is not UTF-8"),
        (b'{"in/a":-1}\n{}\n', r": offsets\['in/a'\] is -1, expected an integer in \[0, "),
        (
            b'{}\n{}\n{"sources":{"in/a":{"read_through":"7"}}}\n',
            r"checkpoint\.sources\['in/a'\]\.read_through is \"7\"",
        ),
        (b'{}\n{}\n{"source":{}}\n', r"checkpoint has unknown key\(s\) \['source'\]"),
        (b'{}\n{}\n{"sources":{"j":{"producers":{}}}}\n', r"\.producers is \{\}, expected a list or null"),
        (
            b'{}\n{}\n{"sources":{"j":{"producers":[{"id":"AQ=="}]}}}\n',
            r"producers\[0\]\.id 01 is not a 6-byte",
        ),
        (b'{}\n{}\n{"sources":{"j":{"producers":[{"id":"!"}]}}}\n', r"producers\[0\]\.id '!' is not base64"),
        (b'{}\n{}\n{"ack_intents":{"j":7}}\n', r"ack_intents\['j'\] is 7, expected a base64 string"),
        (
            b'{}\n{}\n{"sources":{"j":{"producers":[{"id":"CgsMDQ4P","state":{"last_ack":-1}}]}}}\n',
            r"state\.last_ack is -1, expected an integer in \[0, 18446744073709551616\)",
        ),
    ],
)
def test_malformed_state_files_are_refused(text: bytes, message: str) -> None:
    with pytest.raises(ValidationError, match=f"^state.json of log x.*{message}"):
        decode_state_file(text, "state.json of log x")


def test_base64_of_producer_ids_is_standard_with_padding() -> None:
    """Go encodes []byte with StdEncoding (padded): a 6-byte id needs no padding, an intent may."""
    assert base64.b64encode(P1) == b"CgsMDQ4P"
    one = ConsumerCheckpoint(Checkpoint({}, []), {"o": b"a"})
    assert encode_state_file(0, one).splitlines()[2] == b'{"sources":{},"ack_intents":{"o":"YQ=="}}'
