"""The parser: a template's tokens as a tree of nodes, as Go's text/template/parse builds it.

A template is literal text and actions; an action holds a pipeline, commands joined by `|`; a command
is a field chain (`.A.B`, `$.A`, `(pipeline).A`), a constant or a function call with its arguments.
What is outside the subset is refused here, at its position: control actions (if, range, with,
define, template, block, else, end), variables other than `$`, the functions Go has but this
evaluator does not (eq, lt, slice, html, js, urlquery, call, ...), and floating-point constants.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from gazette.protocol.gotemplate.errors import SUBSET, TemplateError
from gazette.protocol.gotemplate.lex import TextCheck, Tok, lex

_KEYWORDS = frozenset(
    {"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"}
)
_FUNCS = frozenset({"and", "or", "not", "len", "index", "print", "printf", "println"})
_GO_FUNCS = _FUNCS | {"call", "html", "js", "urlquery", "slice", "eq", "ne", "lt", "le", "gt", "ge"}


@dataclasses.dataclass(eq=False, slots=True)
class Node:
    """A node of the tree: its kind, its span in the template and what it holds."""

    kind: str  # text action pipe command field var chain ident dot nil bool number string
    pos: int
    end: int = 0
    text: str = ""  # text of a text node, name of an identifier or variable
    value: Any = None  # of a constant
    idents: tuple[str, ...] = ()  # of a field, variable or chain
    children: list[Node] = dataclasses.field(default_factory=list)  # commands, arguments, chained node


@dataclasses.dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: its source (which error messages quote) and its top-level nodes."""

    source: str
    nodes: tuple[Node, ...]


def parse(source: str, check_text: TextCheck | None = None) -> Template:
    """Parses `source`, `check_text` vetting its literal texts; raises TemplateError."""
    return Template(source, tuple(_Parser(source, lex(source, check_text)).template()))


_LITERALS = ("bool", "dot", "nil", "number", "string")
_OPERAND_START = ("bool", "dot", "field", "ident", "number", "nil", "string", "var", "(")


