"""Fragment stores written by one side and read by the other: real Gazette (`make peers`) and gazette-py
over one file:// directory and moto's S3 server (over HTTP), with the same journal specs on both.

1. Gazette writes: two Gazette brokers take JSON messages from our Publisher (committed ones, transactions
   with ACKs, a rolled-back transaction per round) into journals of every codec whose 1 KiB fragments
   roll as they fill; `gazctl journals suspend --force` rolls and persists the last spool. With every
   Gazette broker gone, the store is read (a) by gazette-py's store code alone (listing, verified reads,
   the committed messages decided over the bytes), (b) through gazette-py brokers given the same specs
   (they index Gazette's fragments, serve reads below their head, refuse appends until reset-head moves
   the head to the persisted end) and (c) by fragments_io's Spark source (committed messages).
2. gazette-py writes and flushes fragments of every codec; Gazette brokers given the same specs list them
   (`gazctl journals fragments`: same offsets, SHA1s, codecs, stores, mod times), `gazctl journals read`
   prints the exact bytes, and appends work once `gazctl journals reset-head` re-synced the head.
3. Path postfixes in Gazette's template syntax render to the same directories on both sides and are
   indexed from either side's writes.

The store URLs every journal uses work unchanged for both kinds of broker: `file:///abs/dir/` (Gazette
brokers run with --broker.file-root=/), `file:///abs/dir/?find=rewrite/&replace=moved/` (Gazette's path
rewrite), `s3://bucket/prefix/?endpoint=http://127.0.0.1:PORT&region=us-east-1` (a custom endpoint means
path-style addressing on both sides), the same with `Endpoint=`, `REGION=`, `acl=` (names match
case-insensitively) and `s3://bucket/?endpoint=...` (no key prefix; the region comes from AWS_REGION). Credentials come from the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, which Gazette
brokers inherit as subprocesses).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import grpc
import pytest
from interop.conftest import Gazctl, gazctl_for, start_cluster
from spark_source import conftest as spark_conftest

from fragments_io.committed import committed_reference
from gazette.fragment.content import list_fragments, open_fragment
from gazette.fragment.fragment import Fragment
from gazette.local import LocalCluster
from gazette.message import Publisher, ReadCommitted
from gazette.message.framing import framing_for
from gazette.message.sequencer import QueueOutcome
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status
from gazette.testing import make_bucket, wait_for

spark = spark_conftest.spark  # the Spark tests' session fixture: one SparkSession (local[2]) per session

NDJSON = "application/x-ndjson"
CODECS = ("SNAPPY", "GZIP", "ZSTANDARD", "NONE")
# Gazette's CompressionCodec.ToExtension: what its content names end in.
EXTENSIONS = {
    "NONE": ".raw",
    "GZIP": ".gz",
    "ZSTANDARD": ".zst",
    "SNAPPY": ".sz",
    "GZIP_OFFLOAD_DECOMPRESSION": "",
}
FRAGMENT_LENGTH = 1024  # Gazette's minimum: spools roll at the first append after 1 KiB
ROUNDS = 4
PAD = "x" * 100
COMMITTED_PER_ROUND = ("p0", "t1.0", "t1.1", "t1.2", "p1")
POSTFIX_TEMPLATE = 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}'
REWRITE_FIND, REWRITE_REPLACE = "rewrite/", "moved/"
S3_PREFIX = "prefix/"
WAIT_S = 60.0
PERSIST_WAIT_S = 90.0


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


# --- stores and journals ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stores:
    root: Path  # the file store's directory
    file: str
    rewrite: str  # the same directory through Gazette's find/replace path rewrite
    s3_bucket: str
    s3: str  # a key prefix and an explicit region
    s3_caps: str  # the same bucket and prefix, argument names spelled in other cases
    s3_root_bucket: str
    s3_root: str  # the bucket's root, the region from AWS_REGION
    moto: str

    def raw_names(self, store_url: str, journal: str) -> list[str]:
        """The object paths under `journal`'s directory as the file system or S3 holds them, read without
        gazette-py's store code (the rewrite applied by hand)."""
        if store_url.startswith("file://"):
            name = journal.replace(REWRITE_FIND, REWRITE_REPLACE, 1) if store_url == self.rewrite else journal
            top = self.root / name
            return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())
        bucket, prefix = self.bucket_and_prefix(store_url)
        listed = self.s3_client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}{journal}/")
        return sorted(o["Key"][len(prefix) + len(journal) + 1 :] for o in listed.get("Contents", ()))

    def bucket_and_prefix(self, store_url: str) -> tuple[str, str]:
        return (self.s3_root_bucket, "") if store_url == self.s3_root else (self.s3_bucket, S3_PREFIX)

    def content_encoding(self, store_url: str, journal: str, rel: str) -> str | None:
        bucket, prefix = self.bucket_and_prefix(store_url)
        return (
            self.s3_client().head_object(Bucket=bucket, Key=f"{prefix}{journal}/{rel}").get("ContentEncoding")
        )

    def s3_client(self):  # type: ignore[no-untyped-def]
        return boto3.client("s3", endpoint_url=self.moto, region_name="us-east-1")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, moto_server: str) -> Iterator[Stores]:
    """One file directory and two moto buckets. AWS_REGION is what Gazette's SDK reads for a URL
    without `region=` (the session's dummy credentials are in the environment already)."""
    env = pytest.MonkeyPatch()
    env.setenv("AWS_REGION", "us-east-1")
    root = tmp_path_factory.mktemp("fragment-stores")
    bucket, root_bucket = f"b-{uuid.uuid4().hex[:16]}", f"r-{uuid.uuid4().hex[:16]}"
    make_bucket(moto_server, bucket)
    make_bucket(moto_server, root_bucket)
    yield Stores(
        root=root,
        file=f"file://{root}/",
        rewrite=f"file://{root}/?find={REWRITE_FIND}&replace={REWRITE_REPLACE}",
        s3_bucket=bucket,
        s3=f"s3://{bucket}/{S3_PREFIX}?endpoint={moto_server}&region=us-east-1",
        s3_caps=f"s3://{bucket}/{S3_PREFIX}?Endpoint={moto_server}&REGION=us-east-1&acl=bucket-owner-full-control",
        s3_root_bucket=root_bucket,
        s3_root=f"s3://{root_bucket}/?endpoint={moto_server}",
        moto=moto_server,
    )
    env.undo()


