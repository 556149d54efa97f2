"""Gazette's own table-driven unit tests (v0.103.0), ported to gazette-py's API: labels and label sets
(broker/protocol/label_extensions_test.go), selectors, journal names and specs
(journal_spec_extensions_test.go), fragment stores (fragment_store_test.go), the journalspace YAML
hierarchy (broker/journalspace/node_test.go) and CSV framing (message/csv_framing_test.go).

Each case keeps Gazette's inputs and its accept/refuse outcome and result; error texts are ours.
Where gazette-py's API differs (a LabelSet is always sorted and unique, specs take defaults), the
case is adapted and says so. Selector rows marked "gazctl" were also checked against gazctl v0.103.0
itself (its `journals list -l` parse, read back off the wire).
"""

from __future__ import annotations

import pytest
import yaml

from gazette.message.framing import CSVFraming, FramingError
from gazette.message.uuid import Flags, build_uuid
from gazette.protocol import JournalSpec, LabelSelector, LabelSet, ValidationError
from gazette.protocol.selector import SelectorLabel, journal_labels
from gazette.protocol.spec import dump_specs_yaml, load_specs_yaml, validate_store_url
from gazette.protocol.validate import (
    CONTENT_TYPE,
    CONTENT_TYPE_JSON_LINES,
    INSTANCE,
    MESSAGE_SUBTYPE,
    MESSAGE_TYPE,
    validate_journal_name,
    validate_label_name,
    validate_label_value,
    validate_labels,
)


def ls(*nv: str) -> LabelSet:
    """Gazette's MustLabelSet: name, value, name, value, ..."""
    assert len(nv) % 2 == 0
    return LabelSet(zip(nv[::2], nv[1::2], strict=True))


def sel_labels(*nv: str) -> list[tuple[str, str, bool]]:
    """Selector entries from MustLabelSet arguments, where a "name:prefix" name marks a prefix entry."""
    out = []
    for name, value in zip(nv[::2], nv[1::2], strict=True):
        prefix = name.endswith(":prefix")
        out.append((name.removesuffix(":prefix"), value, prefix))
    return out


# ---- labels (TestLabelValidationCases, TestSetValidationCases, TestValuesOfCases) ------------------


@pytest.mark.parametrize(
    "name, value, error",
    [
        ("a-label", "a-value", None),
        ("a/label", "a%20value", None),
        ("a|label", "a-value", "invalid character '|'"),
        ("a-label", "a|value", "invalid character '|'"),
        ("a", "a-value", 'label name "a" is too short'),
        ("a" * 65, "a-value", "is too long (65 characters; expected 2..64)"),
        ("a-label", "", None),
        ("a-label", "a" * 1025, "is too long (1025 characters; expected 0..1024)"),
        ("a-label:prefix", "a-value", "invalid character ':'"),
    ],
)
def test_label_validation_cases(name: str, value: str, error: str | None) -> None:
    def check() -> None:
        validate_label_name(name)
        validate_label_value(value, name=name)

    if error is None:
        check()
    else:
        with pytest.raises(ValidationError) as exc:
            check()
        assert error in str(exc.value)


def test_single_value_labels() -> None:
    validate_labels(ls("aaa", "bar", "aaa", "baz", CONTENT_TYPE, "a/type"))
    with pytest.raises(ValidationError, match=f'label "{CONTENT_TYPE}" must have a single value'):
        validate_labels(ls("aaa", "bar", CONTENT_TYPE, "a/type", CONTENT_TYPE, "other/type"))
    with pytest.raises(ValidationError, match=f'label "{INSTANCE}" must have a single value'):
        validate_labels(ls(INSTANCE, "a", INSTANCE, "b", "other", "c"))


def test_label_set_validation_cases() -> None:
    # Gazette's LabelSet is a wire list its Validate checks for order and uniqueness; ours sorts and
    # de-duplicates on construction, so only the value rules remain to be refused.
    assert ls("bbb", "111", "aaa", "444", "aaa", "333", "aaa", "333") == ls(
        "aaa", "333", "aaa", "444", "bbb", "111"
    )
    with pytest.raises(ValidationError, match='label name "bad label" has invalid character'):
        validate_labels(ls("bad label", "111"))
    with pytest.raises(ValidationError, match='label "ccc" has both an empty and a non-empty value'):
        validate_labels(ls("aaa", "222", "ccc", "", "ccc", "555"))
    validate_labels(ls("aaa", "222", "aaa", "333", "bbb", "111", "ccc", "44", "ccc", "555"))


