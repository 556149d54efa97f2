"""The template language of `fragment.path_postfix_template` (this project's own, not Go's text/template).

A template is literal text with fields in braces; `{{` and `}}` quote literal braces (which parse, but
fall outside the path alphabet, so a template that renders one is invalid):
  {journal}               the journal name
  {begin} {end}           the fragment's offsets; an optional Python format spec, e.g. {begin:016x}
  {first_append:FMT}      the spool's first append time in UTC through strftime FMT (default %Y-%m-%d)
  {registers.NAME}        the value of register label NAME ("" when absent); {registers.NAME:DEFAULT}
                          renders DEFAULT when the register is absent or empty
e.g. `date={first_append:%Y-%m-%d}/hour={first_append:%H}`. The rendered postfix is "" or a clean
relative path in the journal-name alphabet (no leading or trailing "/", no "." or ".." segments), and a
template is valid only if it parses and renders so on the zero value (offsets 0, time unix 0, no registers).
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass

from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.validate import validate_label_name, validate_path_component

POSTFIX_LEN = (0, 512)
DEFAULT_TIME_FORMAT = "%Y-%m-%d"
_FIELDS = "journal, begin, end, first_append, registers.NAME"
# The journal a template is checked with when no spec name is at hand.
PLACEHOLDER_JOURNAL = "examples/journal"


@dataclass(frozen=True, slots=True)
class _Field:
    kind: str  # "journal" | "begin" | "end" | "first_append" | "register"
    arg: str  # register name
    spec: str | None  # format spec, strftime format or register default


_Part = str | _Field


def _error(template: str, pos: int, rule: str) -> ValidationError:
    return ValidationError(f'path_postfix_template "{template}" is not valid at position {pos}: {rule}')


@functools.lru_cache(maxsize=256)
def _compile(template: str) -> tuple[_Part, ...]:
    parts: list[_Part] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "{" and template.startswith("{{", i):
            literal.append("{")
            i += 2
        elif c == "}":
            if not template.startswith("}}", i):
                raise _error(template, i, 'unmatched "}" (write "}}" for a literal brace)')
            literal.append("}")
            i += 2
        elif c == "{":
            end = template.find("}", i + 1)
            if end == -1:
                raise _error(template, i, 'unclosed "{" (write "{{" for a literal brace)')
            body = template[i + 1 : end]
            if "{" in body:
                raise _error(template, i, f'field "{{{body}" contains "{{"')
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(_field(template, i, body))
            i = end + 1
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _field(template: str, pos: int, body: str) -> _Field:
    name, sep, spec = body.partition(":")
    name = name.strip()
    if name in ("begin", "end"):
        fspec = spec if sep else ""
        try:
            format(0, fspec)
        except ValueError as exc:
            raise _error(template, pos, f'field "{{{body}}}" has a bad format spec: {exc}') from None
        return _Field(name, "", fspec)
    if name == "journal":
        if sep:
            raise _error(template, pos, 'field "{journal}" takes no format')
        return _Field("journal", "", None)
    if name == "first_append":
        return _Field("first_append", "", spec if sep and spec else DEFAULT_TIME_FORMAT)
    if name.startswith("registers."):
        register = name[len("registers.") :]
        try:
            validate_label_name(register)
        except ValidationError as exc:
            raise _error(template, pos, f'field "{{{body}}}": {exc.message}') from None
        return _Field("register", register, spec if sep else None)
    raise _error(template, pos, f'unknown field "{{{body}}}" (expected one of {_FIELDS})')


def _check_rendered(template: str, rendered: str) -> str:
    try:
        validate_path_component("path postfix", rendered, POSTFIX_LEN)
        for segment in rendered.split("/"):
            if segment in (".", ".."):
                raise ValidationError(f'path postfix "{rendered}" must not have a "{segment}" segment')
    except ValidationError as exc:
        raise ValidationError(
            f'path_postfix_template "{template}" does not render a clean relative path: {exc.message}'
        ) from None
    return rendered


def render_postfix(
    template: str,
    *,
    journal: str,
    begin: int,
    end: int,
    first_append_time: float | None,
    registers: LabelSet,
) -> str:
    """Renders `template` for a completed spool; `first_append_time` is unix seconds (None = unix 0)."""
    if template == "":
        return ""
    out: list[str] = []
    when: datetime.datetime | None = None
    for part in _compile(template):
        if isinstance(part, str):
            out.append(part)
        elif part.kind == "journal":
            out.append(journal)
        elif part.kind == "begin":
            out.append(format(begin, part.spec or ""))
        elif part.kind == "end":
            out.append(format(end, part.spec or ""))
        elif part.kind == "first_append":
            if when is None:
                when = datetime.datetime.fromtimestamp(first_append_time or 0.0, tz=datetime.UTC)
            out.append(when.strftime(part.spec or DEFAULT_TIME_FORMAT))
        else:
            value = registers.value_of(part.arg) or ""
            out.append(value if value or part.spec is None else part.spec)
    return _check_rendered(template, "".join(out))


def validate_postfix_template(template: str, *, journal: str = PLACEHOLDER_JOURNAL) -> None:
    """Raises ValidationError unless `template` parses and renders on the zero value for `journal`."""
    if not isinstance(template, str):
        raise ValidationError(f"path_postfix_template {template!r} is not a string")
    render_postfix(template, journal=journal, begin=0, end=0, first_append_time=0.0, registers=LabelSet())
