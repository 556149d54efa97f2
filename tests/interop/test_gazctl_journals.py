"""Real gazctl (Gazette v0.103.0) `journals` subcommands against three gazette-py brokers.

Each test checks what gazctl did through gazette-py's own Client, and what gazette-py did through
gazctl's output: apply (YAML hierarchies, revisions, deletes), list (yaml, json, table, selectors,
--watch), append (framings and mappings), read (offsets, --tail, --from, --block, direct routing),
fragments (json, table, signed URLs, mod-time bounds), suspend, reset-head, edit and prune.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import struct
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest
import yaml
from interop.conftest import Gazctl, gazctl_for

from gazette.fragment.fragment import Codec, Fragment
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import JournalSpec, SuspendLevel, load_specs_yaml
from gazette.protocol.status import Status
from gazette.testing import wait_for

# Fixed framing (Gazette's message package): this word, then the payload length (uint32, little-endian).
FIXED_FRAME_WORD = bytes([0x66, 0x33, 0x93, 0x36])
# The statuses of an append that resumed a suspended journal before the allocator re-assigned it.
RESUMING_STATUSES = ("INSUFFICIENT_JOURNAL_BROKERS", "NO_JOURNAL_PRIMARY_BROKER")


@pytest.fixture(scope="module")
def gz(gazctl_bin, py_cluster, tmp_path_factory) -> Gazctl:
    return gazctl_for(gazctl_bin, py_cluster, str(tmp_path_factory.mktemp("gazctl")))


@pytest.fixture(scope="module")
def client(py_cluster):
    return py_cluster.client()


@pytest.fixture
def cluster(py_cluster):
    return py_cluster


def _apply(cluster, client, *specs: JournalSpec) -> None:
    client.apply_journals(specs)
    cluster.wait_for_routes([s.name for s in specs])


def _infos(client, selector: str) -> dict:
    return {i.spec.name: i for i in client.list_journals(selector)}


def _names(gz: Gazctl, selector: str) -> list[str]:
    out = json.loads(gz("journals", "list", "-l", selector, "-o", "json").stdout)
    return [j["spec"]["name"] for j in out.get("journals", [])]


def _table(text: str) -> list[list[str]]:
    """The rows of a gazctl table (its header first), cells stripped."""
    return [
        [c.strip() for c in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def _spec(client, name: str) -> JournalSpec:
    (info,) = client.list_journals(f"name={name}")
    return info.spec


def _fixed_frame(payload: bytes) -> bytes:
    return FIXED_FRAME_WORD + struct.pack("<I", len(payload)) + payload


def _sum(part: dict) -> bytes:
    return struct.pack(
        ">QQI", int(part.get("part1", 0)), int(part.get("part2", 0)), int(part.get("part3", 0))
    )


def _plant_fragment(
    cluster, journal: str, begin: int, data: bytes, mod_time: float | None = None
) -> Fragment:
    """A fragment file in the file:// store, as a broker now gone would have left it."""
    frag = Fragment(journal, begin, begin + len(data), hashlib.sha1(data).digest(), Codec.NONE)
    path = os.path.join(cluster.store[len("file://") :], frag.content_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if mod_time is not None:
        os.utime(path, (mod_time, mod_time))
    return frag


class _Lines:
    """Collects a long-running gazctl's stdout lines on a thread, for bounded waits on them."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def now(self) -> list[str]:
        while not self._queue.empty():
            self.lines.append(self._queue.get_nowait())
        return self.lines

    def close(self) -> None:
        """Ends the process (SIGTERM, then SIGKILL); the pump thread sees its stdout close."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


@pytest.fixture
def running() -> Iterator:
    started: list[_Lines] = []

    def start(proc) -> _Lines:
        started.append(_Lines(proc))
        return started[-1]

    yield start
    for lines in started:
        if lines.proc.poll() is None:
            lines.close()


# --- apply ------------------------------------------------------------------------------------------


def test_apply_yaml_hierarchy_revisions_and_delete(gz, cluster, client, tmp_path):
    """gazctl flattens Gazette's YAML hierarchy (labels as name/value lists, fragment settings pushed
    down, children overriding): our Client lists exactly those specs, R=3 ones routed over our three
    brokers. A stale revision fails the whole apply and changes nothing; `delete: true` deletes."""
    store = cluster.store

    def tree(revisions: dict[str, int] | None = None, replication: int = 3) -> str:
        rev = {n: f"\n  revision: {r}" for n, r in (revisions or {}).items()}
        return f"""
name: gzapply/
replication: {replication}
labels:
- name: app
  value: demo
- name: content-type
  value: application/x-ndjson
fragment:
  length: 4096
  compression_codec: GZIP
  stores:
  - {store}
  refresh_interval: 1m0s
  retention: 24h0m0s
  flush_interval: 1h0m0s
  path_postfix_template: static/part
children:
- name: gzapply/a{rev.get("gzapply/a", "")}
- name: gzapply/b
  labels:
  - name: app
    value: other
  - name: extra
    value: "1"
  fragment:
    compression_codec: SNAPPY{rev.get("gzapply/b", "")}
- name: gzapply/c
  replication: 1
  flags: O_RDONLY
  max_append_rate: 1000
  fragment:
    length: 8192{rev.get("gzapply/c", "")}
"""

    path = tmp_path / "specs.yaml"
    path.write_text(tree())
    gz("journals", "apply", "--specs", str(path))

    base = JournalSpec(
        name="gzapply/a", replication=3, labels={"app": "demo", "content-type": "application/x-ndjson"},
        fragment_length=4096, compression="gzip", stores=[store], refresh_interval="1m", retention="24h",
        flush_interval="1h", path_postfix_template="static/part",
    )  # fmt: skip
    expected = {
        "gzapply/a": base,
        "gzapply/b": base.replace(
            name="gzapply/b", compression="snappy",
            labels={"app": "other", "content-type": "application/x-ndjson", "extra": "1"},
        ),
        "gzapply/c": base.replace(
            name="gzapply/c", replication=1, flags="O_RDONLY", max_append_rate=1000, fragment_length=8192
        ),
    }  # fmt: skip
    infos = _infos(client, "prefix=gzapply/")
    assert {n: i.spec for n, i in infos.items()} == expected

    cluster.wait_for_routes(list(expected))
    brokers = {(h.zone, h.suffix) for h in cluster.brokers}
    infos = _infos(client, "prefix=gzapply/")
    for name in ("gzapply/a", "gzapply/b"):
        route = infos[name].route
        assert set(route.members) == brokers and 0 <= route.primary < 3
        assert set(route.endpoints) == set(cluster.broker_endpoints)
    assert len(infos["gzapply/c"].route.members) == 1

    # A stale revision of one journal fails the apply of all three; nothing changes.
    revisions = {n: i.mod_revision for n, i in infos.items()}
    stale = dict(revisions, **{"gzapply/a": revisions["gzapply/a"] - 1})
    path.write_text(tree(stale, replication=2))
    proc = gz("journals", "apply", "--specs", str(path), check=False)
    assert proc.returncode != 0
    assert "ETCD_TRANSACTION_FAILED" in proc.stderr, proc.stderr
    assert {n: (i.spec, i.mod_revision) for n, i in _infos(client, "prefix=gzapply/").items()} == {
        n: (expected[n], revisions[n]) for n in expected
    }

    # The current revisions apply.
    path.write_text(tree(revisions, replication=2))
    gz("journals", "apply", "--specs", str(path))
    infos = _infos(client, "prefix=gzapply/")
    assert {n: i.spec.replication for n, i in infos.items()} == {
        "gzapply/a": 2,
        "gzapply/b": 2,
        "gzapply/c": 1,
    }
    assert all(i.mod_revision > revisions[n] for n, i in infos.items())

    # delete: true on the parent cascades to the children listed under it (only those).
    path.write_text(
        f"name: gzapply/\ndelete: true\nchildren:\n- name: gzapply/c\n  revision: {infos['gzapply/c'].mod_revision}\n"
    )
    gz("journals", "apply", "--specs", str(path))
    assert sorted(_infos(client, "prefix=gzapply/")) == ["gzapply/a", "gzapply/b"]


# --- list -------------------------------------------------------------------------------------------


def test_list_formats_and_selectors_show_what_our_client_applied(gz, cluster, client):
    """-o json carries our specs, mod revisions and routes field for field; -o yaml is a hierarchy
    our loader flattens back into exactly our specs and revisions; the table's primary and replica
    columns are our routes; selectors (labels, sets, :prefix, exists, name, prefix=) select as ours."""
    specs = [
        cluster.journal_spec("gzlist/x", replication=3, labels={"topic": "t1", "tier": "gold"}, fragment_length=8192,
                             compression="zstandard", refresh_interval="30s"),
        cluster.journal_spec("gzlist/y", replication=1, labels={"topic": "t2"}, compression="none"),
        cluster.journal_spec("gzlist/sub/z", replication=2, labels={"topic": "t1", "tier": "silver"}),
    ]  # fmt: skip
    _apply(cluster, client, *specs)
    ours = _infos(client, "prefix=gzlist/")
    assert {n: i.spec for n, i in ours.items()} == {s.name: s for s in specs}

    def json_matches() -> bool:
        ours = _infos(client, "prefix=gzlist/")
        listed = json.loads(gz("journals", "list", "-l", "prefix=gzlist/", "-o", "json").stdout)
        assert listed["status"] == "OK"
        assert [j["spec"]["name"] for j in listed["journals"]] == sorted(ours)
        for j in listed["journals"]:
            info, spec = ours[j["spec"]["name"]], j["spec"]
            assert spec["replication"] == info.spec.replication
            assert [(lbl["name"], lbl["value"]) for lbl in spec["labels"]["labels"]] == list(info.spec.labels)
            frag = spec["fragment"]
            assert int(frag["length"]) == info.spec.fragment_length
            assert frag["compression_codec"] == info.spec.compression.name
            assert frag["stores"] == list(info.spec.stores)
            assert frag["refresh_interval"] == f"{info.spec.refresh_interval:g}s"
            assert int(j["mod_revision"]) == info.mod_revision
        # Routes may still move (the allocator balances): compare them once they agree.
        return all(
            [(m["zone"], m["suffix"]) for m in j["route"]["members"]]
            == list(ours[j["spec"]["name"]].route.members)
            and j["route"]["primary"] == ours[j["spec"]["name"]].route.primary
            and j["route"]["endpoints"] == list(ours[j["spec"]["name"]].route.endpoints)
            for j in listed["journals"]
        )

    wait_for("gazctl's JSON listing to show our routes", json_matches, timeout=20)

    hierarchy = gz("journals", "list", "-l", "prefix=gzlist/", "-o", "yaml").stdout
    tree = yaml.safe_load(hierarchy)  # hoisted: what all three share is stated once, at the root
    assert tree["name"] == "gzlist/" and tree["fragment"]["stores"] == [cluster.store]
    changes = load_specs_yaml(hierarchy)
    ours = _infos(client, "prefix=gzlist/")
    assert {c.spec.name: (c.spec, c.expect_mod_revision, c.delete) for c in changes} == {
        n: (i.spec, i.mod_revision, False) for n, i in ours.items()
    }

    def table_matches() -> bool:
        rows = _table(gz("journals", "list", "-l", "prefix=gzlist/", "--primary", "--replicas", "--rf",
                         "--stores", "-L", "tier").stdout)  # fmt: skip
        assert rows[0] == ["NAME", "RF", "PRIMARY", "REPLICAS", "STORES", "TIER"]
        ours = _infos(client, "prefix=gzlist/")
        expected = []
        for name in sorted(ours):
            info = ours[name]
            suffixes = [s for _, s in info.route.members]
            primary = suffixes[info.route.primary]
            replicas = ",".join(s for i, s in enumerate(suffixes) if i != info.route.primary)
            tier = ",".join(info.spec.labels.values_of("tier")) or "<none>"
            expected.append([name, str(info.spec.replication), primary, replicas, cluster.store, tier])
        return rows[1:] == expected

    wait_for("gazctl's table to show our primaries and replicas", table_matches, timeout=20)

    for selector, names in [
        ("topic=t1", ["gzlist/sub/z", "gzlist/x"]),
        ("prefix=gzlist/,topic in (t1, t2),!tier", ["gzlist/y"]),
        ("prefix=gzlist/,tier", ["gzlist/sub/z", "gzlist/x"]),
        ("tier:prefix=gol", ["gzlist/x"]),
        ("name:prefix=gzlist/s", ["gzlist/sub/z"]),
        ("prefix=gzlist/sub/", ["gzlist/sub/z"]),
        ("name in (gzlist/x, gzlist/y)", ["gzlist/x", "gzlist/y"]),
        ("prefix=gzlist/,topic notin (t1)", ["gzlist/y"]),
    ]:
        assert _names(gz, selector) == names, selector
        assert sorted(i.spec.name for i in client.list_journals(selector)) == names, selector


def test_list_watch_prints_a_journal_applied_after_it_started(gz, cluster, client, running):
    """`journals list --watch` prints a table per change of the selected set: first without the
    journal, then (after our Client applied it) with it."""
    watch = running(gz.popen("journals", "list", "--watch", "-l", "prefix=gzwatch/", "--rf"))
    wait_for("the first (empty) table", lambda: any("NAME" in line for line in watch.now()), timeout=20)
    assert not any("gzwatch/" in line for line in watch.now())
    client.apply_journals([cluster.journal_spec("gzwatch/new", replication=2)])
    row = wait_for(
        "gazctl's watch to print gzwatch/new",
        lambda: [r for r in _table("\n".join(watch.now())) if r[0] == "gzwatch/new"],
        timeout=20,
    )
    assert row[0] == ["gzwatch/new", "2"]
    assert watch.proc.poll() is None  # still watching
    watch.close()


# --- append and read --------------------------------------------------------------------------------


def test_append_framings_and_mappings_read_back_by_our_client(gz, cluster, client, tmp_path):
    """gazctl appends (framing none from a file, lines, lines/modulo and fixed/direct mappings) land
    in our journals exactly as given, framing headers of fixed frames retained."""
    j, k = "gzappend/j", "gzappend/k"
    _apply(cluster, client, cluster.journal_spec(j, replication=3), cluster.journal_spec(k, replication=3))

    gz("journals", "append", "-l", f"name={j}", "--framing", "lines", input="alpha\nbeta\ngamma\n")
    assert client.read_all(j) == b"alpha\nbeta\ngamma\n"

    binary = bytes(range(256)) + b"no trailing newline"
    (tmp_path / "in.bin").write_bytes(binary)
    gz("journals", "append", "-l", f"name={j}", "-i", str(tmp_path / "in.bin"))
    assert client.read_all(j) == b"alpha\nbeta\ngamma\n" + binary

    # modulo mapping: a record follows its partition key; equal keys map to the same journal, and
    # each journal keeps its records in input order.
    keyed = [(f"key-{i % 5}", f"rec-{i}") for i in range(20)]
    gz("journals", "append", "-l", "prefix=gzappend/", "--framing", "lines", "--mapping", "modulo",
       input="".join(f"{key}\n{rec}\n" for key, rec in keyed))  # fmt: skip
    got = {n: client.read_all(n) for n in (j, k)}
    assert got[j].startswith(b"alpha\nbeta\ngamma\n" + binary)
    landed = {n: got[n].removeprefix(b"alpha\nbeta\ngamma\n" + binary).decode().splitlines() for n in (j, k)}
    assert sorted(landed[j] + landed[k]) == sorted(rec for _, rec in keyed)
    for n in (j, k):
        assert landed[n] == [rec for _, rec in keyed if rec in landed[n]]
    journal_of = {rec: n for n in (j, k) for rec in landed[n]}
    for key in {key for key, _ in keyed}:
        assert len({journal_of[rec] for kk, rec in keyed if kk == key}) == 1, key

    # direct mapping, fixed framing: each record is preceded by its journal's name, and the frame
    # headers are appended with the records. gazctl v0.103.0 looks the name up with a binary search
    # whose predicate is inverted, which only finds the journal of a one-journal selection: the
    # same with a Gazette broker (our listing is in name order, as Gazette's).
    before = client.read_all(j)
    frames = [_fixed_frame(b"\x00payload\xff"), _fixed_frame(b"2")]
    gz("journals", "append", "-l", f"name={j}", "--framing", "fixed", "--mapping", "direct",
       input=b"".join(_fixed_frame(j.encode()) + f for f in frames))  # fmt: skip
    assert client.read_all(j) == before + b"".join(frames)
    assert client.list_fragments(j)[-1].end == client.read_head(j) == len(before) + len(b"".join(frames))


def test_read_prints_what_our_client_appended(gz, cluster, client, tmp_path, running):
    """`journals read` prints our appends byte for byte across a persisted fragment and the spool:
    from an --offsets file (writing --offsets-out), --tail, --from (skipping fragments persisted
    before it), routed directly to our brokers (--broker.cache.size), and with --block."""
    j = "gzread/j"
    _apply(cluster, client, cluster.journal_spec(j, replication=3, compression="gzip"))
    client.append(j, b"first\n")
    persisted = client.flush(j)
    assert persisted is not None and (persisted.begin, persisted.end) == (0, 6) and persisted.mod_time
    client.append(j, b"second\n")

    assert gz("journals", "read", "-l", f"name={j}", input=b"").stdout == b"first\nsecond\n"

    offsets, out = tmp_path / "offsets.json", tmp_path / "offsets-out.json"
    offsets.write_text(json.dumps({j: 3}))
    got = gz(
        "journals", "read", "-l", f"name={j}", "--offsets", str(offsets), "--offsets-out", str(out), input=b""
    )
    assert got.stdout == b"st\nsecond\n"
    assert json.loads(out.read_text()) == {j: 13} and client.read_head(j) == 13

    got = gz("journals", "read", "-l", f"name={j}", "--tail", "--offsets-out", str(out), input=b"")
    assert got.stdout == b"" and json.loads(out.read_text()) == {j: 13}

    got = gz("journals", "read", "-l", f"name={j}", "--from", str(persisted.mod_time + 1), input=b"")
    assert got.stdout == b"second\n"  # the spool has no mod time: never skipped

    got = gz("journals", "read", "-l", f"name={j}", "--broker.cache.size=256", input=b"")
    assert got.stdout == b"first\nsecond\n"

    block = running(gz.popen("journals", "read", "-l", f"name={j}", "--block"))
    wait_for(
        "the blocking read to print the journal",
        lambda: block.now()[:2] == ["first", "second"],
        timeout=20,
    )
    client.append(j, b"third\n")
    wait_for("the blocking read to print our next append", lambda: block.now() == ["first", "second", "third"],
             timeout=20)  # fmt: skip
    assert block.proc.poll() is None
    block.close()


# --- fragments --------------------------------------------------------------------------------------


def test_fragments_list_what_our_broker_indexes(gz, cluster, client):
    """`journals fragments` (-o json, the table, --url-ttl, --from/--to) lists the fragments our
    list_fragments returns: the same offsets, SHA1 sums, codecs, stores, mod times and postfixes."""
    j = "gzfrag/j"
    _apply(cluster, client, cluster.journal_spec(j, replication=3, compression="gzip",
                                                 path_postfix_template="kind=test"))  # fmt: skip
    for data in (b"one\n", b"two\n"):
        client.append(j, data)
        client.flush(j)
    client.append(j, b"three\n")
    ours = client.list_fragments(j)
    assert [(f.begin, f.end, bool(f.backing_store)) for f in ours] == [
        (0, 4, True),
        (4, 8, True),
        (8, 14, False),
    ]

    def listed(*args: str) -> list[dict]:
        text = gz("journals", "fragments", "-l", f"name={j}", "-o", "json", *args).stdout
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def as_fragment(spec: dict) -> Fragment:
        return Fragment(
            journal=spec["journal"], begin=spec.get("begin", 0), end=spec.get("end", 0), sum=_sum(spec.get("sum", {})),
            codec=Codec(spec.get("compression_codec", 0)), backing_store=spec.get("backing_store", ""),
            mod_time=spec.get("mod_time", 0), path_postfix=spec.get("path_postfix", ""),
        )  # fmt: skip

    assert [as_fragment(f["spec"]) for f in listed()] == ours
    assert all(
        f.sha1 == hashlib.sha1(d).hexdigest()
        for f, d in zip(ours, (b"one\n", b"two\n", b"three\n"), strict=True)
    )

    signed = listed("--url-ttl", "1m")
    for f, entry in zip(ours, signed, strict=True):
        if f.backing_store:
            # Gazette's file:// store signs its raw path; ours percent-quotes it (kind%3Dtest): the same path.
            assert urllib.parse.unquote(entry["signed_url"]) == f"{cluster.store}{f.content_path}"
            assert os.path.exists(os.path.join(cluster.store[len("file://") :], f.content_path))
            assert f.path_postfix == "kind=test"
        else:
            assert "signed_url" not in entry

    rows = _table(gz("journals", "fragments", "-l", f"name={j}").stdout)
    assert rows[0] == ["JOURNAL", "OFFSET", "LENGTH", "PERSISTED", "SHA 1", "COMPRESSION"]
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows[1:]] == [
        (j, str(f.begin), f"{f.length} B", f.sha1[:12] + "...", f.codec.name) for f in ours
    ]
    assert [bool(r[3]) for r in rows[1:]] == [bool(f.mod_time) for f in ours]

    # Gazette's bounds are inclusive: --to T lists fragments persisted in second T (never spooled ones).
    t = ours[0].mod_time
    assert [as_fragment(f["spec"]) for f in listed("--from", str(t), "--to", str(t))] == [
        f for f in ours if f.mod_time == t
    ]
    assert [as_fragment(f["spec"]) for f in listed("--from", str(ours[1].mod_time + 1))] == [ours[2]]

    health = gz("journals", "store-health", cluster.store)
    assert health.stdout.strip() == f"Fragment store {cluster.store} is healthy"


