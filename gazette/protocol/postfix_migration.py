"""The former single-brace syntax of path_postfix_template, refused with its Gazette form.

This project once had its own template syntax (`{journal}`, `{begin:08x}`, `{first_append:%Y-%m-%d}`,
`{registers.NAME}`, ...). Go's text/template treats it as literal text, so Gazette would create a
directory literally named `{first_append:%Y-%m-%d}` and then skip every fragment under it when
listing the store (its fragment path parser refuses the braces). check_former_syntax, the lexer's
check of literal text for postfix templates, refuses it, and its message shows the Gazette form of
the field and, where every field has one, of the whole template (strftime directives become
`.Spool.FirstAppendTime.Format` layouts).
"""

from __future__ import annotations

import re

from gazette.protocol.gotemplate import TemplateError
from gazette.protocol.gotemplate.timefmt import layout_chunks

_OLD_START = re.compile(r"\{\s*[A-Za-z_]")
_OLD_FIELD = re.compile(r"\{\s*([A-Za-z_][^\s{}:]*)\s*(?::([^{}]*))?\}")
_STRFTIME = {
    "Y": "2006", "y": "06", "m": "01", "d": "02", "e": "_2", "H": "15", "I": "03", "M": "04",
    "S": "05", "p": "PM", "b": "Jan", "h": "Jan", "B": "January", "a": "Mon", "A": "Monday",
    "j": "002", "Z": "MST", "z": "-0700", "F": "2006-01-02", "T": "15:04:05",
}  # fmt: skip
_TIME_FIELD = ".Spool.FirstAppendTime.Format"


def _from_strftime(fmt: str) -> str | None:
    """The Gazette form of the former `{first_append:FMT}`: Format actions, literals outside them."""
    pieces: list[tuple[bool, str]] = []  # (is layout, text)
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            j = fmt.find("%", i)
            j = len(fmt) if j < 0 else j
            pieces.append((False, fmt[i:j]))
            i = j
            continue
        d = fmt[i + 1 : i + 2]
        if d == "%":
            pieces.append((False, "%"))
        elif d == "f" and pieces and not pieces[-1][0] and pieces[-1][1].endswith("."):
            pieces[-1] = (False, pieces[-1][1][:-1])
            pieces.append((True, ".000000"))
        elif d in _STRFTIME:
            pieces.append((True, _STRFTIME[d]))
        else:
            return None
        i += 2
    layouts = [i for i, (is_layout, _) in enumerate(pieces) if is_layout]
    if not layouts:
        return None
    first, last = layouts[0], layouts[-1]
    span = pieces[first : last + 1]
    expected: list[tuple[str, str]] = []  # the chunks Go should see: each directive's, literals merged
    for is_layout, text in span:
        for chunk in layout_chunks(text) if is_layout else [("lit", text)]:
            if chunk[0] == "lit" and expected and expected[-1][0] == "lit":
                expected[-1] = ("lit", expected[-1][1] + chunk[1])
            else:
                expected.append(chunk)
    joined = "".join(text for _, text in span)
    if layout_chunks(joined) == expected and '"' not in joined and "\\" not in joined:
        before = "".join(text for _, text in pieces[:first])
        after = "".join(text for _, text in pieces[last + 1 :])
        return before + _format_action(joined) + after
    # Go would read some literal text as layout elements: one action per directive, text outside.
    return "".join(_format_action(text) if is_layout else text for is_layout, text in pieces)


def _format_action(layout: str) -> str:
    return f'{{{{ {_TIME_FIELD} "{layout}" }}}}'


def _gazette_form(name: str, spec: str | None) -> str | None:
    """The Gazette form of the former field `{name:spec}`, None when there is no simple one."""
    if name == "journal" and spec is None:
        return "{{ .Spool.Journal }}"
    if name in ("begin", "end"):
        field = ".Spool.Begin" if name == "begin" else ".Spool.End"
        if not spec or spec == "d":
            return f"{{{{ {field} }}}}"
        m = re.fullmatch(r"(0?)(\d*)([dxXob])", spec)
        return f'{{{{ printf "%{m[1]}{m[2]}{m[3]}" {field} }}}}' if m else None
    if name == "first_append":
        return _from_strftime(spec or "%Y-%m-%d")
    if name.startswith("registers.") and '"' not in name and '"' not in (spec or ""):
        get = f'.Spool.Registers.ValueOf "{name[len("registers.") :]}"'
        return f"{{{{ {get} }}}}" if spec is None else f'{{{{ or ({get}) "{spec}" }}}}'
    return None


def check_former_syntax(template: str, text: str, pos: int) -> None:
    """Raises TemplateError for former single-brace fields in `text`, a literal text of `template` at
    offset `pos` (Go writes such fields out as they are)."""
    start = _OLD_START.search(text)
    if start is None:
        return
    at = pos + start.start()
    m = _OLD_FIELD.match(text, start.start())
    if m is None:
        raise TemplateError(
            at,
            "a single \"{\" followed by a name is this project's former template syntax, which Go's "
            "text/template writes out literally; Gazette's template actions are {{ ... }}, "
            'e.g. {{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        )
    form = _gazette_form(m[1], m[2])
    rule = (
        f"\"{m[0]}\" is this project's former template syntax, which Go's text/template writes out literally "
        "(Gazette would create a directory of that name, then skip its fragments when listing the store)"
    )
    if form is None:
        rule += (
            '; write a Gazette action instead, e.g. {{ .Spool.Journal }}, {{ .Spool.Begin }}, {{ .Spool.FirstAppendTime.Format "2006-01-02" }} '
            'or {{ .Spool.Registers.ValueOf "NAME" }}'
        )
        raise TemplateError(at, rule)
    rule += f"; in Gazette's syntax: {form}"
    if "{{" not in template and "}}" not in template:
        whole: list[str] = []
        last = 0
        for f in _OLD_FIELD.finditer(template):
            converted = _gazette_form(f[1], f[2])
            if converted is None:
                raise TemplateError(at, rule)
            whole += [template[last : f.start()], converted]
            last = f.end()
        whole.append(template[last:])
        rule += f" (the whole template: {''.join(whole)})"
    raise TemplateError(at, rule)