@pytest.mark.parametrize(
    "name, values",
    [
        ("aa", []),
        ("aaa", ["222", "333", "444"]),
        ("bbb", []),
        ("ccc", [""]),
        ("ddd", []),
        ("DDDD", ["111"]),
        ("eee", []),
        ("ff", ["555"]),
    ],
)
def test_values_of_cases(name: str, values: list[str]) -> None:
    labels = ls("DDDD", "111", "aaa", "222", "aaa", "333", "aaa", "444", "ccc", "", "ff", "555")
    assert labels.values_of(name) == values
    # Gazette's ValueOf gives "" for an absent label; ours gives None.
    assert labels.value_of(name) == (values[0] if values else None)


# ---- LabelSet union, intersection, subtraction (TestUnion, TestIntersection, TestSubtraction) ------


def test_union() -> None:
    lhs = ls("bbb", "val-1", "bbb", "val-2", "ccc", "val-3")
    rhs = ls("aaa", "val-4", "aaa", "val-5", "bbb", "val-6", "ddd", "val-7")
    assert lhs.union(rhs) == ls(
        "aaa", "val-4", "aaa", "val-5",
        "bbb", "val-1", "bbb", "val-2",  # the left side's bbb values are kept
        "ccc", "val-3", "ddd", "val-7",
    )  # fmt: skip
    # And so a journal register {author: A} with union_registers {author: B} becomes {author: B}.
    assert ls("author", "B").union(ls("author", "A")) == ls("author", "B")


INTERSECT_LHS = ls(
    "aaa", "val",  # matched
    "bbb", "val-1",  # differs on value
    "ccc", "val-1", "ccc", "val-2",  # a value only on the left
    "ddd", "val-1", "ddd", "val-2",  # matched
    "eee", "val",  # only on the left
    "ggg", "val",  # matched
)  # fmt: skip
INTERSECT_RHS = ls(
    "aaa", "val", "bbb", "val-2", "ccc", "val-1", "ddd", "val-1", "ddd", "val-2",
    "fff", "val",  # only on the right
    "ggg", "val",
)  # fmt: skip


def test_intersection() -> None:
    assert INTERSECT_LHS.intersect(INTERSECT_RHS) == ls(
        "aaa", "val", "ddd", "val-1", "ddd", "val-2", "ggg", "val"
    )  # fmt: skip


def test_subtraction() -> None:
    assert INTERSECT_LHS.subtract(INTERSECT_RHS) == ls(
        "bbb", "val-1", "ccc", "val-1", "ccc", "val-2", "eee", "val"
    )  # fmt: skip
    # An empty value is a value like any other: it drops only a label whose value is exactly "".
    assert ls("author", "A").subtract(ls("author", "")) == ls("author", "A")
    assert ls("author", "").subtract(ls("author", "")) == LabelSet()


def test_meta_label_extraction() -> None:
    """TestMetaLabelExtraction: a journal's labels plus its `name`."""
    labels = journal_labels(ls("hello", "world"), "path/to/my/journal")
    assert labels == ls("name", "path/to/my/journal", "hello", "world")


# ---- selectors (TestSelectorValidationCases, TestSelectorMatchingCases, TestSelectorParsingCases) --


def test_selector_validation_cases() -> None:
    LabelSelector([("include", "a-value"), ("prefix-thing", "prefix/", True)], [("exclude", "other-value")])
    with pytest.raises(ValidationError, match='label name "bad label"'):
        LabelSelector([("bad label", "a-value")])
    with pytest.raises(ValidationError, match='label name "bad label"'):
        LabelSelector(exclude=[("bad label", "other-value")])


MATCH_SELECTOR = LabelSelector(
    sel_labels("inc-1:prefix", "a-val/", "inc-2", "", "inc-3", "val-1", "inc-3", "val-2"),
    sel_labels("exc-1", "", "exc-2", "val-3", "exc-2", "val-4"),
)