# --- suspend and reset-head -------------------------------------------------------------------------


def test_suspend_and_resume(gz, cluster, client):
    """`journals suspend`: a never-written journal is fully suspended (no route); one with content
    persisted within its flush interval is in use and stays (Gazette's SUSPEND_IF_FLUSHED); --force
    partially suspends it at its head, one replica left. Appends resume both, as Gazette's do."""
    idle, busy = "gzsuspend/idle", "gzsuspend/busy"
    _apply(
        cluster, client, cluster.journal_spec(idle, replication=3), cluster.journal_spec(busy, replication=3)
    )

    gz("journals", "suspend", "-l", f"name={idle}")
    spec = _spec(client, idle)
    assert (spec.suspend_level, spec.suspend_offset) == (SuspendLevel.FULL, 0)
    wait_for(
        "the suspended journal to lose its route",
        lambda: not _infos(client, f"name={idle}")[idle].route.members,
    )
    rows = _table(gz("journals", "list", "-l", f"name={idle}", "--primary", "--replicas").stdout)
    assert rows[1] == [idle, "<none> <S>", ""]
    assert yaml.safe_load(gz("journals", "list", "-l", f"name={idle}", "-o", "yaml").stdout)["suspend"] == {
        "level": "FULL"
    }
    client.append(idle, b"wake\n")  # resumes (our Client retries while the allocator re-assigns)
    assert _spec(client, idle).suspend_level == SuspendLevel.NONE
    assert client.read_all(idle) == b"wake\n"

    client.append(busy, b"x\n")
    client.flush(busy)
    gz("journals", "suspend", "-l", f"name={busy}")
    assert _spec(client, busy).suspend_level == SuspendLevel.NONE  # persisted within 24 h: in use
    assert len(_infos(client, f"name={busy}")[busy].route.members) == 3

    gz("journals", "suspend", "-l", f"name={busy}", "--force")
    spec = _spec(client, busy)
    assert (spec.suspend_level, spec.suspend_offset) == (SuspendLevel.PARTIAL, 2)
    wait_for("the partially suspended journal to keep one replica",
             lambda: len(_infos(client, f"name={busy}")[busy].route.members) == 1)  # fmt: skip
    rows = _table(gz("journals", "list", "-l", f"name={busy}", "--primary", "--replicas").stdout)
    assert rows[1][1].endswith(" <S>") and rows[1][2] == ""

    # gazctl's append resumes the journal; like Gazette's broker, ours answers it at once, before
    # the allocator has brought the replicas back (gazctl does not retry).
    first = gz("journals", "append", "-l", f"name={busy}", input="resumed\n", check=False)
    if first.returncode != 0:
        assert any(s in first.stderr for s in RESUMING_STATUSES), first.stderr
    assert _spec(client, busy).suspend_level == SuspendLevel.NONE
    cluster.wait_for_routes([busy])
    gz("journals", "append", "-l", f"name={busy}", input="after\n")
    assert client.read_all(busy) == b"x\n" + (b"resumed\n" if first.returncode == 0 else b"") + b"after\n"


