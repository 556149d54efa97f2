"""Go's fmt as templates use it: how a value prints (%v, print, println) and printf's verbs.

Values print as Go's fmt prints them: integers in decimal, a type with a String() method (an enum's
name, a time) through it, a slice in brackets; printing a struct is refused (Go would print braces,
which no path can hold). printf has the verbs %v %d %s %x %X %o %b %t %% with the flags - + # 0 and
space, widths and precisions; what Go would print as an error (%!d(string=...), a missing or extra
argument) is refused. Failures are CallErrors, which the executor places at the call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gazette.protocol.gotemplate.errors import SUBSET, CallError
from gazette.protocol.gotemplate.values import Val


def print_v(val: Val) -> str:
    """`val` as Go's fmt prints it with %v (and text/template prints an action's value)."""
    t = val.type
    if t.stringer is not None:
        return t.stringer(val.v)
    if t.kind in ("int", "uint"):
        return str(val.v)
    if t.kind == "string":
        return str(val.v)
    if t.kind == "bool":
        return "true" if val.v else "false"
    if t.kind == "slice":
        return "[" + " ".join(print_v(e) for e in val.v) + "]"
    raise CallError(
        f"printing a {t.name} is {SUBSET}: Go prints its fields in braces, which no path can hold; "
        "pick one of its fields"
    )


def sprint(args: Sequence[Val], spaces_always: bool) -> str:
    out: list[str] = []
    prev_string = False
    for i, a in enumerate(args):
        is_string = a.type.kind == "string"
        if i > 0 and (spaces_always or (not is_string and not prev_string)):
            out.append(" ")
        out.append(print_v(a))
        prev_string = is_string
    return "".join(out)


_PRINTF_RE = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d*))?(.?)", re.S)


def _pad(s: str, flags: str, width: int | None) -> str:
    if width is None or len(s) >= width:
        return s
    return s.ljust(width) if "-" in flags else s.rjust(width)


def _printf_int(n: int, verb: str, flags: str, width: int | None, prec: int | None) -> str:
    base = {"d": 10, "v": 10, "x": 16, "X": 16, "o": 8, "b": 2}[verb]
    negative = n < 0
    u = -n if negative else n
    digits = {10: "d", 16: "x", 8: "o", 2: "b"}[base]
    body = format(u, digits)
    if verb == "X":
        body = body.upper()
    if prec is not None:
        if prec == 0 and u == 0:
            return _pad("", flags, width)
        body = body.rjust(prec, "0")
    elif "0" in flags and "-" not in flags and width is not None:
        body = body.rjust(width - (1 if negative or "+" in flags or " " in flags else 0), "0")
    if "#" in flags:
        if base == 16:
            body = ("0X" if verb == "X" else "0x") + body
        elif base == 8 and not body.startswith("0"):
            body = "0" + body
        elif base == 2:
            body = "0b" + body
    sign = "-" if negative else "+" if "+" in flags else " " if " " in flags else ""
    return _pad(sign + body, flags, width)


def _printf_string(s: str, verb: str, flags: str, width: int | None, prec: int | None) -> str:
    if verb in "xX":
        if prec is not None or set(flags) - {"-"}:
            raise CallError(f"printf: %{flags}{verb} with a precision or flags on a string is {SUBSET}")
        s = s.encode().hex()
        if verb == "X":
            s = s.upper()
    elif prec is not None:
        s = s[:prec]
    if "0" in flags and "-" not in flags and width is not None and len(s) < width:
        raise CallError(f"printf: zero padding of a non-integer is {SUBSET}")
    return _pad(s, flags, width)


_PRINTF_VERBS = "vdsxXobt"


def printf(fmt: str, args: Sequence[Val]) -> str:
    """Go's fmt.Sprintf for the verbs %v %d %s %x %X %o %b %t %% on these values."""
    out: list[str] = []
    arg = 0
    i = 0
    while i < len(fmt):
        j = fmt.find("%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        m = _PRINTF_RE.match(fmt, j)
        assert m is not None
        flags, width_s, prec_s, verb = m.groups()
        i = m.end()
        if verb == "%":
            out.append("%")  # takes no argument; Go ignores flags, width and precision here
            continue
        if verb == "" or verb not in _PRINTF_VERBS:
            raise CallError(f"printf: {fmt[j:i]!r} is {SUBSET} (verbs %v %d %s %x %X %o %b %t %%)")
        if arg >= len(args):
            raise CallError(f"printf: no argument for %{verb} (Go would print %!{verb}(MISSING))")
        a = args[arg]
        arg += 1
        width = int(width_s) if width_s is not None else None
        prec = (int(prec_s) if prec_s else 0) if prec_s is not None else None
        t = a.type
        if verb == "v":
            if "#" in flags:
                raise CallError(f"printf: %#v (Go syntax) is {SUBSET}")
            flags = flags.replace("+", "")  # %+v adds field names to structs, not a sign
        if "0" in flags and (verb in "st" or (verb == "v" and t.kind not in ("int", "uint"))):
            raise CallError(f"printf: zero padding of a non-integer is {SUBSET}")
        if t.stringer is not None and verb in "vsxX":  # fmt prints a Stringer through String()
            out.append(_printf_string(t.stringer(a.v), verb, flags, width, prec))
        elif t.kind in ("int", "uint") and verb in "vdxXob":
            out.append(_printf_int(a.v, verb, flags, width, prec))
        elif t.kind == "string" and verb in "vsxX":
            out.append(_printf_string(a.v, verb, flags, width, prec))
        elif t.kind == "bool" and verb in "vt":
            out.append(_pad("true" if a.v else "false", flags, width))
        elif t.kind == "slice" and verb in "vs" and not flags and width is None and prec is None:
            out.append("[" + " ".join(printf(f"%{verb}", [e]) for e in a.v) + "]")
        elif t.kind in ("int", "uint", "string", "bool"):
            raise CallError(
                f"printf: %{verb} does not apply to a {t.name} (Go would print %!{verb}({t.name}=...), which no "
                "path can hold)"
            )
        else:
            raise CallError(f"printf: %{flags}{width_s or ''}{verb} of a {t.name} is {SUBSET}")
    if arg < len(args):
        extra = ", ".join(f"{a.type.name}={print_v(a)}" for a in args[arg:])
        raise CallError(f"printf: too many arguments (Go would append %!(EXTRA {extra}))")
    return "".join(out)