@pytest.mark.parametrize(
    "labels, matched",
    [
        (ls(), False),
        (ls("foo", "bar", "inc-1", "a-val/a/1", "inc-2", "any", "inc-3", "val-1"), True),
        (ls("foo", "bar", "inc-1", "a-val/b/2", "inc-2", "foo", "inc-3", "val-1"), True),  # any inc-2 value
        (ls("foo", "bar", "inc-1", "a-val/c/3", "inc-2", "any", "inc-3", "val-2"), True),  # other inc-3 value
        (ls("foo", "bar", "inc-1", "bad-val/4", "inc-2", "any", "inc-3", "val-1"), False),  # inc-1 missed
        (ls("foo", "bar", "inc-1", "a-val/5", "inc-3", "val-1"), False),  # inc-2 missing
        (ls("foo", "bar", "inc-1", "a-val/6", "inc-2", "any", "inc-3", "val-other"), False),  # inc-3 missed
        (ls("exc-1", "any", "foo", "bar", "inc-1", "a-val/a/7", "inc-2", "any", "inc-3", "val-1"), False),
        (ls("exc-2", "val-4", "foo", "bar", "inc-1", "a-val/8", "inc-2", "any", "inc-3", "val-1"), False),
        (ls("exc-2", "val-ok", "foo", "bar", "inc-1", "a-val/9/9", "inc-2", "any", "inc-3", "val-1"), True),
    ],
)
def test_selector_matching_cases(labels: LabelSet, matched: bool) -> None:
    assert MATCH_SELECTOR.matches(labels) is matched


def test_exclude_only_selector_matching() -> None:
    sel = LabelSelector(exclude=MATCH_SELECTOR.exclude)
    assert sel.matches(ls())
    assert sel.matches(ls("foo", "bar"))
    assert sel.matches(ls("exc-2", "val-ok", "foo", "bar"))
    assert not sel.matches(ls("exc-2", "val-3", "foo", "bar"))
    assert not sel.matches(ls("exc-1", "any", "foo", "bar"))


@pytest.mark.parametrize(
    "text, include, exclude",
    [
        ("foo = bar", sel_labels("foo", "bar"), []),
        ("foo:prefix =bar", sel_labels("foo:prefix", "bar"), []),
        ("foo != bar", [], sel_labels("foo", "bar")),
        ("foo ", sel_labels("foo", ""), []),
        (" !foo", [], sel_labels("foo", "")),
        (" foo in (bing, baz,bar)", sel_labels("foo", "bar", "foo", "baz", "foo", "bing"), []),
        (" foo not in ( pear, apple )", [], sel_labels("foo", "apple", "foo", "pear")),
        (
            "foo==bar, baz !=bing ,apple:prefix in (fruit, banana)",
            sel_labels("apple:prefix", "banana", "apple:prefix", "fruit", "foo", "bar"),
            sel_labels("baz", "bing"),
        ),
        (
            "!foo,baz,bing:prefix not in (thing-one, thing-2),!bar,",  # a trailing comma
            sel_labels("baz", ""),
            sel_labels("bar", "", "bing:prefix", "thing-2", "bing:prefix", "thing-one", "foo", ""),
        ),
        # Label values may include '='.
        (
            "foo = ba=ar, baz=bi=ngo,exc!=who=ops",
            sel_labels("foo", "ba=ar", "baz", "bi=ngo"),
            sel_labels("exc", "who=ops"),
        ),
        (
            "foo in (bi=ng,ba=ar), exc notin (who=ops,oth=er)",
            sel_labels("foo", "bi=ng", "foo", "ba=ar"),
            sel_labels("exc", "who=ops", "exc", "oth=er"),
        ),
    ],
)
def test_selector_parsing_cases(text: str, include: list, exclude: list) -> None:
    parsed = LabelSelector.parse(text)
    assert parsed == LabelSelector(include, exclude)
    assert LabelSelector.parse(str(parsed)) == parsed  # round trip through str