def _spec(writer: str, name: str, store: str, codec: str, template: str = "") -> JournalSpec:
    return JournalSpec(
        name=f"{writer}/{name}",
        replication=1,  # a suspension keeps its one broker: the primary persists the rolled spool at once
        labels={"content-type": NDJSON, "writer": writer},
        fragment_length=FRAGMENT_LENGTH,
        compression=codec,
        stores=[store],
        refresh_interval=1,
        path_postfix_template=template,
    )


def journal_specs(writer: str, stores: Stores) -> list[JournalSpec]:
    """Every codec on the file store and on S3 (GZIP_OFFLOAD_DECOMPRESSION only there: both sides refuse it
    first on a file store), a bucket-root S3 store without `region=`, S3 arguments named in other cases
    (Gazette matches them case-insensitively) and a rewriting file store."""
    specs = [_spec(writer, f"file/{c.lower()}", stores.file, c) for c in CODECS]
    specs += [_spec(writer, f"s3/{c.lower()}", stores.s3, c) for c in (*CODECS, "GZIP_OFFLOAD_DECOMPRESSION")]
    specs.append(_spec(writer, "s3root/none", stores.s3_root, "NONE"))
    specs.append(_spec(writer, "s3caps/zstandard", stores.s3_caps, "ZSTANDARD"))
    specs.append(_spec(writer, f"{REWRITE_FIND}snappy", stores.rewrite, "SNAPPY"))
    return specs


def postfix_spec(writer: str, stores: Stores) -> JournalSpec:
    return _spec(writer, "postfix/snappy", stores.file, "SNAPPY", POSTFIX_TEMPLATE)


