"""Naming and token rules of reference 1.1, each accepted and rejected with a message naming the rule."""

import pytest

from gazette.protocol import LabelSet, ValidationError
from gazette.protocol.validate import (
    clean_path,
    split_journal_meta,
    validate_journal_name,
    validate_label_name,
    validate_label_value,
    validate_labels,
    validate_shard_id,
    validate_suffix,
    validate_zone,
)

JOURNAL_RESERVED = {"name", "prefix"}


@pytest.mark.parametrize(
    "name",
    [
        "abcd",
        "a/b/c",
        "examples/words/part-000",
        "x" * 512,
        "a=b/c%20d",
        "a+b_c.d-e",
        "日本語/ジャーナル",
        "über/straße",
        "a1/٣٤",  # Arabic-Indic digits are Unicode digits
        "a/..b",  # ".." only as a whole segment is unclean
    ],
)
def test_journal_name_accepts(name: str) -> None:
    validate_journal_name(name)


@pytest.mark.parametrize(
    "name, message",
    [
        ("ab", 'journal name "ab" is too short (4..512 characters)'),
        ("", 'journal name "" is too short (4..512 characters)'),
        ("x" * 513, "is too long (513 characters; expected 4..512)"),
        ("a//b", 'journal name "a//b" is not clean (expected "a/b")'),
        ("a/b/", 'journal name "a/b/" is not clean (expected "a/b")'),
        ("./abc", 'journal name "./abc" is not clean (expected "abc")'),
        ("a/./b", 'journal name "a/./b" is not clean (expected "a/b")'),
        ("a/../bc", 'journal name "a/../bc" is not clean (expected "bc")'),
        ("/abc", 'journal name "/abc" must not begin with "/"'),
        ("a b/c", "invalid character ' ' at position 1"),
        ("abc#d", "invalid character '#' at position 3"),
        ("abc:d", "invalid character ':'"),
        ("abc*d", "invalid character '*'"),
        ("ab!cd", "invalid character '!'"),
        ("ab\ncd", "invalid character '\\n'"),
    ],
)
def test_journal_name_rejects(name: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_journal_name(name)
    assert message in str(exc.value)
    assert "journal name" in str(exc.value)


def test_every_character_at_or_below_hash_is_rejected() -> None:
    for code in range(0, ord("#") + 1):
        with pytest.raises(ValidationError, match="invalid character"):
            validate_journal_name(f"abc{chr(code)}d")
        with pytest.raises(ValidationError, match="invalid character"):
            validate_label_value(f"v{chr(code)}")


def test_journal_meta_suffix() -> None:
    assert split_journal_meta("a/b/c;reader-1") == ("a/b/c", "reader-1")
    assert split_journal_meta("a/b/c") == ("a/b/c", "")
    assert split_journal_meta("a/b;x;y") == ("a/b", "x;y")
    validate_journal_name("a/b/c;reader-1", allow_meta=True)
    validate_journal_name("a/b/c", allow_meta=True)
    with pytest.raises(
        ValidationError, match='metadata suffix ";reader-1", which is allowed only in requests'
    ):
        validate_journal_name("a/b/c;reader-1")
    with pytest.raises(ValidationError, match="metadata suffix .* is too short"):
        validate_journal_name("a/b/c;", allow_meta=True)
    with pytest.raises(ValidationError, match="is not clean"):
        validate_journal_name("a/b/c;x//y", allow_meta=True)
    with pytest.raises(ValidationError, match="invalid character ';'"):
        validate_journal_name("a/b/c;x;y", allow_meta=True)
    with pytest.raises(ValidationError, match='journal name "ab" is too short'):
        validate_journal_name("ab;meta", allow_meta=True)


def test_clean_path_matches_go() -> None:
    cases = {
        "": ".",
        "a/b": "a/b",
        "a//b": "a/b",
        "a/b/": "a/b",
        "./a": "a",
        "a/../b": "b",
        "../a": "../a",
        "a/../..": "..",
        "/../a": "/a",
        "//a": "/a",
        "/": "/",
        "a/.": "a",
    }
    for given, expected in cases.items():
        assert clean_path(given) == expected, given


@pytest.mark.parametrize("name", ["ab", "x" * 64, "content-type", "app.gazette.dev/message-type", "a_b+c"])
def test_label_name_accepts(name: str) -> None:
    validate_label_name(name)


@pytest.mark.parametrize(
    "name, message",
    [
        ("x", 'label name "x" is too short (2..64 characters)'),
        ("x" * 65, 'label name "' + "x" * 65 + '" is too long (65 characters; expected 2..64)'),
        ("a=b", "label name \"a=b\" has invalid character '=' at position 1"),
        ("a%b", "invalid character '%'"),
        ("a b", "invalid character ' '"),
        ("a:b", "invalid character ':'"),
    ],
)
def test_label_name_rejects(name: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_label_name(name)
    assert message in str(exc.value)


@pytest.mark.parametrize("value", ["", "v", "a=b%c/d.e", "x" * 1024])
def test_label_value_accepts(value: str) -> None:
    validate_label_value(value)


@pytest.mark.parametrize("value, message", [("x" * 1025, "too long"), ("a b", "' '"), ("a,b", "','")])
def test_label_value_rejects(value: str, message: str) -> None:
    with pytest.raises(ValidationError, match="label value") as exc:
        validate_label_value(value)
    assert message in str(exc.value)


def test_label_value_error_names_the_label() -> None:
    with pytest.raises(ValidationError, match='value of label "topic" "a b" has invalid character'):
        validate_label_value("a b", name="topic")


TOKEN_RULES = [
    (
        validate_zone,
        "zone",
        ["z", "us-east-1a", "z" * 32],
        [("", "too short (1..32"), ("z" * 33, "too long"), ("a=b", "'='")],
    ),
    (
        validate_suffix,
        "process suffix",
        ["broker-1", "x" * 128],
        [("abc", "too short (4..128"), ("x" * 129, "too long"), ("ab%cd", "'%'")],
    ),
    (
        validate_shard_id,
        "shard id",
        ["count-000", "x" * 512],
        [("abc", "too short (4..512"), ("x" * 513, "too long"), ("ab=cd", "'='")],
    ),
]


@pytest.mark.parametrize("check, what, good, bad", TOKEN_RULES, ids=[r[1] for r in TOKEN_RULES])
def test_zone_suffix_shard_id(check, what, good, bad) -> None:
    for value in good:
        check(value)
    for value, message in bad:
        with pytest.raises(ValidationError, match=what) as exc:
            check(value)
        assert message in str(exc.value)


def test_labels_accept_valid_sets() -> None:
    validate_labels(LabelSet(), JOURNAL_RESERVED)
    validate_labels(
        LabelSet(
            [
                ("content-type", "application/x-ndjson"),
                ("app.gazette.dev/message-type", "Word"),
                ("app.gazette.dev/message-subtype", "Small"),
                ("app.gazette.dev/tag", "one"),
                ("app.gazette.dev/tag", "two"),
                ("topic", ""),
            ]
        ),
        JOURNAL_RESERVED,
    )


@pytest.mark.parametrize(
    "labels, message",
    [
        ([("name", "x")], 'label "name" is reserved'),
        ([("prefix", "x/")], 'label "prefix" is reserved'),
        ([("x", "v")], 'label name "x" is too short'),
        ([("topic", "a b")], 'value of label "topic" "a b" has invalid character'),
        ([("content-type", "a/b"), ("content-type", "c/d")], 'label "content-type" must have a single value'),
        ([("app.gazette.dev/region", "a"), ("app.gazette.dev/region", "b")], "must have a single value"),
        ([("app.gazette.dev/managed-by", "a"), ("app.gazette.dev/managed-by", "b")], "single value"),
        ([("app.gazette.dev/instance", "a"), ("app.gazette.dev/instance", "b")], "single value"),
        ([("content-type", "not-a-mime")], 'label "content-type" value "not-a-mime" is not a MIME type'),
        ([("content-type", "text/")], "is not a MIME type"),
        ([("content-type", "/csv")], "is not a MIME type"),
        ([("content-type", "text/csv/x")], "is not a MIME type"),
        ([("content-type", "text/csv; charset=utf-8")], "has invalid character ';'"),
        ([("app.gazette.dev/message-type", "Word")], 'requires a "content-type" label'),
        (
            [("content-type", "text/csv"), ("app.gazette.dev/message-subtype", "S")],
            'label "app.gazette.dev/message-subtype" requires a "app.gazette.dev/message-type" label',
        ),
        ([("topic", ""), ("topic", "x")], 'label "topic" has both an empty and a non-empty value'),
    ],
)
def test_labels_reject(labels: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_labels(LabelSet(labels), JOURNAL_RESERVED)
    assert message in str(exc.value)


def test_shard_reserved_label() -> None:
    validate_labels(LabelSet([("name", "x")]), {"id"})
    with pytest.raises(ValidationError, match='label "id" is reserved'):
        validate_labels(LabelSet([("id", "x")]), {"id"})


def test_media_type_parameters() -> None:
    from gazette.protocol.validate import validate_media_type

    validate_media_type("text/csv")
    validate_media_type("application/x-ndjson; charset=utf-8")
    validate_media_type('text/plain; charset="us ascii"; format=flowed')
    for bad in ["text", "text/csv;charset", "text/csv; charset=", "te xt/csv", ""]:
        with pytest.raises(ValidationError, match="is not a MIME type"):
            validate_media_type(bad)