@pytest.mark.parametrize(
    "text, message",
    [
        ("apple,banana err in (bar)", 'could not match "banana err in (bar)" to a label selector expression'),
        (
            "apple,banana in (bar,err baz)",
            'parsing "banana in (bar,err baz)": could not match "err baz" to a label selector set expression',
        ),
        (
            "ban=ana in (bar)",
            'could not match "ban=ana in (bar)" to a label selector expression',
        ),  # '=' in a name
        ("foo, foo in (bar)", 'label "foo" has both an empty value (any value) and the value "bar"'),
    ],
)
def test_selector_parsing_errors(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        LabelSelector.parse(text)
    assert message in str(exc.value)


def E(name: str, value: str = "", prefix: bool = False) -> SelectorLabel:
    return SelectorLabel(name, value, prefix)


# Rows checked against gazctl v0.103.0: a selector, then (include, exclude) as Gazette parsed it, or
# None where Gazette refuses it.
GAZCTL_ROWS: list[tuple[str, tuple[list[SelectorLabel], list[SelectorLabel]] | None]] = [
    ("", ([], [])),
    ("foo,", ([E("foo")], [])),
    ("foo ,", ([E("foo")], [])),
    ("foo=a ,", ([E("foo", "a")], [])),
    ("env=", ([E("env")], [])),
    ("env= ,ba", ([E("ba"), E("env")], [])),
    ("!foo:prefix", ([], [E("foo", "", True)])),
    ("foo:prefix", ([E("foo", "", True)], [])),
    ("foo in ( )", ([E("foo")], [])),
    ("foo in (,)", ([E("foo")], [])),
    ("foo in (a,)", ([E("foo", "a")], [])),
    ("foo in(a)", ([E("foo", "a")], [])),
    ("foo not in(a)", ([], [E("foo", "a")])),
    ("! foo", ([], [E("foo")])),
    ("kk===x", ([E("kk", "=x")], [])),
    ("kk!==x", ([], [E("kk", "=x")])),
    ("in in (in)", ([E("in", "in")], [])),
    ("notin notin (x)", ([], [E("notin", "x")])),
    ("foo=a, foo=a", ([E("foo", "a")], [])),
    ("foo=a, foo:prefix=b", ([E("foo", "a"), E("foo", "b", True)], [])),
    ("foo, foo!=x", ([E("foo")], [E("foo", "x")])),
    ("   ", None),
    (" ", None),
    ("foo=a, ", None),
    ("foo,,", None),
    (",foo", None),
    ("foo  =a", None),
    ("foo  in (a)", None),
    ("foo in  (a)", None),
    ("foo  not in (a)", None),
    ("foo not  in (a)", None),
    ("foo in ()", None),
    ("foo in (a b)", None),
    ("foo= a b", None),
    ("!foo=a", None),
    ("f=a", None),
    ("foo=a, foo:prefix=a", None),
    ("foo, foo in (bar)", None),
    ("!foo, !foo:prefix", None),
    ("foo:prefix, foo=x", None),
]


@pytest.mark.parametrize("text, expected", GAZCTL_ROWS)
def test_selector_rows_checked_against_gazctl(text: str, expected) -> None:
    if expected is None:
        with pytest.raises(ValidationError):
            LabelSelector.parse(text)
        return
    parsed = LabelSelector.parse(text)
    assert (list(parsed.include), list(parsed.exclude)) == expected
    assert LabelSelector.parse(str(parsed)) == parsed


# ---- journal names, specs, fragment stores (TestJournalValidationCases, TestSpecValidationCases,
# TestValidation of fragment_store_test.go) -------------------------------------------------------


@pytest.mark.parametrize(
    "name, error",
    [
        ("a/valid/path/to/a/journal", None),
        ("/leading/slash", 'must not begin with "/"'),
        ("trailing/slash/", "is not clean"),
        ("extra-middle//slash", "is not clean"),
        ("not-$%|-a valid token", "invalid character"),
        ("", "is too short"),
        ("zz", "is too short"),
        # Journals may have a metadata path segment, which must be a valid, non-empty path.
        ("foo/bar;baz/bing", None),
        ("foo/bar/webhook;foo/bar/webhook/http%3A%2F%2Fexample.com%3A9000%2F", None),
        ("foo/bar;disallowed#rune", "invalid character '#'"),
        ("foo/bar;", "is too short"),
    ],
)
def test_journal_validation_cases(name: str, error: str | None) -> None:
    if error is None:
        validate_journal_name(name, allow_meta=True)
    else:
        with pytest.raises(ValidationError) as exc:
            validate_journal_name(name, allow_meta=True)
        assert error in str(exc.value)


BASE_SPEC = JournalSpec(
    name="a/journal",
    replication=3,
    labels=ls("aaa", "bbb"),
    fragment_length=1 << 18,
    compression="GZIP",
    stores=["s3://bucket/path/", "gs://other-bucket/path/"],
    refresh_interval="5m",
    retention="8760h",
    path_postfix_template=(
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}'
    ),
    flags="O_RDWR",
    max_append_rate=12345,
)