def apply_on_the_wire(cluster: LocalCluster, specs: list[JournalSpec]) -> None:
    """Applies specs without our client's validation (Gazette brokers validate them themselves)."""
    req = pb.ApplyRequest(
        changes=[pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=s.to_proto()) for s in specs]
    )
    with grpc.insecure_channel(cluster.broker_endpoints[0].removeprefix("http://")) as channel:
        resp = pb_grpc.JournalStub(channel).Apply(req, timeout=WAIT_S)
    assert resp.status == pb.OK, pb.Status.Name(resp.status)


# --- writing and reading messages ----------------------------------------------------------------------


def publish_rounds(client, journals: list[str], flush=None) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """ROUNDS rounds per journal, each append its own: a committed message, a transaction of three ACKed,
    a transaction of two rolled back (its producer "restarts" and re-appends its previous ACK), another
    committed message. `flush(journal)` ends each round. Returns each journal's committed keys."""
    txn, plain = Publisher(client), Publisher(client)

    def message(journal: str, key: str) -> dict:
        return {"j": journal, "k": key, "pad": PAD}

    try:
        for r in range(ROUNDS):
            for j in journals:
                plain.publish_committed(j, message(j, f"{r}.p0"))
            plain.flush(WAIT_S)
            for j in journals:
                for i in range(3):
                    txn.publish_uncommitted(j, message(j, f"{r}.t1.{i}"))
            txn.flush(WAIT_S)
            acks = txn.build_ack_intents()
            for j, ack in acks:
                client.append(j, ack)
            for j in journals:
                for i in range(2):
                    txn.publish_uncommitted(j, message(j, f"{r}.t2.{i}"))
            txn.flush(WAIT_S)
            assert sorted(j for j, _ in txn.build_ack_intents()) == sorted(journals)  # never appended ...
            for j, ack in acks:
                client.append(j, ack)  # ... the restarted producer rolls t2 back with its last ACK
            for j in journals:
                plain.publish_committed(j, message(j, f"{r}.p1"))
            plain.flush(WAIT_S)
            for j in journals:
                if flush is not None:
                    flush(j)
    finally:
        txn.close(WAIT_S)
        plain.close(WAIT_S)
    return {j: [f"{r}.{k}" for r in range(ROUNDS) for k in COMMITTED_PER_ROUND] for j in journals}


def read_committed(client, journal: str) -> tuple[list[str], int]:  # type: ignore[no-untyped-def]
    """The keys ReadCommitted delivers (ACKs left out), and the rollbacks its sequencer saw."""
    reader = ReadCommitted(client, journal, skip_acks=True)
    keys = [e.message["k"] for e in reader]
    return keys, reader.sequencer.queued[("ACK_TXN", QueueOutcome.ACK_ROLLBACK)]


def committed_keys_of(journal: str, content: bytes) -> list[str]:
    """The committed messages' keys decided over a journal's bytes (fragments_io's reference)."""
    decoder = framing_for(NDJSON).decoder(journal, 0)
    envelopes = decoder.feed(content)
    decoder.close()
    return [e.message["k"] for e in committed_reference(envelopes)]


def store_fragments(store_url: str, journal: str) -> list[Fragment]:
    return asyncio.run(list_fragments(store_url, journal))


def covering(fragments: list[Fragment], head: int) -> bool:
    """Whether `fragments` (sorted) are contiguous from offset 0 to `head`, none overlapping."""
    return (
        bool(fragments)
        and fragments[0].begin == 0
        and fragments[-1].end == head
        and all(a.end == b.begin for a, b in zip(fragments, fragments[1:], strict=False))
    )


def persisted_through(store_url: str, journal: str, head: int) -> list[Fragment] | None:
    """The journal's fragments in the store once they cover [0, head), else None."""
    fragments = store_fragments(store_url, journal)
    return fragments if covering(fragments, head) else None


def identity(f: Fragment) -> tuple:
    return f.journal, f.begin, f.end, f.sha1, f.codec.name, f.backing_store, f.path_postfix, f.mod_time


@dataclasses.dataclass
class Written:
    """What one side wrote: specs, each journal's bytes and committed keys, its persisted fragments."""

    specs: dict[str, JournalSpec]
    content: dict[str, bytes]
    committed: dict[str, list[str]]
    fragments: dict[str, list[Fragment]]
    postfix_error: str = ""  # why the postfix journal could not be written, if it could not

    @property
    def names(self) -> list[str]:
        return [n for n, s in self.specs.items() if not s.path_postfix_template]


