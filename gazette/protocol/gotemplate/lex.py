"""The lexer: a template's text as tokens, as Go's text/template/parse lexes it.

Literal text and actions `{{ ... }}` (with `{{-` / `-}}` trimming the white space before / after an
action, and comments `{{/* ... */}}`); inside an action, fields, variables, identifiers, constants
(quoted and raw strings, numbers, true/false, nil), `|`, parentheses and the other punctuation Go
lexes. The caller may vet each literal text with a TextCheck (to refuse text that Go would write out
literally but that is a mistake for it). Errors do not stop the caller at once: they end the tokens
as an "error" token, so that the parser reports the first problem in the text, as Go does.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable
from typing import Any

from gazette.protocol.gotemplate.errors import SUBSET, TemplateError

# Vets a literal text (after trimming) at its offset in the template; raises TemplateError to refuse it.
TextCheck = Callable[[str, int], None]

_SPACE = " \t\r\n"


@dataclasses.dataclass(frozen=True, slots=True)
class Tok:
    """A token: its kind, its offset and source text in the template, and its value."""

    kind: str  # text ldelim rdelim space field ident var dot number string pipe ( ) char := = bool nil eof
    pos: int
    text: str
    value: Any = None  # text of a text token, unquoted string, bool


def _is_alnum(c: str) -> bool:
    return c == "_" or c.isalpha() or unicodedata.category(c) == "Nd"


def _has_left_trim(src: str, i: int) -> bool:
    return src[i : i + 1] == "-" and src[i + 1 : i + 2] != "" and src[i + 1] in _SPACE


def _at_right_delim(src: str, i: int) -> tuple[bool, bool]:
    if src[i : i + 1] != "" and src[i] in _SPACE and src.startswith("-}}", i + 1):
        return True, True
    return src.startswith("}}", i), False


def _skip_space(src: str, i: int) -> int:
    while i < len(src) and src[i] in _SPACE:
        i += 1
    return i


def lex(src: str, check_text: TextCheck | None = None) -> list[Tok]:
    """The tokens of `src`, ending in an "eof" token or, at the first lexing error, an "error" one."""
    return _Lexer(src, check_text).run()


class _Lexer:
    def __init__(self, src: str, check_text: TextCheck | None) -> None:
        self.src = src
        self.check_text = check_text
        self.toks: list[Tok] = []

    def emit(self, kind: str, pos: int, end: int, value: Any = None) -> None:
        self.toks.append(Tok(kind, pos, self.src[pos:end], value))

    def run(self) -> list[Tok]:
        """The tokens; a lexing error ends them as an "error" token, which the parser raises when it
        reaches it (as Go's parser does, so an earlier syntax error is the one reported)."""
        try:
            self.lex()
        except TemplateError as exc:
            self.toks.append(Tok("error", exc.pos, "", exc))
        return self.toks

    def lex(self) -> None:
        src = self.src
        i = 0
        while i < len(src):
            j = src.find("{{", i)
            if j < 0:
                self.text(i, len(src), src[i:])
                break
            text = src[i:j]
            after = j + 2
            trim_left = _has_left_trim(src, after)
            if trim_left:
                text = text.rstrip(_SPACE)
            if text:
                self.text(i, j, text)
            k = after + 2 if trim_left else after
            if src.startswith("/*", k):
                i = self.comment(j, k)
            else:
                self.emit("ldelim", j, after)
                i = self.action(j, k)
        self.toks.append(Tok("eof", len(src), ""))

    def text(self, pos: int, end: int, text: str) -> None:
        if self.check_text is not None:
            self.check_text(text, pos)
        self.emit("text", pos, end, text)

    def comment(self, start: int, k: int) -> int:
        src = self.src
        end = src.find("*/", k + 2)
        if end < 0:
            raise TemplateError(start, "unclosed comment")
        delim, trim = _at_right_delim(src, end + 2)
        if not delim:
            raise TemplateError(start, "comment ends before closing delimiter")
        i = end + 2 + (2 if trim else 0) + 2
        return _skip_space(src, i) if trim else i

    def action(self, start: int, i: int) -> int:
        src = self.src
        n = len(src)
        parens = 0
        while True:
            delim, trim = _at_right_delim(src, i)
            if delim:
                if parens:
                    raise TemplateError(i, "unclosed left paren")
                end = i + (4 if trim else 2)  # " -}}" or "}}"
                self.emit("rdelim", i, end)
                return _skip_space(src, end) if trim else end
            if i >= n:
                raise TemplateError(start, 'unclosed action (no "}}" closes this "{{")')
            c = src[i]
            if c in _SPACE:
                j = _skip_space(src, i)
                if src.startswith("-}}", j):
                    j -= 1  # the last space belongs to a " -}}"
                if j > i:
                    self.emit("space", i, j)
                i = j
            elif c == "|":
                self.emit("pipe", i, i + 1)
                i += 1
            elif c == "(":
                parens += 1
                self.emit("(", i, i + 1)
                i += 1
            elif c == ")":
                parens -= 1
                if parens < 0:
                    raise TemplateError(i, "unexpected right paren")
                self.emit(")", i, i + 1)
                i += 1
            elif c == '"':
                i = self.quoted(i)
            elif c == "`":
                j = src.find("`", i + 1)
                if j < 0:
                    raise TemplateError(i, "unterminated raw quoted string")
                self.emit("string", i, j + 1, src[i + 1 : j])
                i = j + 1
            elif c == "'":
                raise TemplateError(i, f"character constants are {SUBSET}")
            elif c == "$":
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                self.emit("var", i, j)
                i = j
            elif c == "." and not (i + 1 < n and src[i + 1].isdigit() and src[i + 1].isascii()):
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                self.emit("dot" if j == i + 1 else "field", i, j)
                i = j
            elif c in "+-." or ("0" <= c <= "9"):
                i = self.number(i)
            elif _is_alnum(c):
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                word = src[i:j]
                if word in ("true", "false"):
                    self.emit("bool", i, j, word == "true")
                elif word == "nil":
                    self.emit("nil", i, j)
                else:
                    self.emit("ident", i, j)
                i = j
            elif c == ":":
                if not src.startswith(":=", i):
                    raise TemplateError(i, "expected :=")
                self.emit(":=", i, i + 2)
                i += 2
            elif c == "=":
                self.emit("=", i, i + 1)
                i += 1
            elif c.isascii() and c.isprintable():
                self.emit("char", i, i + 1)
                i += 1
            else:
                raise TemplateError(i, f"unrecognized character in action: U+{ord(c):04X}")

    def terminated(self, i: int) -> None:
        """A field, identifier or variable must be followed by space, punctuation or the delimiter."""
        src = self.src
        if i >= len(src) or src[i] in _SPACE or src[i] in ".,|:()" or src.startswith("}}", i):
            return
        raise TemplateError(i, f"bad character {src[i]!r}")

    def number(self, i: int) -> int:
        src = self.src
        n = len(src)
        j = i
        if j < n and src[j] in "+-":
            j += 1
        digits = "0123456789_"
        if src.startswith("0", j):
            j += 1
            if j < n and src[j] in "xX":
                digits, j = "0123456789abcdefABCDEF_", j + 1
            elif j < n and src[j] in "oO":
                digits, j = "01234567_", j + 1
            elif j < n and src[j] in "bB":
                digits, j = "01_", j + 1
        while j < n and src[j] in digits:
            j += 1
        if j < n and src[j] == ".":
            j += 1
            while j < n and src[j] in digits:
                j += 1
        exponent = {11: "eE", 23: "pP"}.get(len(digits))  # of a decimal or a hexadecimal number
        if exponent is not None and j < n and src[j] in exponent:
            j += 1
            if j < n and src[j] in "+-":
                j += 1
            while j < n and src[j] in "0123456789_":
                j += 1
        if j < n and src[j] == "i":
            j += 1
        if j < n and _is_alnum(src[j]):
            raise TemplateError(i, f"bad number syntax: {src[i : j + 1]!r}")
        self.emit("number", i, j)
        return j

    def quoted(self, i: int) -> int:
        src = self.src
        j = i + 1
        while True:
            if j >= len(src) or src[j] == "\n":
                raise TemplateError(i, "unterminated quoted string")
            if src[j] == "\\":
                if j + 1 >= len(src) or src[j + 1] == "\n":
                    raise TemplateError(i, "unterminated quoted string")
                j += 2
                continue
            if src[j] == '"':
                break
            j += 1
        self.emit("string", i, j + 1, _unquote(src[i + 1 : j], i))
        return j + 1


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _unquote(body: str, pos: int) -> str:
    """Go's strconv.Unquote of a double-quoted string's body."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
            continue
        size = {"x": 2, "u": 4, "U": 8}.get(e)
        if size is not None:
            hexdigits = body[i + 2 : i + 2 + size]
            if len(hexdigits) == size and all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                code = int(hexdigits, 16)
                if e == "x":
                    out.append(chr(code))  # a byte; paths hold only ASCII ones anyway
                elif code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                    out.append(chr(code))
                else:
                    raise TemplateError(pos, f"invalid escape \\{e}{hexdigits} in quoted string")
                i += 2 + size
                continue
        elif e in "01234567":
            octal = body[i + 1 : i + 4]
            if len(octal) == 3 and all(o in "01234567" for o in octal) and int(octal, 8) <= 255:
                out.append(chr(int(octal, 8)))
                i += 4
                continue
        raise TemplateError(pos, f"invalid escape \\{e} in quoted string")
    return "".join(out)