@pytest.mark.parametrize(
    "changes, error",
    [
        ({}, None),
        ({"name": "/bad/name"}, 'must not begin with "/"'),
        ({"name": "a/journal;disallowed/meta"}, "metadata suffix"),
        ({"replication": 0}, "replication 0 is out of range (expected 1..5)"),
        ({"replication": 1024}, "replication 1024 is out of range"),
        ({"labels": ls("xxx xxx", "bbb")}, 'label name "xxx xxx" has invalid character'),
        ({"labels": ls("name", "bbb")}, 'label "name" is reserved'),
        ({"labels": ls("name", "")}, 'label "name" is reserved'),  # even with an empty value
        ({"labels": ls("prefix", "")}, 'label "prefix" is reserved'),
        ({"labels": ls(MESSAGE_TYPE, "a", MESSAGE_TYPE, "b")}, "must have a single value"),
        ({"labels": ls(CONTENT_TYPE, "invalid/content/type")}, "is not a MIME type"),
        ({"labels": ls(CONTENT_TYPE, "")}, "is not a MIME type"),
        ({"labels": ls(MESSAGE_SUBTYPE, "subtype")}, f'requires a "{MESSAGE_TYPE}" label'),
        (
            {"labels": ls(MESSAGE_SUBTYPE, "subtype", MESSAGE_TYPE, "type")},
            f'requires a "{CONTENT_TYPE}" label',
        ),
        ({"labels": ls(MESSAGE_TYPE, "type", CONTENT_TYPE, CONTENT_TYPE_JSON_LINES)}, None),
        (
            {
                "labels": ls(
                    MESSAGE_SUBTYPE, "subtype", MESSAGE_TYPE, "type", CONTENT_TYPE, CONTENT_TYPE_JSON_LINES
                )
            },
            None,
        ),
        ({"fragment_length": 0}, "fragment_length 0 is out of range (expected 1024.."),
        ({"fragment_length": (1 << 34) + 1}, "is out of range"),
        ({"flags": "NOT_SPECIFIED"}, None),
        ({"flags": "O_RDONLY"}, None),
        ({"flags": "O_WRONLY"}, None),
        ({"max_append_rate": -1}, "max_append_rate -1 is negative"),
        (
            {"compression": "GZIP_OFFLOAD_DECOMPRESSION", "stores": ["file:///a/root/"]},
            "GZIP_OFFLOAD_DECOMPRESSION",
        ),
        ({"compression": "GZIP_OFFLOAD_DECOMPRESSION"}, None),  # only a file:// first store is refused
        ({"refresh_interval": 0.001}, "refresh_interval 1ms is out of range"),
        ({"refresh_interval": "25h"}, "refresh_interval 25h is out of range (expected 1s..24h)"),
        ({"flush_interval": "1s"}, "flush_interval 1s is too short"),
        ({"flush_interval": "2h"}, None),
        ({"path_postfix_template": "{{ bad template"}, "path_postfix_template"),
        ({"path_postfix_template": ""}, None),
        ({"stores": ["s3://bucket/path/", "gs://other-bucket/path/", "invalid"]}, "stores[2]"),
        ({"retention": "-1h"}, None),  # all retentions are allowed
        ({"suspend_offset": -1}, "suspend_offset -1 is negative"),
        ({"suspend_level": "FULL", "suspend_offset": 1234}, None),
    ],
)
def test_spec_validation_cases(changes: dict, error: str | None) -> None:
    spec = BASE_SPEC.replace(**changes)
    if error is None:
        spec.validate()
    else:
        with pytest.raises(ValidationError) as exc:
            spec.validate()
        assert error in str(exc.value)


@pytest.mark.parametrize("field, value", [("flags", 5), ("flags", 6), ("flags", 3), ("compression", 9999),
                                          ("suspend_level", 12345)])  # fmt: skip
def test_spec_refuses_invalid_enum_values(field: str, value: int) -> None:
    """Gazette's Flags combinations, CompressionCodec and Suspend.Level variants that don't exist."""
    with pytest.raises(ValidationError):
        BASE_SPEC.replace(**{field: value})