# --- 1. Gazette writes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gazette_written(gazette_bin: str, gazctl_bin: str, stores: Stores, tmp_path_factory) -> Written:
    """Two Gazette brokers write every journal, persist their last spools (suspend --force) and are
    stopped once the store holds fragments covering each head."""
    specs = [*journal_specs("gazette", stores), postfix_spec("gazette", stores)]
    names = [s.name for s in specs]
    cluster = start_cluster(["gazette", "gazette"], store=stores.file)
    try:
        apply_on_the_wire(cluster, specs)
        cluster.wait_for_routes(names)
        client = cluster.client()
        committed = publish_rounds(client, names)
        heads = {n: client.read_head(n) for n in names}
        content = {n: client.read_all(n) for n in names}
        for n in names:
            assert read_committed(client, n) == (committed[n], ROUNDS), f"{n} as Gazette serves it"
        # A forced suspension rolls the spool (its content is under 1 KiB) and its primary persists it.
        gazctl = gazctl_for(gazctl_bin, cluster, str(tmp_path_factory.mktemp("gazctl")))
        gazctl("journals", "suspend", "-l", "writer=gazette", "--force")
        fragments = {
            s.name: wait_for(
                f"Gazette's fragments of {s.name} covering [0, {heads[s.name]}) in {s.stores[0]}",
                lambda s=s: persisted_through(s.stores[0], s.name, heads[s.name]),
                PERSIST_WAIT_S,
            )
            for s in specs
        }
    finally:
        cluster.close()
    assert all(len(content[n]) == heads[n] for n in names)
    return Written({s.name: s for s in specs}, content, committed, fragments)


def test_gazette_fragments_read_from_the_store_alone(gazette_written: Written, stores: Stores) -> None:
    """(a) No broker: gazette-py's store code lists Gazette's objects under their exact names, reads
    each one verified (length, SHA1), and the bytes decide the committed messages."""
    w = gazette_written
    for name in w.names:
        spec, frags = w.specs[name], w.fragments[name]
        store = spec.stores[0]
        assert len(frags) >= 3, f"{name}: spools rolled at {FRAGMENT_LENGTH} bytes ({frags})"
        assert {f.codec.name for f in frags} == {spec.compression.name}
        ext = EXTENSIONS[spec.compression.name]
        assert stores.raw_names(store, name) == sorted(f.content_name for f in frags)
        assert all(
            re.fullmatch(rf"[0-9a-f]{{16}}-[0-9a-f]{{16}}-[0-9a-f]{{40}}{re.escape(ext)}", f.content_name)
            for f in frags
        )
        if store.startswith("s3://"):  # Gazette asks S3 to mark only offloaded gzip as encoded
            want = "gzip" if spec.compression.name == "GZIP_OFFLOAD_DECOMPRESSION" else None
            assert {stores.content_encoding(store, name, f.content_name) for f in frags} == {want}, name
        content = b"".join(b"".join(open_fragment(f)) for f in frags)
        assert content == w.content[name], name
        assert committed_keys_of(name, content) == w.committed[name], name


@pytest.fixture(scope="module")
def py_cluster(gazette_written: Written, stores: Stores) -> Iterator[LocalCluster]:
    """Two gazette-py brokers over the same stores, started after every Gazette broker of
    `gazette_written` is gone; given Gazette's journal specs unchanged."""
    cluster = start_cluster(["gazette-py", "gazette-py"], store=stores.file)
    try:
        client = cluster.client()
        client.apply_journals([gazette_written.specs[n] for n in gazette_written.names])
        try:
            client.apply_journals([s for s in gazette_written.specs.values() if s.path_postfix_template])
        except ValidationError as exc:
            gazette_written.postfix_error = str(exc)
        yield cluster
    finally:
        cluster.close()