def test_reset_head_resyncs_past_fragments_of_lost_brokers(gz, cluster, client):
    """A fragment beyond our write head appears in the store (written by brokers since lost): appends
    are refused (INDEX_HAS_GREATER_OFFSET) until `journals reset-head` appends nothing at the
    indexed head, after which gazctl and our Client append at it. On a consistent journal it is a
    no-op. Once that fragment was persisted longer than the flush interval ago, the journal is idle:
    `journals suspend` partially suspends it."""
    j, old = "gzreset/j", "gzreset/idle"
    _apply(cluster, client, *(cluster.journal_spec(n, replication=3, compression="none", refresh_interval="1s",
                                                   flush_interval="1h") for n in (j, old)))  # fmt: skip
    client.append(j, b"abc")
    client.flush(j)
    planted = _plant_fragment(cluster, j, 3, b"defgh")
    wait_for(
        "the planted fragment in our index", lambda: planted.end in [f.end for f in client.list_fragments(j)]
    )
    with pytest.raises(GazetteError) as exc:
        client.append(j, b"refused")
    assert exc.value.status == Status.INDEX_HAS_GREATER_OFFSET

    gz("journals", "reset-head", "-l", f"name={j}")
    gz("journals", "append", "-l", f"name={j}", input="ij")
    assert client.append(j, b"kl").begin == 10
    assert client.read_all(j) == b"abcdefghijkl"
    assert gz("journals", "read", "-l", f"name={j}", input=b"").stdout == b"abcdefghijkl"

    gz("journals", "reset-head", "-l", f"name={j}")  # consistent already: nothing changes
    assert client.read_head(j) == 12 and client.append(j, b"m").begin == 12

    planted = _plant_fragment(cluster, old, 0, b"long ago\n", mod_time=time.time() - 2 * 3600)
    wait_for(
        "the old fragment in our index", lambda: planted.end in [f.end for f in client.list_fragments(old)]
    )
    gz("journals", "reset-head", "-l", f"name={old}")
    gz("journals", "suspend", "-l", f"name={old}")
    spec = _spec(client, old)
    assert (spec.suspend_level, spec.suspend_offset) == (SuspendLevel.PARTIAL, planted.end)