@pytest.mark.parametrize(
    "url, error",
    [
        ("s3://my-bucket/?query", None),
        ("s3://my-bucket/subpath/?query", None),
        ("file:///mnt/path/", None),
        ("file:///mnt/path/?query", None),
        ("s3://my-bucket", 'path "" does not end in "/"'),
        ("s3://my-bucket/subpath?query", 'path "/subpath" does not end in "/"'),
        (":garbage: :garbage:", "not an absolute URL"),
        ("foobar://baz/", 'unsupported scheme "foobar"'),
        ("/baz/bing/", "not an absolute URL"),
        ("gs:///baz/bing/", "has no bucket"),
        ("file://host/mnt/path/", "file:// URL with a host"),
        ("file:///mnt/path", 'path "/mnt/path" does not end in "/"'),
    ],
)
def test_fragment_store_validation(url: str, error: str | None) -> None:
    if error is None:
        validate_store_url(url)
    else:
        with pytest.raises(ValidationError) as exc:
            validate_store_url(url)
        assert error in str(exc.value)


# ---- the journalspace YAML hierarchy (broker/journalspace/node_test.go) ----------------------------

# Fields every journal needs: Gazette's specs have no defaults, so its fixtures leave them out; ours
# are complete here so the changes compare whole.
FULL_FIELDS = "fragment: {length: 1024, compression_codec: SNAPPY, refresh_interval: 1m}"
FULL = FULL_FIELDS + "\n"


def full(text: str) -> str:
    """`text` (a block or a flow mapping) with FULL_FIELDS added at its top."""
    return "{" + FULL_FIELDS + ", " + text[1:] if text.startswith("{") else FULL + text


def _changes(text: str) -> list[tuple[str, int, bool]]:
    return [(c.spec.name, c.expect_mod_revision, c.delete) for c in load_specs_yaml(text)]


@pytest.mark.parametrize(
    "text, error",
    [
        ("name: dir/\nrevision: 1\nchildren: [{name: dir/foo}]", '"revision" is allowed only on journals'),
        ("name: dir/\nrevision: 0\nchildren: [{name: dir/foo}]", None),  # a zero revision is no revision
        ("name: dir/", "needs children"),
        ("name: dir/\nchildren: [{name: foo}, {name: bar}]", 'name is not under its parent directory "dir/"'),
        (
            "name: dir/\nchildren: [{name: dir/foo}, {name: dir/bar}]",
            'children are not in name order ("dir/bar" at children[1] follows "dir/foo")',
        ),
        ("name: dir/\nchildren: [{name: dir/bar}, {name: dir/foo}]", None),
        ("name: dir/\nchildren: [{name: dir/bar}, {name: dir/bar}]", "children are not in name order"),
        ("{name: invalid name, revision: 123}", "invalid character ' '"),
        ("{name: item, revision: 123, children: [{name: item/x}]}", "a journal cannot have children"),
        ("{name: item, revision: 123, children: []}", None),  # no children is fine
        ("{name: item, revision: 123}", None),
    ],
)
def test_node_validation_cases(text: str, error: str | None) -> None:
    text = full(text.replace("item", "it/em"))
    if error is None:
        load_specs_yaml(text)
    else:
        with pytest.raises(ValidationError) as exc:
            load_specs_yaml(text)
        assert error in str(exc.value)


@pytest.mark.parametrize("root", ["", "shared-root/"])
def test_push_down(root: str) -> None:
    text = f"""
{"name: " + root if root else ""}
replication: 1
{FULL}
children:
- name: {root}aaa/
  flags: O_RDWR
  children:
  - {{name: {root}aaa/111, flags: O_RDONLY}}  # overrides O_RDWR
  - {{name: {root}aaa/222}}
- name: {root}bbb/
  children:
  - name: {root}bbb/333/
    replication: 2  # overrides 1
    children:
    - name: {root}bbb/333/a/
      delete: true
      children:
      - {{name: {root}bbb/333/a/x, revision: 5}}
      - {{name: {root}bbb/333/a/y, delete: false}}  # kept, as gazctl: its own delete wins
    - {{name: {root}bbb/333/z}}
  - {{name: {root}bbb/444, replication: 3, flags: O_WRONLY}}
"""
    got = [(c.spec.name, c.delete, c.spec.replication, c.spec.flags.name) for c in load_specs_yaml(text)]
    assert got == [
        (root + "aaa/111", False, 1, "O_RDONLY"),
        (root + "aaa/222", False, 1, "O_RDWR"),
        (root + "bbb/333/a/x", True, 2, "NOT_SPECIFIED"),
        (root + "bbb/333/a/y", False, 2, "NOT_SPECIFIED"),
        (root + "bbb/333/z", False, 2, "NOT_SPECIFIED"),
        (root + "bbb/444", False, 3, "O_WRONLY"),
    ]