def test_our_brokers_index_and_serve_gazette_fragments(
    py_cluster: LocalCluster, gazette_written: Written
) -> None:
    """(b) Our brokers list exactly Gazette's fragments, report the persisted end as the head, serve
    every byte and the committed messages; appends are refused (INDEX_HAS_GREATER_OFFSET, as by
    Gazette) until reset_head re-syncs at the persisted end, where the next message then lands."""
    w = gazette_written
    client = py_cluster.client()
    py_cluster.wait_for_routes(w.names)
    for name in w.names:
        head = w.fragments[name][-1].end
        assert [identity(f) for f in client.list_fragments(name)] == [identity(f) for f in w.fragments[name]]
        assert client.read_head(name) == head
        assert client.read_all(name) == w.content[name], name
        assert read_committed(client, name) == (w.committed[name], ROUNDS), name
        with pytest.raises(GazetteError) as refused:
            client.append(name, b'{"k": "unsynced"}\n')
        assert refused.value.status == Status.INDEX_HAS_GREATER_OFFSET
        assert client.reset_head(name) == head
    publisher = Publisher(client)
    try:
        for name in w.names:
            publisher.publish_committed(name, {"j": name, "k": "after-reset", "pad": PAD})
        publisher.flush(WAIT_S)
    finally:
        publisher.close(WAIT_S)
    for name in w.names:
        assert client.read_head(name) > w.fragments[name][-1].end
        assert read_committed(client, name)[0] == [*w.committed[name], "after-reset"], name


def test_fragments_io_reads_gazette_written_stores(spark, gazette_written: Written, stores: Stores) -> None:
    """(c) Spark over the bare stores (no etcd, no broker): exactly the committed messages, in order."""
    import fragments_io

    w = gazette_written
    for store, prefix in ((stores.file, "gazette/file/"), (stores.s3, "gazette/s3/")):
        df = fragments_io.read_committed(spark, store=store, journals=prefix)
        got: dict[str, list[tuple[int, str]]] = {}
        for row in df.select("journal", "begin", "k").collect():
            got.setdefault(row.journal, []).append((row.begin, row.k))
        want = {n: w.committed[n] for n in w.names if n.startswith(prefix)}
        assert {j: [k for _, k in sorted(rows)] for j, rows in got.items()} == want


# --- 2. gazette-py writes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def py_written(py_cluster: LocalCluster, stores: Stores, gazette_written: Written) -> Written:
    """Our brokers write every journal, flushing each round's spool (client.flush)."""
    client = py_cluster.client()
    specs = journal_specs("py", stores)
    postfix = postfix_spec("py", stores)
    client.apply_journals(specs)
    postfix_error = ""
    try:
        client.apply_journals([postfix])
        specs.append(postfix)
    except ValidationError as exc:
        postfix_error = str(exc)
    names = [s.name for s in specs]
    py_cluster.wait_for_routes(names)
    committed = publish_rounds(client, names, flush=client.flush)
    content = {n: client.read_all(n) for n in names}
    fragments = {n: client.list_fragments(n) for n in names}
    for n in names:
        assert all(f.backing_store for f in fragments[n]) and covering(fragments[n], len(content[n])), n
        assert read_committed(client, n) == (committed[n], ROUNDS), n
    return Written({s.name: s for s in specs}, content, committed, fragments, postfix_error)


@pytest.fixture(scope="module")
def gazette_reader(gazette_bin: str, gazctl_bin: str, py_written: Written, stores: Stores, tmp_path_factory):
    """Two Gazette brokers given the specs of the journals gazette-py wrote, and gazctl against them."""
    cluster = start_cluster(["gazette", "gazette"], store=stores.file)
    try:
        apply_on_the_wire(cluster, list(py_written.specs.values()))
        cluster.wait_for_routes(list(py_written.specs))
        yield cluster, gazctl_for(gazctl_bin, cluster, str(tmp_path_factory.mktemp("gazctl")))
    finally:
        cluster.close()


