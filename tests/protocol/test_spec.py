"""JournalSpec: normalisation, per-field validation (reference 1.2), proto and dict forms, gazctl YAML."""

import textwrap

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.fragment.fragment import Codec
from gazette.protocol import JournalSpec, LabelSet, ValidationError
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import (
    JournalFlag,
    SpecChange,
    SuspendLevel,
    dump_specs_yaml,
    load_specs_yaml,
    validate_store_url,
)

NAME = "examples/clicks/part-000"


def spec(**kw: object) -> JournalSpec:
    return JournalSpec(name=kw.pop("name", NAME), **kw)  # type: ignore[arg-type]


# ---- construction -----------------------------------------------------------------------------


def test_defaults_are_the_test_defaults_and_validate() -> None:
    s = JournalSpec(name=NAME)
    assert s.replication == 1
    assert s.labels == LabelSet()
    assert s.fragment_length == 16 << 20
    assert s.compression is Codec.SNAPPY
    assert s.stores == ()
    assert s.refresh_interval == 60.0
    assert s.retention == 0.0 and s.flush_interval == 0.0
    assert s.path_postfix_template == ""
    assert s.flags is JournalFlag.NOT_SPECIFIED
    assert s.max_append_rate == 0
    assert s.suspend_level is SuspendLevel.NONE and s.suspend_offset == 0
    assert s.validate() is s


def test_constructor_normalises_convenient_types() -> None:
    s = JournalSpec(
        name=NAME,
        replication=3,
        labels={"content-type": "application/x-ndjson"},
        fragment_length=64 << 20,
        compression="zstd",
        stores=["file:///data/frags/"],
        refresh_interval="30s",
        retention="720h",
        flush_interval="5m",
        flags="rdonly",
        suspend_level="partial",
    )
    assert s.labels == LabelSet([("content-type", "application/x-ndjson")])
    assert s.compression is Codec.ZSTANDARD
    assert s.stores == ("file:///data/frags/",)
    assert (s.refresh_interval, s.retention, s.flush_interval) == (30.0, 2_592_000.0, 300.0)
    assert s.flags is JournalFlag.O_RDONLY
    assert s.suspend_level is SuspendLevel.PARTIAL
    assert JournalSpec(name=NAME, labels=[("aa", "1"), ("aa", "2")]).labels.values_of("aa") == ["1", "2"]
    assert JournalSpec(name=NAME, stores="s3://b/p/").stores == ("s3://b/p/",)
    assert JournalSpec(name=NAME, compression=2).compression is Codec.GZIP
    assert hash(s) == hash(JournalSpec(**{f: getattr(s, f) for f in s.__dataclass_fields__}))


@pytest.mark.parametrize(
    "value, flag",
    [
        ("O_RDONLY", JournalFlag.O_RDONLY),
        ("rdonly", JournalFlag.O_RDONLY),
        ("o_wronly", JournalFlag.O_WRONLY),
        ("wronly", JournalFlag.O_WRONLY),
        ("O_RDWR", JournalFlag.O_RDWR),
        ("rdwr", JournalFlag.O_RDWR),
        ("NOT_SPECIFIED", JournalFlag.NOT_SPECIFIED),
        (4, JournalFlag.O_RDWR),
        (0, JournalFlag.NOT_SPECIFIED),
        (JournalFlag.O_WRONLY, JournalFlag.O_WRONLY),
    ],
)
def test_flags_parse(value: object, flag: JournalFlag) -> None:
    assert spec(flags=value).flags is flag


@pytest.mark.parametrize(
    "flag, readable, writable",
    [
        (JournalFlag.NOT_SPECIFIED, True, True),
        (JournalFlag.O_RDONLY, True, False),
        (JournalFlag.O_WRONLY, False, True),
        (JournalFlag.O_RDWR, True, True),
    ],
)
def test_readable_writable(flag: JournalFlag, readable: bool, writable: bool) -> None:
    s = spec(flags=flag)
    assert (s.readable, s.writable) == (readable, writable)