# --- edit and prune ---------------------------------------------------------------------------------


def test_edit_applies_what_the_editor_changed(gz, cluster, client, tmp_path, monkeypatch):
    """`journals edit` shows our spec (and revision) in $EDITOR and applies the edited YAML."""
    j = "gzedit/j"
    _apply(cluster, client, cluster.journal_spec(j, replication=3, labels={"team": "a"}))
    before = _infos(client, f"name={j}")[j]
    shown = tmp_path / "shown.yaml"
    editor = tmp_path / "editor.sh"
    editor.write_text(
        f'#!/bin/sh\ncp "$1" {shown}\nsed -i -e "s/^replication: 3$/replication: 2/" -e "s/value: a$/value: b/" "$1"\n'
    )
    editor.chmod(0o755)
    monkeypatch.delenv("GAZ_EDITOR", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))

    gz("journals", "edit", "-l", f"name={j}", input="")
    (change,) = load_specs_yaml(
        "\n".join(line for line in shown.read_text().splitlines() if not line.startswith("#"))
    )
    assert (change.spec, change.expect_mod_revision) == (before.spec, before.mod_revision)
    after = _infos(client, f"name={j}")[j]
    assert after.spec == before.spec.replace(replication=2, labels={"team": "b"})
    assert after.mod_revision > before.mod_revision


