"""path_postfix_template: the Go text/template subset Gazette evaluates, over Gazette's data.

Expected paths are worked out from Go's semantics (text/template, time.Format's reference layout,
fmt's verbs) for a spool whose first append was 2024-03-05T07:08:09.123456Z (a Tuesday, day 65 of a
leap year); they are what a Gazette broker writes for the same spool.
"""

import re

import pytest

from gazette.protocol import LabelSet, ValidationError
from gazette.protocol.codec import Codec
from gazette.protocol.postfix import render_postfix, validate_postfix_template

# 2024-03-05T07:08:09.123456Z
T = 1709622489.123456
JOURNAL = "examples/clicks/part-000"
REGISTERS = LabelSet([("tenant", "acme"), ("env", ""), ("multi", "b"), ("multi", "a")])
LABELS = LabelSet({"topic": "clicks", "content-type": "application/x-ndjson"})


def render(template: str, **kw: object) -> str:
    args: dict = {
        "journal": JOURNAL,
        "begin": 4096,
        "end": 8192,
        "first_append_time": T,
        "registers": REGISTERS,
        "labels": LABELS,
        "compression_codec": Codec.SNAPPY,
    }
    args.update(kw)
    return render_postfix(template, **args)


# Gazette's own examples: broker/protocol/protocol.proto (its doc comment, over two lines),
# journal_spec_extensions_test.go, kustomize/test/bases/environment/examples.journalspace.yaml and
# broker/journalspace/node_test.go.
GAZETTE_EXAMPLES = [
    (
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}',
        "date=2024-03-05/hour=07",
    ),
    (
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{\n    .Spool.FirstAppendTime.Format "15" }}',
        "date=2024-03-05/hour=07",
    ),
    ('date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}', "date=2024-03-05"),
    ("foo={{ .Spool.Begin }}", "foo=4096"),
]


@pytest.mark.parametrize("template, rendered", GAZETTE_EXAMPLES)
def test_gazette_examples(template: str, rendered: str) -> None:
    assert render(template) == rendered
    validate_postfix_template(template)


