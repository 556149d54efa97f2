"""The path postfix template language: fields, escapes, rendering, and what a valid postfix is."""

import re

import pytest

from gazette.protocol import LabelSet, ValidationError
from gazette.protocol.postfix import render_postfix, validate_postfix_template

# 2024-03-05 14:07:09 UTC
T = 1709647629.0


def render(template: str, **kw: object) -> str:
    args: dict = {
        "journal": "examples/clicks/part-000",
        "begin": 4096,
        "end": 8192,
        "first_append_time": T,
        "registers": LabelSet({"tenant": "acme", "env": ""}),
    }
    args.update(kw)
    return render_postfix(template, **args)


@pytest.mark.parametrize(
    "template, rendered",
    [
        ("", ""),
        ("static", "static"),
        ("a/b/c", "a/b/c"),
        ("date={first_append:%Y-%m-%d}", "date=2024-03-05"),
        ("date={first_append}", "date=2024-03-05"),
        ("{first_append:%Y}/{first_append:%m}/{first_append:%d}/{first_append:%H}", "2024/03/05/14"),
        ("hour={first_append:%Y%m%dT%H%M%S}", "hour=20240305T140709"),
        ("{journal}", "examples/clicks/part-000"),
        ("from={begin}", "from=4096"),
        ("{begin:016x}-{end:016x}", "0000000000001000-0000000000002000"),
        ("tenant={registers.tenant}", "tenant=acme"),
        ("tenant={registers.tenant:none}", "tenant=acme"),
        ("env={registers.env:unset}", "env=unset"),
        ("x={registers.missing:unset}/y", "x=unset/y"),
        ("x={registers.missing}", "x="),
        ("{ journal }", "examples/clicks/part-000"),
    ],
)
def test_render(template: str, rendered: str) -> None:
    assert render(template) == rendered


def test_escaped_braces_parse_but_are_not_path_characters() -> None:
    # "{{" is a literal brace, not the start of a field: the failure is the path alphabet's.
    with pytest.raises(ValidationError, match=re.escape("postfix \"{2024}\" has invalid character '{'")):
        render("{{{first_append:%Y}}}")
    with pytest.raises(ValidationError, match=re.escape("postfix \"a{b}c\" has invalid character '{'")):
        validate_postfix_template("a{{b}}c")


def test_first_append_none_is_the_epoch() -> None:
    assert render("{first_append:%Y-%m-%d/%H}", first_append_time=None) == "1970-01-01/00"


def test_first_append_is_utc() -> None:
    assert render("{first_append:%H%M}", first_append_time=0.0) == "0000"
    assert render("{first_append:%H%M}", first_append_time=59 * 60.0) == "0059"


@pytest.mark.parametrize(
    "template",
    [
        "",
        "date={first_append:%Y-%m-%d}",
        "{first_append:%Y}/{first_append:%m}",
        "t={registers.tenant}",
        "{registers.tenant:none}/x",
        "{begin:x}",
        "{journal}/x",
    ],
)
def test_validate_accepts(template: str) -> None:
    validate_postfix_template(template)


@pytest.mark.parametrize(
    "template, message",
    [
        ("{", 'at position 0: unclosed "{"'),
        ("a}", 'at position 1: unmatched "}"'),
        ("x{journal", 'at position 1: unclosed "{"'),
        ("{a{b}", 'contains "{"'),
        ("{nope}", 'unknown field "{nope}" (expected one of journal, begin, end, first_append, registers.NAME)'),
        ("{}", 'unknown field "{}"'),
        ("{journal:x}", 'field "{journal}" takes no format'),
        ("{begin:zz}", 'field "{begin:zz}" has a bad format spec'),
        ("{registers.x}", 'label name "x" is too short'),
        ("{registers.a b}", "invalid character"),
        ("/abs", 'must not begin with "/"'),
        ("dir/", 'is not clean (expected "dir")'),
        ("a//b", 'is not clean (expected "a/b")'),
        ("..", 'must not have a ".." segment'),
        ("../up", 'must not have a ".." segment'),
        (".", 'must not have a "." segment'),
        ("a/../b", "is not clean"),
        ("has space", "invalid character ' '"),
        ("hour={first_append:%H:%M}", "invalid character ':'"),
        ("{registers.tenant}/x", 'must not begin with "/"'),
        ("x" * 513, "too long"),
    ],
)
def test_validate_rejects(template: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        validate_postfix_template(template)
    assert f'path_postfix_template "{template}"' in str(exc.value)
    assert message in str(exc.value)


def test_validate_uses_the_journal_name() -> None:
    validate_postfix_template("{journal}", journal="a/b/c")
    with pytest.raises(ValidationError, match="invalid character"):
        validate_postfix_template("{journal}", journal="a b")


def test_render_checks_the_result() -> None:
    with pytest.raises(ValidationError, match='"t={registers.tenant}" does not render a clean relative path'):
        render("t={registers.tenant}", registers=LabelSet({"tenant": "a/../b"}))
    with pytest.raises(ValidationError, match='must not begin with "/"'):
        render("{registers.tenant}/x", registers=LabelSet())