def test_spec_hoisting() -> None:
    common = dict(replication=2, flags="O_RDONLY", fragment_length=1024, refresh_interval="1m")
    doc = yaml.safe_load(
        dump_specs_yaml(
            [
                JournalSpec(name="node/aaa", labels=ls("name-1", "val-1"), **common),
                JournalSpec(name="node/bbb", labels=ls("name-1", "val-1", "name-2", "val-2"), **common),
            ]
        )
    )
    assert doc["name"] == "node/"
    assert (doc["replication"], doc["flags"], doc["labels"]) == (
        2,
        "O_RDONLY",
        [{"name": "name-1", "value": "val-1"}],
    )
    assert doc["children"] == [
        {"name": "node/aaa"},
        {"name": "node/bbb", "labels": [{"name": "name-2", "value": "val-2"}]},
    ]


def _shape(node: dict) -> object:
    """A dumped tree as nested (name, children) tuples."""
    if "children" not in node:
        return node["name"]
    return (node.get("name", ""), [_shape(c) for c in node["children"]])


def test_tree_extraction() -> None:
    names = [
        "root/aaa/000", "root/aaa/111/foo/i", "root/aaa/111/foo/j", "root/aaa/222",
        "root/bbb/333/a/x", "root/bbb/333/a/y", "root/bbb/333/z", "root/bbb/444",
    ]  # fmt: skip
    doc = yaml.safe_load(dump_specs_yaml([JournalSpec(name=n) for n in names]))
    assert _shape(doc) == (
        "root/",
        [
            (
                "root/aaa/",
                [
                    "root/aaa/000",
                    # 111/ and foo/ are one node: there are no journals under 111/ not also under foo/.
                    ("root/aaa/111/foo/", ["root/aaa/111/foo/i", "root/aaa/111/foo/j"]),
                    "root/aaa/222",
                ],
            ),
            (
                "root/bbb/",
                [
                    (
                        "root/bbb/333/",
                        [("root/bbb/333/a/", ["root/bbb/333/a/x", "root/bbb/333/a/y"]), "root/bbb/333/z"],
                    ),
                    "root/bbb/444",
                ],
            ),
        ],
    )


YAML_FIXTURE = """
name: foo/
replication: 3
labels:
- name: a-name
  value: a-val
fragment:
  length: 1234
  compression_codec: SNAPPY
  stores:
  - s3://a-bucket/
  - gcs://another-bucket/
  refresh_interval: 1m0s
  retention: 1h0m0s
  flush_interval: 2m0s
  path_postfix_template: foo={{ .Spool.Begin }}
flags: O_RDWR
max_append_rate: 11223344
children:
- delete: true
  name: foo/bar
  revision: -1
- name: foo/baz/1
- name: foo/baz/2
  labels:
  - name: other-name
    value: ""
  revision: 1234
"""