def test_content_type() -> None:
    assert spec().content_type is None
    assert spec(labels={"content-type": "text/csv"}).content_type == "text/csv"


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            {"flags": 3},
            "flags 3 is not valid (expected exactly one of NOT_SPECIFIED=0, O_RDONLY=1, O_WRONLY=2, O_RDWR=4)",
        ),
        ({"flags": 6}, "flags 6 is not valid"),
        ({"flags": "read-write"}, "flags 'read-write' is not valid"),
        ({"compression": "lz4"}, 'compression codec "lz4" is not known'),
        ({"compression": 0}, "compression codec 0 is not valid"),
        ({"refresh_interval": "soon"}, 'refresh_interval "soon" is not a duration'),
        ({"retention": "forever"}, 'retention "forever" is not a duration'),
        ({"flush_interval": [1]}, "flush_interval [1] is not a duration"),
        ({"replication": "three"}, "replication 'three' is not an integer"),
        ({"fragment_length": 1.5}, "fragment_length 1.5 is not an integer"),
        ({"max_append_rate": True}, "max_append_rate True is not an integer"),
        ({"stores": 5}, "stores 5 is not a list of URLs"),
        ({"stores": [5]}, "stores entry 5 is not a URL string"),
        ({"labels": 5}, "labels 5 is not a mapping or a list of labels"),
        ({"path_postfix_template": 5}, "path_postfix_template 5 is not a string"),
        ({"suspend_level": "deep"}, "suspend level 'deep' is not valid"),
    ],
)
def test_constructor_rejects_bad_types(kw: dict, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        spec(**kw)
    assert str(exc.value).startswith(f'journal spec "{NAME}": ')
    assert message in str(exc.value)


def test_name_must_be_a_string() -> None:
    with pytest.raises(ValidationError, match="journal spec name 5 is not a string"):
        JournalSpec(name=5)  # type: ignore[arg-type]


def test_replace_normalises_and_keeps_the_rest() -> None:
    s = spec(replication=2)
    r = s.replace(refresh_interval="2m", compression="gzip")
    assert (r.refresh_interval, r.compression, r.replication) == (120.0, Codec.GZIP, 2)
    assert s.refresh_interval == 60.0  # frozen, unchanged
    with pytest.raises(AttributeError):
        s.replication = 3  # type: ignore[misc]


# ---- validation, field by field -------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"replication": 5},
        {"fragment_length": 1024},
        {"fragment_length": 1 << 34},
        {"refresh_interval": "1s"},
        {"refresh_interval": "24h"},
        {"flush_interval": "1m"},
        {"flush_interval": "24h"},
        {"retention": -1},
        {"retention": "720h"},
        {"max_append_rate": 1 << 20},
        {"stores": ["s3://bucket/prefix/?endpoint=http://127.0.0.1:9000&region=us-east-1", "file:///data/"]},
        {"stores": ["gs://bucket/", "azure://account/container/", "azure-ad://acct/c/"]},
        {"compression": "gzip_offload_decompression", "stores": ["s3://bucket/"]},
        {"compression": "gzip_offload_decompression", "stores": ["s3://bucket/", "file:///data/"]},
        {"compression": "none"},
        {"path_postfix_template": 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}'},
        {"path_postfix_template": '{{ .Spool.Journal }}/{{ printf "%05d" .Spool.Begin }}'},
        {"labels": {"content-type": "application/x-ndjson", "app.gazette.dev/message-type": "Word"}},
        {"labels": [("app.gazette.dev/tag", "a"), ("app.gazette.dev/tag", "b")]},
        {"suspend_level": "full", "suspend_offset": 1024},
        {"flags": "O_RDWR"},
    ],
)
def test_validate_accepts(kw: dict) -> None:
    spec(**kw).validate()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"name": "ab"}, 'journal name "ab" is too short (4..512 characters)'),
        ({"name": "a//b"}, 'journal name "a//b" is not clean (expected "a/b")'),
        ({"name": "/abc"}, 'journal name "/abc" must not begin with "/"'),
        ({"name": "a/b/c;meta"}, 'has a metadata suffix ";meta", which is allowed only in requests'),
        ({"replication": 0}, "replication 0 is out of range (expected 1..5)"),
        ({"replication": 6}, "replication 6 is out of range (expected 1..5)"),
        ({"labels": {"name": "x"}}, 'label "name" is reserved'),
        ({"labels": {"prefix": "x/"}}, 'label "prefix" is reserved'),
        ({"labels": {"content-type": "nope"}}, 'label "content-type" value "nope" is not a MIME type'),
        ({"labels": {"app.gazette.dev/message-type": "W"}}, 'requires a "content-type" label'),
        ({"labels": [("content-type", "a/b"), ("content-type", "c/d")]}, "must have a single value"),
        ({"fragment_length": 1023}, "fragment_length 1023 is out of range (expected 1024..17179869184)"),
        ({"fragment_length": (1 << 34) + 1}, "fragment_length 17179869185 is out of range"),
        ({"stores": ["ftp://host/dir/"]}, 'stores[0] "ftp://host/dir/" has unsupported scheme "ftp"'),
        ({"stores": ["/local/dir/"]}, 'stores[0] "/local/dir/" is not an absolute URL'),
        (
            {"stores": ["s3://bucket/prefix"]},
            'stores[0] "s3://bucket/prefix" path "/prefix" does not end in "/"',
        ),
        ({"stores": ["s3://bucket"]}, 'path "" does not end in "/"'),
        ({"stores": ["file://host/dir/"]}, 'stores[0] "file://host/dir/" is a file:// URL with a host'),
        ({"stores": ["s3:///prefix/"]}, "has no bucket or account"),
        ({"stores": ["s3://b/", "gs://b/x"]}, 'stores[1] "gs://b/x"'),
        (
            {"compression": "gzip_offload_decompression", "stores": ["file:///data/"]},
            'compression GZIP_OFFLOAD_DECOMPRESSION is not allowed with a file:// first store ("file:///data/")',
        ),
        ({"refresh_interval": "999ms"}, "refresh_interval 999ms is out of range (expected 1s..24h)"),
        ({"refresh_interval": 0}, "refresh_interval 0s is out of range (expected 1s..24h)"),
        ({"refresh_interval": "24h1s"}, "refresh_interval 24h1s is out of range"),
        ({"flush_interval": "59s"}, "flush_interval 59s is too short (expected 0 or >= 1m)"),
        ({"flush_interval": -60}, "flush_interval -1m is too short"),
        (
            {"path_postfix_template": "x={{ .Spool.Nope }}"},
            'path_postfix_template "x={{ .Spool.Nope }}" is not valid at position 5: at <.Spool.Nope>: '
            "can't evaluate field Nope",
        ),
        ({"path_postfix_template": "date={first_append:%Y-%m-%d}"}, "this project's former template syntax"),
        ({"path_postfix_template": "/abs"}, 'must not begin with "/"'),
        ({"max_append_rate": -1}, "max_append_rate -1 is negative (expected >= 0; 0 = unlimited)"),
        ({"suspend_offset": -1}, "suspend_offset -1 is negative"),
    ],
)
def test_validate_rejects_with_field_in_message(kw: dict, message: str) -> None:
    s = spec(**kw)
    with pytest.raises(ValidationError) as exc:
        s.validate()
    assert str(exc.value).startswith(f'journal spec "{s.name}": ')
    assert message in str(exc.value)