def _log_records(stderr: str, msg: str) -> list[dict[str, str]]:
    """The fields of gazctl's (logrus) log lines with message `msg`."""
    return [
        {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}
        for line in stderr.splitlines()
        if f'msg="{msg}"' in line
    ]


def test_prune_dry_run_selects_fragments_older_than_retention(gz, cluster, client):
    """`journals prune --dry-run` picks, from our ListFragments, the persisted fragments older than
    each journal's retention (all of them at retention 0, none within 1h; never the spool) and
    removes nothing. (A real prune cannot be run here: gazctl v0.103.0 has no way to set the root of
    file:// stores, so it removes under /dev/null/must/configure/file/store/root whatever the broker.)"""
    now, keep = "gzprune/now", "gzprune/keep"
    _apply(
        cluster, client, cluster.journal_spec(now, replication=3), cluster.journal_spec(keep, retention="1h")
    )
    for j in (now, keep):
        for data in (b"old-1\n", b"old-2\n"):
            client.append(j, data)
            client.flush(j)
        client.append(j, b"spooled\n")
    ours = {j: client.list_fragments(j) for j in (now, keep)}
    assert all([bool(f.backing_store) for f in frags] == [True, True, False] for frags in ours.values())

    dry = gz("journals", "prune", "-l", "prefix=gzprune/", "--dry-run", "--log.level=info").stderr
    pruned = _log_records(dry, "pruning fragment")
    assert sorted((r["journal"], r["name"], int(r["mod"]), int(r["size"])) for r in pruned) == sorted(
        (now, f.content_name, f.mod_time, f.length) for f in ours[now] if f.backing_store
    )
    aged = {
        r["journal"]: (int(r["aged"]), int(r["total"])) for r in _log_records(dry, "fetched aged fragments")
    }
    assert aged == {now: (2, 3), keep: (0, 3)}
    (done,) = _log_records(dry, "finished pruning all journals")
    assert (done["fragmentsTotal"], done["fragmentsPruned"], done["journalsTotal"]) == ("6", "2", "2")
    assert {j: client.list_fragments(j) for j in (now, keep)} == ours
    for f in ours[now][:2]:
        assert os.path.exists(os.path.join(cluster.store[len("file://") :], f.content_path))
