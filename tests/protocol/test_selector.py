"""LabelSelector: the string grammar, canonical text round trips, match semantics, proto and meta-labels."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gazette.protocol import LabelSelector, LabelSet, ValidationError
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.selector import SelectorLabel, journal_labels


def sel(include=(), exclude=()) -> LabelSelector:
    return LabelSelector(include, exclude)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", sel()),
        ("env=prod", sel([("env", "prod")])),
        ("env==prod", sel([("env", "prod")])),
        ("env = prod", sel([("env", "prod")])),
        ("env == prod", sel([("env", "prod")])),
        ("env!=prod", sel(exclude=[("env", "prod")])),
        (" env != prod ", sel(exclude=[("env", "prod")])),
        ("env in (prod,qa)", sel([("env", "prod"), ("env", "qa")])),
        ("env in(prod , qa )", sel([("env", "prod"), ("env", "qa")])),
        ("env notin (prod,qa)", sel(exclude=[("env", "prod"), ("env", "qa")])),
        ("env not in (prod, qa)", sel(exclude=[("env", "prod"), ("env", "qa")])),
        ("env not in(prod)", sel(exclude=[("env", "prod")])),
        ("env", sel([("env", "")])),
        ("!env", sel(exclude=[("env", "")])),
        ("! env", sel(exclude=[("env", "")])),
        ("name:prefix=a/b/", sel([("name", "a/b/", True)])),
        ("name:prefix != a/b/", sel(exclude=[("name", "a/b/", True)])),
        ("topic:prefix in (a/, b/)", sel([("topic", "a/", True), ("topic", "b/", True)])),
        ("topic:prefix notin (a/)", sel(exclude=[("topic", "a/", True)])),
        ("kk===v", sel([("kk", "=v")])),
        ("kk!==v", sel(exclude=[("kk", "=v")])),
        ("kk=a=b%c", sel([("kk", "a=b%c")])),
        ("in=notin", sel([("in", "notin")])),
        ("in in (in)", sel([("in", "in")])),
        ("notin notin (x)", sel(exclude=[("notin", "x")])),
        ("prefix", sel([("prefix", "")])),
        (
            "topic in (topic/one, topic/two), prefix=/my/journal/prefix",
            sel([("topic", "topic/one"), ("topic", "topic/two"), ("prefix", "/my/journal/prefix")]),
        ),
        (
            "env in (production, qa), tier not in (frontend,backend), partition",
            sel(
                [("env", "production"), ("env", "qa"), ("partition", "")],
                [("tier", "frontend"), ("tier", "backend")],
            ),
        ),
        ("env=a,env=b,!zz", sel([("env", "a"), ("env", "b")], [("zz", "")])),
        ("env=a, env=a", sel([("env", "a")])),
        ("ü-名前=値", sel([("ü-名前", "値")])),
        # As Gazette's grammar: an empty value is "any value", a trailing comma ends the selector,
        # ":prefix" may mark an any-value entry, and a value set may end in a comma.
        ("env=", sel([("env", "")])),
        ("env=,xx", sel([("env", ""), ("xx", "")])),
        ("env,", sel([("env", "")])),
        ("env=a ,", sel([("env", "a")])),
        ("env:prefix", sel([("env", "", True)])),
        ("!env:prefix", sel(exclude=[("env", "", True)])),
        ("env in (a,)", sel([("env", "a")])),
        ("env in ( )", sel([("env", "")])),
    ],
)
def test_parse(text: str, expected: LabelSelector) -> None:
    got = LabelSelector.parse(text)
    assert got == expected
    assert LabelSelector.parse(str(got)) == got


@pytest.mark.parametrize(
    "text, message",
    [
        # As Gazette's grammar: at most one space between parts, and no other whitespace.
        ("   ", 'at position 0: could not match "   " to a label selector expression'),
        ("env=a, ", 'at position 6: could not match " " to a label selector expression'),
        ("env  not   in(prod)", "at position 0: could not match"),
        ("env\t=a", "at position 0: could not match"),
        ("=prod", 'at position 0: could not match "=prod"'),
        ("env prod", "at position 0: could not match"),
        ("env in (a", "at position 0: could not match"),
        ("env in a", "at position 0: could not match"),
        ("env in ()", "at position 0: could not match"),
        ("env not (a)", "at position 0: could not match"),
        (",env", 'at position 0: could not match ",env"'),
        ("env,,", 'at position 4: could not match ","'),
        ("env=a b", "at position 0: could not match"),
        ("env:pre=a", "at position 0: could not match"),
        ("env:prefixx=a", "at position 0: could not match"),
        ("!env=a", "at position 0: could not match"),
        ("env=a;b", "at position 0: could not match"),
        ("env=(a)", "at position 0: could not match"),
        ("e=a", 'at position 0: could not match "e=a"'),
        ("aa=b, in in (x y)", 'at position 13: parsing " in in (x y)": could not match "x y" to a label'),
        ("env=" + "x" * 1025, "is too long"),
        ("x" * 65, "is too long"),
        # As Gazette's LabelSelector.Validate.
        ("foo, foo in (bar)", 'include label "foo" has both an empty value (any value) and the value "bar"'),
        ("!foo, foo!=bar", 'exclude label "foo" has both an empty value'),
        ("foo=a, foo:prefix=a", 'include label "foo" has the value "a" both as a prefix and exactly'),
    ],
)
def test_parse_errors_name_text_and_position(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        LabelSelector.parse(text)
    assert f'label selector "{text}" is not valid' in str(exc.value)
    assert message in str(exc.value)


def test_str_is_canonical() -> None:
    s = LabelSelector.parse(" tier notin (b, a), env=prod, !gone, topic:prefix in (x/, y/), any ")
    assert str(s) == "any, env=prod, topic:prefix in (x/, y/), !gone, tier notin (a, b)"
    assert str(LabelSelector.parse("kk:prefix, !kk:prefix")) == "kk:prefix, !kk:prefix"
    assert str(LabelSelector.parse("kk=a, kk:prefix=b")) == "kk=a, kk:prefix=b"
    assert str(LabelSelector.parse("kk===x")) == "kk===x"
    assert repr(LabelSelector.parse("kk=v")) == "LabelSelector('kk=v')"


def test_constructor_normalises() -> None:
    a = LabelSelector({"env": "prod"}, LabelSet([("tier", "x")]))
    b = LabelSelector([SelectorLabel("env", "prod")], [("tier", "x", False)])
    assert a == b and hash(a) == hash(b)
    # As Gazette, the prefix mark of an any-value entry is kept (it matches like "env").
    assert LabelSelector([("env", "", True)]).include == (SelectorLabel("env", "", True),)
    assert LabelSelector([("env", "", True)]).matches(LabelSet({"env": "x"}))
    assert LabelSelector([("bb", "2"), ("aa", "1")]).include == (
        SelectorLabel("aa", "1"),
        SelectorLabel("bb", "2"),
    )
    with pytest.raises(ValidationError, match='label name "e" is too short'):
        LabelSelector([("e", "x")])
    with pytest.raises(ValidationError, match="is not \\(name, value\\[, prefix\\]\\)"):
        LabelSelector([("env",)])  # type: ignore[list-item]
    assert not LabelSelector() and LabelSelector.parse("env")


LABELS = LabelSet(
    [
        ("env", "prod"),
        ("tier", "frontend"),
        ("topic", "clicks/eu"),
        ("app.gazette.dev/tag", "a"),
        ("app.gazette.dev/tag", "b"),
    ]
)


@pytest.mark.parametrize(
    "text, matched",
    [
        ("", True),
        ("env=prod", True),
        ("env=qa", False),
        ("env in (qa, prod)", True),
        ("env in (qa, dev)", False),
        ("env", True),
        ("missing", False),
        ("!missing", True),
        ("!env", False),
        ("env!=qa", True),
        ("env!=prod", False),
        ("missing!=x", True),
        ("env notin (qa, dev)", True),
        ("env notin (qa, prod)", False),
        ("env=prod, tier=frontend", True),
        ("env=prod, tier=backend", False),
        ("env=prod, tier!=frontend", False),
        ("app.gazette.dev/tag=b", True),
        ("app.gazette.dev/tag in (c, a)", True),
        ("app.gazette.dev/tag!=a", False),
        ("app.gazette.dev/tag notin (c, d)", True),
        ("topic:prefix=clicks/", True),
        ("topic:prefix=clicks/eu", True),
        ("topic:prefix=clicks/eu/", False),
        ("topic:prefix=views/", False),
        ("topic=clicks/", False),
        ("topic:prefix in (views/, clicks/)", True),
        ("topic:prefix!=clicks/", False),
        ("topic:prefix notin (views/)", True),
        ("env=prod, topic:prefix=clicks/, !missing, tier notin (backend)", True),
        ("env, tier, topic, missing", False),
        # Include values of one name are alternatives, even when mixing prefix and exact entries.
        ("topic=views, topic:prefix=clicks/", True),
    ],
)
def test_matches(text: str, matched: bool) -> None:
    assert LabelSelector.parse(text).matches(LABELS) is matched


def test_matches_empty_labels() -> None:
    assert LabelSelector.parse("!env, env2!=x, env3 notin (a)").matches(LabelSet())
    assert not LabelSelector.parse("env").matches(LabelSet())
    assert LabelSelector().matches(LabelSet())


def test_proto_round_trip() -> None:
    s = LabelSelector.parse("env in (prod, qa), topic:prefix=a/, !gone, tier!=x, name:prefix!=b/")
    msg = s.to_proto()
    assert isinstance(msg, pb.LabelSelector)
    assert [(lbl.name, lbl.value, lbl.prefix) for lbl in msg.include.labels] == [
        ("env", "prod", False),
        ("env", "qa", False),
        ("topic", "a/", True),
    ]
    assert LabelSelector.from_proto(msg) == s
    assert LabelSelector.from_proto(pb.LabelSelector.FromString(msg.SerializeToString())) == s
    assert LabelSelector.from_proto(None) == LabelSelector()
    assert LabelSelector.from_proto(pb.LabelSelector()) == LabelSelector()


def test_coerce() -> None:
    s = LabelSelector.parse("env=prod")
    assert LabelSelector.coerce(s) is s
    assert LabelSelector.coerce("env=prod") == s
    assert LabelSelector.coerce(s.to_proto()) == s
    assert LabelSelector.coerce(None) == LabelSelector()
    with pytest.raises(ValidationError, match="is not a label selector"):
        LabelSelector.coerce(42)  # type: ignore[arg-type]


def test_journal_meta_labels() -> None:
    labels = journal_labels(LabelSet({"topic": "clicks"}), "examples/clicks/part-000")
    assert labels == LabelSet([("name", "examples/clicks/part-000"), ("topic", "clicks")])

    s = LabelSelector.parse("prefix=examples/clicks/").for_journals()
    assert s == LabelSelector([("name", "examples/clicks/", True)])
    assert str(s) == "name:prefix=examples/clicks/"
    assert s.matches(labels)
    assert not LabelSelector.parse("prefix=examples/views/").for_journals().matches(labels)
    # "examples/cl" is not a directory of the journal name.
    with pytest.raises(ValidationError, match='selector label "prefix" value "examples/cl" must end in "/"'):
        LabelSelector.parse("prefix=examples/cl").for_journals()
    with pytest.raises(ValidationError, match='must end in "/"'):
        LabelSelector.parse("prefix").for_journals()

    assert LabelSelector.parse("name=examples/clicks/part-000").for_journals().matches(labels)
    assert not LabelSelector.parse("name=examples/clicks/part-001").for_journals().matches(labels)
    assert LabelSelector.parse("prefix in (a/, examples/)").for_journals().matches(labels)
    assert not LabelSelector.parse("prefix!=examples/").for_journals().matches(labels)
    assert LabelSelector.parse("prefix notin (a/, b/), topic=clicks").for_journals().matches(labels)
    # Terms on other labels pass through untouched.
    assert LabelSelector.parse("topic=x, !tier").for_journals() == LabelSelector.parse("topic=x, !tier")


_name = st.text(alphabet=st.sampled_from("abcxyz-_+/.é1"), min_size=2, max_size=8)
_value = st.text(alphabet=st.sampled_from("abcxyz-_+/.=%é1"), min_size=0, max_size=6)
_entry = st.tuples(_name, _value, st.booleans())


def _valid(entries: list) -> list:
    """The entries a selector may hold (Gazette's rules): per name, "" alone, and each value once."""
    by_name: dict[str, dict[str, tuple]] = {}
    for name, value, prefix in entries:
        by_name.setdefault(name, {}).setdefault(value, (name, value, prefix))
    out = []
    for values in by_name.values():
        out += [values[""]] if "" in values else list(values.values())
    return out


_entries = st.lists(_entry, max_size=6).map(_valid)


@given(_entries, _entries)
def test_str_parse_round_trip(include: list, exclude: list) -> None:
    s = LabelSelector(include, exclude)
    assert LabelSelector.parse(str(s)) == s
    assert LabelSelector.from_proto(s.to_proto()) == s


@given(
    st.lists(_entry, max_size=4).map(_valid),
    st.lists(_entry, max_size=4).map(_valid),
    st.lists(st.tuples(_name, _value), max_size=6),
)
def test_matches_agrees_with_definition(include: list, exclude: list, labels: list) -> None:
    s = LabelSelector(include, exclude)
    ls = LabelSet(labels)

    def hit(e: SelectorLabel) -> bool:
        return any(
            e.value == "" or (v.startswith(e.value) if e.prefix else v == e.value)
            for v in ls.values_of(e.name)
        )

    names = {e.name for e in s.include}
    expected = not any(hit(e) for e in s.exclude) and all(
        any(hit(e) for e in s.include if e.name == n) for n in names
    )
    assert s.matches(ls) is expected