def test_store_url_standalone() -> None:
    validate_store_url("file:///tmp/frags/")
    with pytest.raises(ValidationError, match='store "s3://b" path "" does not end in "/"'):
        validate_store_url("s3://b")


# ---- proto and dict forms -------------------------------------------------------------------

FULL = JournalSpec(
    name=NAME,
    replication=3,
    labels={"content-type": "application/x-ndjson", "app.gazette.dev/message-type": "Click", "topic": ""},
    fragment_length=256 << 20,
    compression="gzip",
    stores=["s3://bucket/frags/?endpoint=http://localhost:9000", "file:///backup/"],
    refresh_interval="1m30s",
    retention="720h",
    flush_interval="10m",
    path_postfix_template='date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
    flags="O_WRONLY",
    max_append_rate=1 << 20,
    suspend_level="partial",
    suspend_offset=4096,
)


@pytest.mark.parametrize(
    "s", [FULL, JournalSpec(name=NAME), JournalSpec(name=NAME, retention=-1.5, refresh_interval=0.001)]
)
def test_proto_round_trip(s: JournalSpec) -> None:
    msg = s.to_proto()
    assert isinstance(msg, pb.JournalSpec)
    assert JournalSpec.from_proto(msg) == s
    assert JournalSpec.from_proto(pb.JournalSpec.FromString(msg.SerializeToString())) == s