class _Parser:
    def __init__(self, src: str, toks: list[Tok]) -> None:
        self.src = src
        self.toks = toks
        self.i = 0

    def peek(self) -> Tok:
        tok = self.toks[self.i]
        if tok.kind == "error":
            raise tok.value
        return tok

    def next(self) -> Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def peek_non_space(self) -> Tok:
        while self.peek().kind == "space":
            self.i += 1
        return self.toks[self.i]

    def next_non_space(self) -> Tok:
        tok = self.peek_non_space()
        self.i += 1
        return tok

    def unexpected(self, tok: Tok, context: str) -> TemplateError:
        what = (
            "EOF"
            if tok.kind == "eof"
            else '"' + (tok.text if len(tok.text) <= 10 else tok.text[:10] + "...") + '"'
        )
        return TemplateError(tok.pos, f"unexpected {what} in {context}")

    def template(self) -> list[Node]:
        nodes: list[Node] = []
        while True:
            tok = self.next()
            if tok.kind == "eof":
                return nodes
            if tok.kind == "text":
                nodes.append(Node("text", tok.pos, tok.pos + len(tok.text), text=tok.value))
                continue
            assert tok.kind == "ldelim"
            nodes.append(self.action(tok))

    def action(self, ldelim: Tok) -> Node:
        tok = self.peek_non_space()
        if tok.kind == "ident" and tok.text in _KEYWORDS:
            raise TemplateError(tok.pos, f"{{{{{tok.text}}}}} and the other control actions are {SUBSET}")
        if tok.kind == "var":
            j = self.i + 1
            while self.toks[j].kind == "space":
                j += 1
            if self.toks[j].kind in (":=", "=") or (self.toks[j].kind == "char" and self.toks[j].text == ","):
                raise TemplateError(tok.pos, f"variable declarations are {SUBSET}")
        pipe = self.pipeline("command", "rdelim")
        rdelim = self.toks[self.i - 1]
        return Node("action", ldelim.pos, rdelim.pos + len(rdelim.text), children=[pipe])

    def pipeline(self, context: str, end: str) -> Node:
        start = self.peek_non_space().pos
        cmds: list[Node] = []
        while True:
            tok = self.next_non_space()
            if tok.kind == end:  # Go accepts a trailing "|" too
                if not cmds:
                    raise TemplateError(tok.pos, f"missing value for {context}")
                for stage, cmd in enumerate(cmds[1:], start=2):
                    if cmd.children[0].kind in _LITERALS:
                        raise TemplateError(cmd.pos, f"non executable command in pipeline stage {stage}")
                return Node("pipe", start, tok.pos, children=cmds)
            if tok.kind in _OPERAND_START:
                self.i -= 1
                cmds.append(self.command())
                continue
            raise self.unexpected(tok, context)

    def command(self) -> Node:
        start = self.peek_non_space().pos
        args: list[Node] = []
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                args.append(operand)
            tok = self.next()
            if tok.kind == "space":
                continue
            if tok.kind in ("rdelim", ")"):
                self.i -= 1
            elif tok.kind != "pipe":
                raise self.unexpected(tok, "operand")
            break
        if not args:
            raise TemplateError(start, "empty command")
        return Node("command", start, args[-1].end, children=args)

    def operand(self) -> Node | None:
        node = self.term()
        if node is None or self.peek().kind != "field":
            return node
        fields: list[str] = []
        end = node.end
        while self.peek().kind == "field":
            tok = self.next()
            fields.append(tok.text[1:])
            end = tok.pos + len(tok.text)
        if node.kind == "field":
            return Node("field", node.pos, end, idents=node.idents + tuple(fields))
        if node.kind == "var":
            return Node("var", node.pos, end, text=node.text, idents=node.idents + tuple(fields))
        if node.kind in _LITERALS:
            raise TemplateError(node.end, f"unexpected . after term {self.src[node.pos : node.end]!r}")
        return Node("chain", node.pos, end, idents=tuple(fields), children=[node])

    def term(self) -> Node | None:
        tok = self.next_non_space()
        end = tok.pos + len(tok.text)
        if tok.kind == "ident":
            if tok.text in _KEYWORDS:
                raise self.unexpected(tok, "operand")
            if tok.text not in _GO_FUNCS:
                raise TemplateError(tok.pos, f'function "{tok.text}" not defined')
            if tok.text not in _FUNCS:
                raise TemplateError(
                    tok.pos, f'function "{tok.text}" is {SUBSET} (it has: {", ".join(sorted(_FUNCS))})'
                )
            return Node("ident", tok.pos, end, text=tok.text)
        if tok.kind == "var":
            if tok.text != "$":
                raise TemplateError(tok.pos, f'undefined variable "{tok.text}"')
            return Node("var", tok.pos, end, text="$")
        if tok.kind == "field":
            return Node("field", tok.pos, end, idents=(tok.text[1:],))
        if tok.kind in ("dot", "nil"):
            return Node(tok.kind, tok.pos, end)
        if tok.kind == "bool":
            return Node("bool", tok.pos, end, value=tok.value)
        if tok.kind == "string":
            return Node("string", tok.pos, end, value=tok.value)
        if tok.kind == "number":
            return Node("number", tok.pos, end, value=_number(tok))
        if tok.kind == "(":
            pipe = self.pipeline("parenthesized pipeline", ")")
            close = self.toks[self.i - 1]
            pipe.pos, pipe.end = tok.pos, close.pos + 1
            return pipe
        self.i -= 1
        return None


def _number(tok: Tok) -> int:
    text = tok.text
    body = text.lstrip("+-")
    lower = body.lower()
    if any(c in lower for c in ".i") or (not lower.startswith("0x") and "e" in lower) or "p" in lower:
        raise TemplateError(tok.pos, f"floating-point and complex constants are {SUBSET}")
    try:
        if re.fullmatch(r"0[0-7_]+", body) and not body.startswith("0_"):
            value = int(body[1:].replace("_", ""), 8) if body.strip("0_") else 0
        else:
            value = int(body, 0)
    except ValueError:
        raise TemplateError(tok.pos, f"illegal number syntax: {text!r}") from None
    value = -value if text.startswith("-") else value
    if not -(1 << 63) <= value < (1 << 63):
        raise TemplateError(tok.pos, f"{text} overflows int")
    return value