def test_yaml_fixture() -> None:
    """TestYAMLRoundTrip's fixture (with `revision: -1` on the deleted journal, which gazctl's apply
    needs too; and gazctl's `gcs://` store refused, as Gazette's JournalSpec validation does)."""
    with pytest.raises(ValidationError, match='unsupported scheme "gcs"'):
        load_specs_yaml(YAML_FIXTURE)
    changes = load_specs_yaml(YAML_FIXTURE, validate=False)
    assert [(c.spec.name, c.expect_mod_revision, c.delete) for c in changes] == [
        ("foo/bar", -1, True), ("foo/baz/1", 0, False), ("foo/baz/2", 1234, False)
    ]  # fmt: skip
    expected = JournalSpec(
        name="foo/baz/1",
        replication=3,
        labels=ls("a-name", "a-val"),
        fragment_length=1234,
        compression="SNAPPY",
        stores=["s3://a-bucket/", "gcs://another-bucket/"],
        refresh_interval="1m",
        retention="1h",
        flush_interval="2m",
        path_postfix_template="foo={{ .Spool.Begin }}",
        flags="O_RDWR",
        max_append_rate=11223344,
    )
    assert changes[1].spec == expected
    assert changes[2].spec == expected.replace(
        name="foo/baz/2", labels=ls("a-name", "a-val", "other-name", "")
    )
    # Listing the journals gives back the hoisted tree: shared fields at foo/, the rest below.
    specs = [(c.spec, c.expect_mod_revision) for c in changes[1:]]
    again = load_specs_yaml(dump_specs_yaml(specs), validate=False)
    assert [(c.spec, c.expect_mod_revision) for c in again] == specs
    doc = yaml.safe_load(dump_specs_yaml(specs))
    assert doc["name"] == "foo/baz/" and doc["replication"] == 3
    assert doc["children"] == [
        {"name": "foo/baz/1"},
        {"name": "foo/baz/2", "labels": [{"name": "other-name"}], "revision": 1234},
    ]


def test_delete_inherits_unless_set() -> None:
    text = (
        FULL
        + """
name: aa/
delete: true
children:
- {name: aa/del, revision: 3}
- name: aa/sub/
  delete: false
  children:
  - {name: aa/sub/gone, delete: true, revision: -1}
  - {name: aa/sub/kept}
- {name: aa/zz, delete: null, revision: 4}
"""
    )
    assert _changes(text) == [
        ("aa/del", 3, True), ("aa/sub/gone", -1, True), ("aa/sub/kept", 0, False), ("aa/zz", 4, True)
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, error",
    [
        ("{name: aa/bb, delete: true}", "delete needs a revision"),
        ("{name: aa/bb, delete: true, revision: -2}", "delete needs a revision"),
        ("{name: aa/bb, revision: -2}", "revision -2 is not valid (expected >= 0, or -1 for any)"),
        ("{name: aa/b b, delete: true, revision: 3}", "invalid character ' '"),
    ],
)
def test_apply_change_validation(text: str, error: str) -> None:
    """Gazette's ApplyRequest.Change rules, which gazctl's apply checks after flattening the tree."""
    with pytest.raises(ValidationError) as exc:
        load_specs_yaml(full(text))
    assert error in str(exc.value)


def test_comment_is_a_no_op() -> None:
    assert _changes(full("{name: aa/bb, comment: a note}")) == [("aa/bb", 0, False)]


# ---- CSV framing (message/csv_framing_test.go) -----------------------------------------------------

PRODUCER = bytes.fromhex("0b0000000001")


def test_csv_marshal_with_fixtures() -> None:
    u = build_uuid(PRODUCER, 1 << 20, Flags.OUTSIDE_TXN)
    framing = CSVFraming()
    first = framing.encode(["", "123", 'qu"ote'], u)
    assert first == f'{u},123,"qu""ote"\n'.encode()
    assert framing.encode(["", "567,891"], u) == f'{u},"567,891"\n'.encode()


def test_csv_decode_with_fixture() -> None:
    u = build_uuid(PRODUCER, 1 << 20, Flags.OUTSIDE_TXN)
    dec = CSVFraming().decoder("csv/j", 0)
    [env] = dec.feed(f"{u},bar,baz\n".encode())
    assert env.message == [str(u), "bar", "baz"]
    dec.close()  # ends on a record boundary


def test_csv_errors_if_fields_change() -> None:
    u = build_uuid(PRODUCER, 1 << 20, Flags.OUTSIDE_TXN)
    dec = CSVFraming().decoder("csv/j", 0)
    first, second = f"{u},foo,bar\n".encode(), f"{u},baz\n".encode()
    with pytest.raises(
        FramingError, match=r"has 2 fields, but the first record read \(at offset 0\) has 3"
    ) as exc:
        dec.feed(first + second)
    assert [e.message for e in exc.value.envelopes] == [[str(u), "foo", "bar"]]
    assert (exc.value.begin, exc.value.end) == (len(first), len(first) + len(second))


def test_csv_decode_error() -> None:
    with pytest.raises(FramingError, match="has UUID 'not-a-uuid'"):
        CSVFraming().decoder("csv/j", 0).feed(b"not-a-uuid, bar, baz\n")