def test_proto_fields() -> None:
    msg = FULL.to_proto()
    assert msg.fragment.compression_codec == pb.GZIP
    assert msg.fragment.refresh_interval.seconds == 90
    assert msg.fragment.retention.seconds == 720 * 3600
    assert msg.flags == pb.JournalSpec.O_WRONLY
    assert msg.suspend.level == pb.JournalSpec.Suspend.PARTIAL and msg.suspend.offset == 4096
    assert [(lbl.name, lbl.value) for lbl in msg.labels.labels] == list(FULL.labels)
    assert not JournalSpec(name=NAME).to_proto().HasField("suspend")


def test_from_proto_rejects_invalid_codec() -> None:
    msg = JournalSpec(name=NAME).to_proto()
    msg.fragment.compression_codec = pb.INVALID
    with pytest.raises(ValidationError, match="compression codec 0 is not valid"):
        JournalSpec.from_proto(msg)


def test_to_dict_is_yaml_friendly() -> None:
    d = FULL.to_dict()
    assert d == {
        "name": NAME,
        "replication": 3,
        "labels": [
            {"name": "app.gazette.dev/message-type", "value": "Click"},
            {"name": "content-type", "value": "application/x-ndjson"},
            {"name": "topic"},
        ],
        "fragment": {
            "length": 256 << 20,
            "compression_codec": "GZIP",
            "stores": ["s3://bucket/frags/?endpoint=http://localhost:9000", "file:///backup/"],
            "refresh_interval": "1m30s",
            "retention": "720h",
            "flush_interval": "10m",
            "path_postfix_template": 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        },
        "flags": "O_WRONLY",
        "max_append_rate": 1 << 20,
        "suspend": {"level": "PARTIAL", "offset": 4096},
    }
    assert JournalSpec.from_dict(yaml.safe_load(yaml.safe_dump(d))) == FULL


def test_from_dict_accepts_flat_names_and_label_mappings() -> None:
    s = JournalSpec.from_dict(
        {
            "name": NAME,
            "replication": "2",
            "labels": {"app.gazette.dev/tag": ["a", "b"], "topic": None, "content-type": "text/csv"},
            "fragment_length": 2048,
            "compression": "SNAPPY",
            "stores": ["file:///x/"],
            "refresh_interval": 30,
            "flush_interval": "2m",
            "flags": 1,
            "suspend_level": 2,
        }
    )
    assert s == JournalSpec(
        name=NAME,
        replication=2,
        labels=[
            ("app.gazette.dev/tag", "a"),
            ("app.gazette.dev/tag", "b"),
            ("topic", ""),
            ("content-type", "text/csv"),
        ],
        fragment_length=2048,
        compression=Codec.SNAPPY,
        stores=("file:///x/",),
        refresh_interval=30.0,
        flush_interval=120.0,
        flags=JournalFlag.O_RDONLY,
        suspend_level=SuspendLevel.FULL,
    )