def gazctl_fragments(gazctl: Gazctl, journal: str) -> list[tuple]:
    """`gazctl journals fragments -o json`, as identity() tuples."""
    out = []
    for line in gazctl("journals", "fragments", "-l", f"name={journal}", "-o", "json").stdout.splitlines():
        spec = json.loads(line)["spec"]
        s = spec.get("sum", {})
        digest = (s.get("part1", 0).to_bytes(8, "big") + s.get("part2", 0).to_bytes(8, "big")
                  + s.get("part3", 0).to_bytes(4, "big")).hex()  # fmt: skip
        codec = pb.CompressionCodec.Name(spec.get("compression_codec", 0))
        out.append((spec["journal"], spec.get("begin", 0), spec["end"], digest, codec, spec["backing_store"],
                    spec.get("path_postfix", ""), spec.get("mod_time", 0)))  # fmt: skip
    return out


def test_gazette_indexes_and_reads_our_fragments(gazette_reader, py_written: Written, stores: Stores) -> None:
    """Gazette lists our objects with our offsets, SHA1s, codecs and mod times, reads back the exact bytes
    (its broker decoding every codec), serves ReadCommitted, and appends after reset-head."""
    cluster, gazctl = gazette_reader
    w = py_written
    client = cluster.client()
    for name in w.names:
        spec, frags = w.specs[name], w.fragments[name]
        assert len(frags) >= ROUNDS, name
        assert stores.raw_names(spec.stores[0], name) == sorted(f.content_name for f in frags)
        if spec.stores[0].startswith("s3://"):
            want = "gzip" if spec.compression.name == "GZIP_OFFLOAD_DECOMPRESSION" else None
            assert {stores.content_encoding(spec.stores[0], name, f.content_name) for f in frags} == {want}
        assert gazctl_fragments(gazctl, name) == [identity(f) for f in frags]
        assert gazctl("journals", "read", "-l", f"name={name}", input=b"").stdout == w.content[name], name
        assert read_committed(client, name) == (w.committed[name], ROUNDS), name
        with pytest.raises(GazetteError) as refused:
            client.append(name, b'{"k": "unsynced"}\n')
        assert refused.value.status == Status.INDEX_HAS_GREATER_OFFSET
    gazctl("journals", "reset-head", "-l", "writer=py")
    for name in w.names:
        head = len(w.content[name])
        assert client.append(name, b'{"k": "after-reset"}\n').begin == head
        assert client.read_all(name, head) == b'{"k": "after-reset"}\n'


# --- 3. path postfixes ----------------------------------------------------------------------------------


def test_path_postfix_templates_render_and_index_alike(
    gazette_written: Written, py_cluster: LocalCluster, py_written: Written, gazette_reader, stores: Stores
) -> None:
    """`date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}` puts each side's fragments under the same
    `date=YYYY-MM-DD/` directory (the UTC day of the spool's first append); each side indexes and reads the
    other's postfixed fragments."""
    assert not gazette_written.postfix_error and not py_written.postfix_error
    _cluster, gazctl = gazette_reader
    for writer, w in (("gazette", gazette_written), ("py", py_written)):
        name = postfix_spec(writer, stores).name
        frags = w.fragments[name]
        assert len(frags) >= 3
        for f in frags:
            assert re.fullmatch(r"date=\d{4}-\d{2}-\d{2}", f.path_postfix), f
            day = dt.datetime.strptime(f.path_postfix[5:], "%Y-%m-%d").date()
            persisted = dt.datetime.fromtimestamp(f.mod_time, dt.UTC).date()
            assert persisted - dt.timedelta(days=1) <= day <= persisted  # first append <= persistence
        assert stores.raw_names(stores.file, name) == sorted(
            f"{f.path_postfix}/{f.content_name}" for f in frags
        )
    # Gazette's postfixed fragments, through our brokers.
    client = py_cluster.client()
    name = postfix_spec("gazette", stores).name
    assert [identity(f) for f in client.list_fragments(name)] == [
        identity(f) for f in gazette_written.fragments[name]
    ]
    assert client.read_all(name) == gazette_written.content[name]
    # Ours, through Gazette's.
    name = postfix_spec("py", stores).name
    assert gazctl_fragments(gazctl, name) == [identity(f) for f in py_written.fragments[name]]
    assert gazctl("journals", "read", "-l", f"name={name}", input=b"").stdout == py_written.content[name]