@pytest.mark.parametrize(
    "template, rendered",
    [
        ("", ""),
        ("static", "static"),
        ("a/b=c/d", "a/b=c/d"),
        # The spool and the spec.
        ("{{ .Spool.End }}", "8192"),
        ("{{.Spool.Begin}}-{{.Spool.End}}", "4096-8192"),
        ("{{ .Spool.Fragment.Begin }}", "4096"),
        ("{{ .Spool.Journal }}", JOURNAL),
        ("{{ .Spool.Fragment.Journal }}", JOURNAL),
        ("{{ .JournalSpec.Name }}", JOURNAL),
        ("{{ .Name }}", JOURNAL),
        ("{{ $.Spool.Begin }}", "4096"),
        ("codec={{ .Spool.CompressionCodec }}", "codec=SNAPPY"),
        ("ext{{ .Spool.CompressionCodec.ToExtension }}", "ext.sz"),
        ("t={{ .Spool.ModTime }}{{ .Spool.PathPostfix }}", "t=0"),
        # time.Time: Go's reference-time layouts, in UTC.
        ('{{ .Spool.FirstAppendTime.Format "20060102T150405" }}', "20240305T070809"),
        ('{{ .Spool.FirstAppendTime.Format "2006/01/02/15" }}', "2024/03/05/07"),
        ('{{ .Spool.FirstAppendTime.Format "Jan_January_Mon_Monday" }}', "Mar_March_Tue_Tuesday"),
        ('{{ .Spool.FirstAppendTime.Format "06-1-2-002" }}', "24-3-5-065"),
        ('{{ .Spool.FirstAppendTime.Format "3PM-03pm-4-04-5-05" }}', "7AM-07am-8-08-9-09"),
        ('{{ .Spool.FirstAppendTime.Format "05.000-05.000000-05.999999999" }}', "09.123-09.123456-09.123456"),
        ('{{ .Spool.FirstAppendTime.Format "MST-0700Z07:00" }}', "UTC+0000Z"),
        ('{{ .Spool.FirstAppendTime.Format "" }}x', "x"),
        ("{{ .Spool.FirstAppendTime.Unix }}", "1709622489"),
        ("{{ .Spool.FirstAppendTime.UnixMilli }}", "1709622489123"),
        ("{{ .Spool.FirstAppendTime.UTC.Year }}", "2024"),
        ("{{ .Spool.FirstAppendTime.Month }}-{{ .Spool.FirstAppendTime.Weekday }}", "March-Tuesday"),
        ("{{ .Spool.FirstAppendTime.YearDay }}", "65"),
        (
            'year={{ .Spool.FirstAppendTime.Year }}/month={{ printf "%02d" .Spool.FirstAppendTime.Month }}',
            "year=2024/month=03",
        ),
        # printf, print and pipelines.
        ('{{ printf "%016x" .Spool.Begin }}', "0000000000001000"),
        ('{{ .Spool.End | printf "%016x" }}', "0000000000002000"),
        ('{{ printf "%d-%d" .Spool.Begin .Spool.End }}', "4096-8192"),
        (
            '{{ printf "%05d" 42 }}_{{ printf "%x" 255 }}_{{ printf "%#o" 8 }}_{{ printf "%s" .Spool.Journal }}',
            "00042_ff_010_" + JOURNAL,
        ),
        ('{{ printf "%.3s" "abcdef" }}{{ printf "100%%" }}', "abc100%"),
        ('{{ print "a" 1 "b" 2 .Spool.Journal }}', "a1b2" + JOURNAL),
        ('{{ (.Spool.FirstAppendTime).Year | printf "y%d" }}', "y2024"),
        # Constants.
        ('{{ "lit" }}{{ `raw` }}{{ 0x1F }}{{ -3 }}{{ true }}', "litraw31-3true"),
        # Registers and labels: LabelSet values, ValueOf and ValuesOf.
        ('tenant={{ .Spool.Registers.ValueOf "tenant" }}', "tenant=acme"),
        ('x={{ .Spool.Registers.ValueOf "missing" }}', "x="),
        ('{{ or (.Spool.Registers.ValueOf "env") "unset" }}', "unset"),
        ('{{ or (.Spool.Registers.ValueOf "tenant") "unset" }}', "acme"),
        ('{{ index (.Spool.Registers.ValuesOf "multi") 1 }}', "b"),
        ('{{ .Spool.Registers.ValueOf "multi" }}', "a"),
        ("{{ (index .Spool.Registers.Labels 0).Name }}={{ len .Spool.Registers.Labels }}", "env=4"),
        ('{{ .JournalSpec.LabelSet.ValueOf "topic" }}/{{ .ValueOf "topic" }}', "clicks/clicks"),
        ('{{ .JournalSpec.ValueOf "content-type" }}', "application/x-ndjson"),
        # Trim markers and comments.
        ("a  {{- .Spool.Begin -}}  /b", "a4096/b"),
        ("a{{ .Spool.Begin -}}\n\n/b", "a4096/b"),
        ("a {{- /* a comment */ -}} b", "ab"),
        ("{{/* a comment */}}a", "a"),
        ("a{{-3}}", "a-3"),
        ("a {{- 3}}", "a3"),
        # A trailing "|" is accepted, as Go does.
        ("{{ .Spool.Begin | }}", "4096"),
    ],
)
def test_render(template: str, rendered: str) -> None:
    assert render(template) == rendered


def test_first_append_time_none_is_gos_zero_time() -> None:
    template = '{{ .Spool.FirstAppendTime.Format "2006-01-02/15" }}/{{ .Spool.FirstAppendTime.IsZero }}'
    assert render(template, first_append_time=None) == "0001-01-01/00/true"
    assert render(template, first_append_time=0.0) == "1970-01-01/00/false"
    assert render("{{ .Spool.FirstAppendTime.Unix }}", first_append_time=None) == "-62135596800"