@pytest.mark.parametrize(
    "d, message",
    [
        ({"name": NAME, "replicas": 3}, f'journal spec "{NAME}": unknown key "replicas"'),
        ({"name": NAME, "fragment": {"size": 1}}, 'unknown key "fragment.size" (expected one of length,'),
        ({"name": NAME, "fragment": 5}, "fragment 5 is not a mapping"),
        (
            {"name": NAME, "fragment": {"length": 2048}, "fragment_length": 4096},
            "fragment_length repeats fragment.length",
        ),
        ({"name": NAME, "fragment": {"length": "big"}}, "fragment_length 'big' is not an integer"),
        ({"name": NAME, "labels": [{"nom": "x"}]}, "labels entry {'nom': 'x'} is not {name, value}"),
        ({"name": NAME, "labels": ["x"]}, "labels entry 'x' is not a (name, value) pair"),
        ({"replication": 1}, "has no name"),
    ],
)
def test_from_dict_errors(d: dict, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        JournalSpec.from_dict(d)
    assert message in str(exc.value)


# ---- gazctl YAML ----------------------------------------------------------------------------

EXAMPLE = """
name: examples/
replication: 3
labels:
  - name: app.gazette.dev/managed-by
    value: examples
fragment:
  length: 268435456
  compression_codec: SNAPPY
  stores: [s3://examples/fragments/]
  refresh_interval: 1m
  retention: 720h
  flush_interval: 10m
  path_postfix_template: date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}
children:
  - name: examples/clicks/
    labels:
      - name: content-type
        value: application/x-ndjson
      - name: app.gazette.dev/managed-by
        value: clicks-team
    children:
      - name: examples/clicks/part-000
        revision: 12
      - name: examples/clicks/part-001
        replication: 1
        fragment:
          compression_codec: zstandard
          retention: 0s
  - name: examples/raw
    flags: O_RDONLY
    labels: {topic: raw}
"""


def test_load_pushes_directory_fields_down() -> None:
    changes = load_specs_yaml(EXAMPLE)
    assert [c.spec.name for c in changes] == [
        "examples/clicks/part-000",
        "examples/clicks/part-001",
        "examples/raw",
    ]
    base = JournalSpec(
        name="examples/clicks/part-000",
        replication=3,
        labels={"app.gazette.dev/managed-by": "clicks-team", "content-type": "application/x-ndjson"},
        fragment_length=268435456,
        compression="snappy",
        stores=["s3://examples/fragments/"],
        refresh_interval="1m",
        retention="720h",
        flush_interval="10m",
        path_postfix_template='date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
    )
    assert changes[0] == SpecChange(base, expect_mod_revision=12, delete=False)
    # A zero value is unset: retention 0s inherits 720h; non-zero fields override.
    assert changes[1] == SpecChange(
        base.replace(name="examples/clicks/part-001", replication=1, compression="zstd"), 0, False
    )
    # Labels union per name, the child's values winning.
    assert changes[2].spec == base.replace(
        name="examples/raw",
        flags="O_RDONLY",
        labels={"app.gazette.dev/managed-by": "examples", "topic": "raw"},
    )


def test_load_flat_list_and_several_documents() -> None:
    text = """
- name: aa/bb/cc
  revision: -1
- name: aa/bb/dd
  replication: 2
---
name: ee/ff/gg
fragment: {length: 2048}
"""
    changes = load_specs_yaml(text)
    assert [(c.spec.name, c.expect_mod_revision, c.spec.replication) for c in changes] == [
        ("aa/bb/cc", -1, 1),
        ("aa/bb/dd", 0, 2),
        ("ee/ff/gg", 0, 1),
    ]
    assert changes[2].spec.fragment_length == 2048
    assert load_specs_yaml("") == [] and load_specs_yaml("[]") == []


def test_load_nameless_root_carries_defaults() -> None:
    changes = load_specs_yaml("replication: 2\nchildren: [{name: aa/bb}, {name: cc/dd, replication: 4}]")
    assert [c.spec.replication for c in changes] == [2, 4]


def test_delete_cascades_to_listed_children() -> None:
    text = """
name: aa/
delete: true
children:
  - {name: aa/one, revision: 4}
  - {name: aa/two, revision: -1}
"""
    changes = load_specs_yaml(text)
    assert [(c.spec.name, c.expect_mod_revision, c.delete) for c in changes] == [
        ("aa/one", 4, True),
        ("aa/two", -1, True),
    ]
    # A deleted spec is not validated (only its name matters).
    assert load_specs_yaml("{name: aa/bb, delete: true, revision: 3, replication: 0}")[0].delete


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "name: aa/\nchildren:\n  - name: aa/bb\n    replication: 9",
            'node "aa/bb": journal spec "aa/bb": replication 9 is out of range',
        ),
        ("- name: aa/bb\n- name: cc/dd\n  bogus: 1", 'node "cc/dd": unknown key "bogus"'),
        ("- replication: 2", 'node [0]: a directory (a name ending in "/", or no name) needs children'),
        ("name: aa/\nchildren: []", 'node "aa/": a directory'),
        (
            "name: aa/\nchildren: [{name: aa/b}, {replication: 2, children: [{name: aa/c}]}]",
            'children[1]: name is not under its parent directory "aa/"',
        ),
        ("- {name: aa/bb}\n- 7", "node [1] is not a mapping"),
        (
            "name: aa/\nchildren: [{name: aa/b}, {name: aa/c/, children: [5]}]",
            "node document root.children[1].children[0] is not a mapping",
        ),
        (
            "name: aa/\nrevision: 3\nchildren: [{name: aa/b}]",
            'node "aa/": "revision" is allowed only on journals, not directories',
        ),
        (
            "name: aa/\nsuspend: {level: full}\nchildren: [{name: aa/b}]",
            '"suspend_level" is allowed only on journals',
        ),
        ("name: aa/bb\nchildren: [{name: aa/bb/cc}]", 'node "aa/bb": a journal cannot have children'),
        ("name: aa/\nchildren: {name: aa/bb}", "children is not a list"),
        (
            "name: aa/\nchildren: [{name: bb/cc}]",
            'node "bb/cc": name is not under its parent directory "aa/"',
        ),
        ("{name: aa/bb, delete: true}", 'node "aa/bb": delete needs a revision'),
        ("{name: aa/bb, delete: yes please}", "delete 'yes please' is not true or false"),
        ("{name: aa/bb, revision: x}", "revision 'x' is not an integer"),
        ("- {name: aa/bb}\n- {name: aa/bb}", 'lists journal "aa/bb" more than once'),
        ("name: [unclosed", "journal specs YAML does not parse"),
        ("{name: 5}", "name 5 is not a string"),
    ],
)
def test_load_errors_name_the_node(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        load_specs_yaml(text)
    assert message in str(exc.value)


def test_load_without_validation() -> None:
    (change,) = load_specs_yaml("{name: aa/bb, replication: 9}", validate=False)
    assert change.spec.replication == 9


def test_spec_change_to_proto() -> None:
    s = JournalSpec(name="aa/bb")
    upsert = SpecChange(s, 5).to_proto()
    assert upsert.expect_mod_revision == 5 and JournalSpec.from_proto(upsert.upsert) == s
    delete = SpecChange(s, -1, delete=True).to_proto()
    assert delete.delete == "aa/bb" and not delete.HasField("upsert")


def test_dump_hoists_shared_fields() -> None:
    specs = [
        (
            JournalSpec(
                name=f"ex/{topic}/part-{i:03d}",
                replication=3,
                stores=["s3://b/p/"],
                labels={"topic": topic, "content-type": "application/x-ndjson"},
            ),
            10 + i,
        )
        for topic in ("aa", "bb")
        for i in range(2)
    ] + [(JournalSpec(name="other/xx", replication=2), 5)]
    text = dump_specs_yaml(specs)
    doc = yaml.safe_load(text)
    # Shared by every journal: hoisted to the (nameless) root.
    assert "name" not in doc
    assert doc["fragment"] == {"length": 16 << 20, "compression_codec": "SNAPPY", "refresh_interval": "1m"}
    ex, other = doc["children"]
    assert ex["name"] == "ex/" and ex["replication"] == 3
    assert ex["labels"] == [{"name": "content-type", "value": "application/x-ndjson"}]
    assert ex["fragment"] == {"stores": ["s3://b/p/"]}
    aa = ex["children"][0]
    assert aa["name"] == "ex/aa/" and aa["labels"] == [{"name": "topic", "value": "aa"}]
    assert aa["children"] == [
        {"name": "ex/aa/part-000", "revision": 10},
        {"name": "ex/aa/part-001", "revision": 11},
    ]
    assert other == {"name": "other/xx", "replication": 2, "revision": 5}
    assert [(c.spec, c.expect_mod_revision) for c in load_specs_yaml(text)] == sorted(
        specs, key=lambda p: p[0].name
    )


def test_dump_single_and_empty() -> None:
    text = dump_specs_yaml([FULL])
    assert yaml.safe_load(text)["name"] == NAME
    assert [c.spec for c in load_specs_yaml(text)] == [FULL]
    assert load_specs_yaml(dump_specs_yaml([])) == []
    with pytest.raises(ValidationError, match='journal "aa/bb" is given more than once'):
        dump_specs_yaml([JournalSpec(name="aa/bb"), JournalSpec(name="aa/bb")])


def test_dump_nested_names() -> None:
    # A journal whose name is also a directory of other journals.
    specs = [
        JournalSpec(name=n, replication=r)
        for n, r in [("aa/bb", 1), ("aa/bb/cc", 2), ("aa/bb/dd", 2), ("aa/bbx/ee", 3), ("aa/bb/cc/dd/ee", 2)]
    ]
    text = dump_specs_yaml(specs)
    assert [c.spec for c in load_specs_yaml(text)] == sorted(specs, key=lambda s: s.name)


_segment = st.sampled_from(["aa", "bb", "cc", "part-000", "part-001"])
_names = st.lists(
    st.lists(_segment, min_size=2, max_size=4).map("/".join), min_size=1, max_size=8, unique=True
)
_fields = st.fixed_dictionaries(
    {},
    optional={
        "replication": st.integers(1, 5),
        "labels": st.lists(
            st.tuples(
                st.sampled_from(["topic", "app.gazette.dev/tag", "zz"]), st.sampled_from(["", "x", "y"])
            ),
            max_size=3,
        ),
        "fragment_length": st.sampled_from([1024, 1 << 20]),
        "compression": st.sampled_from(list(Codec)),
        "stores": st.sampled_from([(), ("s3://b/",), ("s3://b/", "gs://c/")]),
        "refresh_interval": st.sampled_from([1.0, 60.0, 3600.0]),
        "retention": st.sampled_from([0.0, -1.0, 3600.0]),
        "flush_interval": st.sampled_from([0.0, 600.0]),
        "path_postfix_template": st.sampled_from(["", 'd={{ .Spool.FirstAppendTime.Format "2006-01-02" }}']),
        "flags": st.sampled_from(list(JournalFlag)),
        "max_append_rate": st.sampled_from([0, 100]),
        "suspend_level": st.sampled_from(list(SuspendLevel)),
        "suspend_offset": st.sampled_from([0, 7]),
    },
)


def _valid_labels(pairs: list) -> list:
    # A name with an empty value cannot also have a non-empty one (1.1); keep the non-empty values.
    names_with_values = {n for n, v in pairs if v}
    return [(n, v) for n, v in pairs if v or n not in names_with_values]


@settings(max_examples=150, deadline=None)
@given(_names, st.data())
def test_yaml_round_trip(names: list, data: st.DataObject) -> None:
    specs = []
    for i, name in enumerate(names):
        fields = data.draw(_fields)
        if "labels" in fields:
            fields["labels"] = _valid_labels(fields["labels"])
        specs.append((JournalSpec(name=name, **fields), i))
    text = dump_specs_yaml(specs)
    loaded = load_specs_yaml(text, validate=False)
    assert [(c.spec, c.expect_mod_revision, c.delete) for c in loaded] == [
        (s, r, False) for s, r in sorted(specs, key=lambda p: p[0].name)
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(_segment, min_size=2, max_size=4).map("/".join), min_size=1, max_size=1), _fields)
def test_dict_and_proto_round_trip(names: list, fields: dict) -> None:
    if "labels" in fields:
        fields["labels"] = _valid_labels(fields["labels"])
    s = JournalSpec(name=names[0], **fields)
    assert JournalSpec.from_dict(yaml.safe_load(yaml.safe_dump(s.to_dict()))) == s
    assert JournalSpec.from_proto(s.to_proto()) == s


def test_example_documentation_shape() -> None:
    # The journalspace example of the reference, as a user would write it.
    text = textwrap.dedent(
        """
        name: examples/
        replication: 3
        fragment:
          length: 256000000
          compression_codec: SNAPPY
          refresh_interval: 1m
          retention: 720h
          flush_interval: 10m
          path_postfix_template: date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}
          stores: [file:///tmp/frags/]
        children:
          - name: examples/words/
            labels: [{name: content-type, value: application/x-ndjson}]
            children:
              - name: examples/words/part-000
              - name: examples/words/part-001
        """
    )
    changes = load_specs_yaml(text)
    assert len(changes) == 2 and all(c.expect_mod_revision == 0 for c in changes)
    assert all(c.spec.content_type == "application/x-ndjson" and c.spec.replication == 3 for c in changes)