def test_first_append_time_is_utc() -> None:
    assert render('{{ .Spool.FirstAppendTime.Format "1504" }}', first_append_time=59 * 60.0) == "0059"
    assert render('{{ .Spool.FirstAppendTime.Format "2006-01-02" }}', first_append_time=-1.0) == "1969-12-31"


def test_labels_and_codec_default_to_gos_zero_values() -> None:
    args = {"journal": JOURNAL, "begin": 0, "end": 0, "first_append_time": T, "registers": LabelSet()}
    assert render_postfix('x{{ .JournalSpec.ValueOf "topic" }}', **args) == "x"
    assert render_postfix("{{ .Spool.CompressionCodec }}", **args) == "INVALID"


@pytest.mark.parametrize(
    "template",
    [
        "",
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        't={{ .Spool.Registers.ValueOf "tenant" }}',
        '{{ or (.Spool.Registers.ValueOf "tenant") "none" }}/x',
        '{{ printf "%x" .Spool.Begin }}',
        "{{ .Spool.Journal }}/x",
        "{{ .Name }}/{{ .Spool.CompressionCodec }}",
    ],
)
def test_validate_accepts(template: str) -> None:
    validate_postfix_template(template)


# (template, position, what is wrong). Like Go, parse errors come first, in template order, then
# execution errors on the zero value (offsets 0, the zero time, no registers or labels, codec INVALID).
@pytest.mark.parametrize(
    "template, pos, message",
    [
        # Go's syntax. Gazette's own test: `{{ bad template` fails on the function before the action.
        ("{{ bad template", 3, 'function "bad" not defined'),
        ("x/{{ .Spool.Begin", 2, "unclosed action"),
        ("{{ }}", 3, "missing value for command"),
        ("{{ | }}", 3, 'unexpected "|" in command'),
        ("{{ ( .Spool.Begin }}", 18, "unclosed left paren"),
        ("{{ .Spool.Begin ) }}", 16, "unexpected right paren"),
        ('{{ "open }}', 3, "unterminated quoted string"),
        ("{{ 12a }}", 3, "bad number syntax"),
        ("{{ .Spool.Begin, }}", 15, 'unexpected "," in operand'),
        ("{{/* c */ }}", 0, "comment ends before closing delimiter"),
        ("{{/* c }}", 0, "unclosed comment"),
        ('{{ "a" | "b" }}', 9, "non executable command in pipeline stage 2"),
        ("{{ $x }}", 3, 'undefined variable "$x"'),
        # Execution on Gazette's data.
        ("x{{ .Spool.Nope }}", 4, "at <.Spool.Nope>: can't evaluate field Nope in type fragment.Spool"),
        ("{{ .Foo }}", 3, "can't evaluate field Foo"),
        ("{{ .Begin }}", 3, "can't evaluate field Begin"),  # only .Spool.Begin, as Gazette validates
        ("{{ .Spool.FirstAppendTime.Format }}", 3, "wrong number of args for Format: want 1 got 0"),
        ("{{ .Spool.FirstAppendTime.Format 15 }}", 33, "at <15>: expected string; found 15"),
        ("{{ .Spool.FirstAppendTime.Format .Spool.Journal }}", 33, "expected string; got protocol.Journal"),
        ("{{ .Spool.Begin 5 }}", 3, "Begin has arguments but cannot be invoked as function"),
        ("{{ .Spool.Begin.Format 5 }}", 3, "can't evaluate field Format in type int64"),
        ('{{ "x" 5 }}', 3, "can't give argument to non-function"),
        ("{{ .Spool.Registers.ValueOf }}", 3, "wrong number of args for ValueOf: want 1 got 0"),
        (
            "{{ .Spool.CompressionCodec.ToExtension }}",
            3,
            "error calling ToExtension: invalid CompressionCodec",
        ),
        ("{{ index .Spool.Registers.Labels 0 }}", 3, "error calling index: index out of range: 0"),
        ('{{ .Spool.Begin | printf "%d-%d" }}', 18, "no argument for %d"),
        ('{{ printf "%s" 5 }}', 3, "%s does not apply to a int"),
        # Go would print these, but as braces or with spaces: no path.
        ("{{ .Spool.Registers }}", 3, "printing a protocol.LabelSet"),
        ("{{ . }}", 3, "printing a struct"),
        # Outside the supported subset.
        ("{{ if .Spool.Begin }}x{{ end }}", 3, "{{if}} and the other control actions are outside the subset"),
        ("{{ $x := 1 }}", 3, "variable declarations are outside the subset"),
        ("{{ eq 1 1 }}", 3, 'function "eq" is outside the subset'),
        ("{{ 1.5 }}", 3, "floating-point and complex constants are outside the subset"),
        ("{{ 'a' }}", 3, "character constants are outside the subset"),
        ("{{ .Spool.Sum }}", 3, "Sum of fragment.Spool is Gazette data outside the subset"),
        ("{{ .JournalSpec.Replication }}", 3, "Replication of protocol.JournalSpec is Gazette data outside"),
        ("{{ .Fragment.Length }}", 3, "ambiguous with .Spool.Fragment"),
        ("{{ .Spool.FirstAppendTime.Local }}", 3, "Local of time.Time is Gazette data outside the subset"),
    ],
)
def test_validate_rejects_with_position(template: str, pos: int, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_postfix_template(template)
    text = str(exc.value)
    assert text.startswith(f'path_postfix_template "{template}" is not valid at position {pos}: '), text
    assert message in text


@pytest.mark.parametrize(
    "template, message",
    [
        ("/abs", 'must not begin with "/"'),
        ("dir/", 'is not clean (expected "dir")'),
        ("a//b", 'is not clean (expected "a/b")'),
        ("..", 'must not have a ".." segment'),
        ("../up", 'must not have a ".." segment'),
        (".", 'must not have a "." segment'),
        ("a/../b", "is not clean"),
        ("has space", "invalid character ' '"),
        ('hour={{ .Spool.FirstAppendTime.Format "15:04" }}', "invalid character ':'"),
        (
            "{{ .Spool.FirstAppendTime }}",
            'path postfix "0001-01-01 00:00:00 +0000 UTC" has invalid character',
        ),
        ('{{ .Spool.Registers.ValueOf "tenant" }}/x', 'must not begin with "/"'),
        ("{{ .Spool.Begin }}}", "invalid character '}'"),  # the last "}" is text, as in Go
        ("x" * 513, "too long"),
    ],
)
def test_validate_rejects_what_does_not_render_a_clean_relative_path(template: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_postfix_template(template)
    assert f'path_postfix_template "{template}" does not render a clean relative path' in str(exc.value)
    assert message in str(exc.value)


def test_render_checks_the_result() -> None:
    template = 't={{ .Spool.Registers.ValueOf "tenant" }}'
    with pytest.raises(
        ValidationError, match=re.escape(f'"{template}" does not render a clean relative path')
    ):
        render(template, registers=LabelSet({"tenant": "a/../b"}))
    with pytest.raises(ValidationError, match=re.escape("path postfix \"t=a b\" has invalid character ' '")):
        render(template, registers=LabelSet({"tenant": "a b"}))


def test_validate_uses_the_journal_name() -> None:
    validate_postfix_template("{{ .Spool.Journal }}", journal="a/b/c")
    with pytest.raises(ValidationError, match="invalid character"):
        validate_postfix_template("{{ .JournalSpec.Name }}", journal="a b")


def test_validate_rejects_a_non_string() -> None:
    with pytest.raises(ValidationError, match="path_postfix_template 5 is not a string"):
        validate_postfix_template(5)  # type: ignore[arg-type]


# The former single-brace syntax: (template, position of the field, the Gazette form shown, the whole
# template in Gazette's syntax or None, what the former syntax rendered for the test spool).
OLD_SYNTAX = [
    ("{journal}", 0, "{{ .Spool.Journal }}", "{{ .Spool.Journal }}", JOURNAL),
    ("{ journal }", 0, "{{ .Spool.Journal }}", "{{ .Spool.Journal }}", JOURNAL),
    (
        "date={first_append:%Y-%m-%d}",
        5,
        '{{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        "date=2024-03-05",
    ),
    (
        "d={first_append}",
        2,
        '{{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        'd={{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        "d=2024-03-05",
    ),
    (
        "date={first_append:%Y-%m-%d}/hour={first_append:%H}",
        5,
        '{{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}',
        "date=2024-03-05/hour=07",
    ),
    (
        "{first_append:%Y%m%dT%H%M%S}",
        0,
        '{{ .Spool.FirstAppendTime.Format "20060102T150405" }}',
        '{{ .Spool.FirstAppendTime.Format "20060102T150405" }}',
        "20240305T070809",
    ),
    # Literal digits would be layout elements in Go: they stay outside the action.
    (
        "{first_append:v1-%Y}",
        0,
        'v1-{{ .Spool.FirstAppendTime.Format "2006" }}',
        'v1-{{ .Spool.FirstAppendTime.Format "2006" }}',
        "v1-2024",
    ),
    (
        "{begin:016x}",
        0,
        '{{ printf "%016x" .Spool.Begin }}',
        '{{ printf "%016x" .Spool.Begin }}',
        "0000000000001000",
    ),
    (
        "from={begin}/to={end}",
        5,
        "{{ .Spool.Begin }}",
        "from={{ .Spool.Begin }}/to={{ .Spool.End }}",
        "from=4096/to=8192",
    ),
    (
        "t={registers.tenant}",
        2,
        '{{ .Spool.Registers.ValueOf "tenant" }}',
        't={{ .Spool.Registers.ValueOf "tenant" }}',
        "t=acme",
    ),
    (
        "env={registers.env:unset}",
        4,
        '{{ or (.Spool.Registers.ValueOf "env") "unset" }}',
        'env={{ or (.Spool.Registers.ValueOf "env") "unset" }}',
        "env=unset",
    ),
]


@pytest.mark.parametrize("template, pos, form, whole, rendered", OLD_SYNTAX)
def test_former_syntax_is_refused_with_the_gazette_form(
    template: str, pos: int, form: str, whole: str, rendered: str
) -> None:
    for check in (validate_postfix_template, render):
        with pytest.raises(ValidationError) as exc:
            check(template)
        text = str(exc.value)
        assert text.startswith(f'path_postfix_template "{template}" is not valid at position {pos}: '), text
        assert "former template syntax" in text and "writes out literally" in text
        assert f"in Gazette's syntax: {form}" in text
        assert f"(the whole template: {whole})" in text
    # The Gazette form renders what the former syntax did.
    validate_postfix_template(whole)
    assert render(whole) == rendered


@pytest.mark.parametrize(
    "template, pos",
    [("{nope}", 0), ("x/{journal", 2), ("a/{first_append:%Q}", 2), ("{{ .Spool.Begin }}/{journal}", 19)],
)
def test_former_syntax_without_a_simple_equivalent_still_gets_a_hint(template: str, pos: int) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_postfix_template(template)
    text = str(exc.value)
    assert text.startswith(f'path_postfix_template "{template}" is not valid at position {pos}: '), text
    assert "former template syntax" in text
    assert "{{" in text.split(": ", 1)[1]  # shows Gazette's syntax


def test_former_escaped_braces_are_go_actions_now() -> None:
    # "{{" was a literal brace; in Go it opens an action.
    with pytest.raises(ValidationError, match='position 3: function "x" not defined'):
        validate_postfix_template("a{{x}}b")
