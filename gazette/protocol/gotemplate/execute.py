"""The executor: a parsed template run on data, as Go's text/template executes it.

Each action's pipeline is evaluated with dot (and `$`) the data: a field chain walks struct fields and
calls methods (the last element of a chain takes the command's arguments), the value of each command
is passed as the last argument of the next, arguments are checked against the parameter types, and
the functions are and, or, not, len, index, print, printf and println. The action's value is printed
as fmt prints it. Every failure is a TemplateError at the node it is about, quoting the node as Go's
messages do (`at <.A.B>: ...`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gazette.protocol.gotemplate.errors import SUBSET, CallError, TemplateError
from gazette.protocol.gotemplate.fmt import print_v, printf, sprint
from gazette.protocol.gotemplate.parse import Node, Template
from gazette.protocol.gotemplate.values import ANY, BOOL, INT, STRING, UINT8, Type, Val


def execute(template: Template, data: Val) -> str:
    """The text `template` renders on `data`; raises TemplateError."""
    return _Exec(template.source, data).run(template.nodes)


_MISSING = Val(ANY, None)  # no piped value


def _truth(val: Val) -> bool:
    if val.type.kind in ("struct", "time"):
        return True
    if val.type.kind in ("string", "slice"):
        return len(val.v) > 0
    return bool(val.v)


class _Exec:
    def __init__(self, src: str, root: Val) -> None:
        self.src = src
        self.root = root

    def err(self, node: Node, rule: str) -> TemplateError:
        return TemplateError(node.pos, f"at <{self.src[node.pos : node.end].strip()}>: {rule}")

    def run(self, nodes: Sequence[Node]) -> str:
        out: list[str] = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
                continue
            pipe = node.children[0]
            val = self.pipeline(pipe)
            try:
                out.append(print_v(val))
            except CallError as exc:
                raise self.err(pipe, str(exc)) from None
        return "".join(out)

    def pipeline(self, pipe: Node) -> Val:
        val = _MISSING
        for cmd in pipe.children:
            val = self.command(cmd, val)
        return val

    def command(self, cmd: Node, final: Val) -> Val:
        first = cmd.children[0]
        args = cmd.children
        if first.kind == "field":
            return self.chain(self.root, first, first.idents, args, final)
        if first.kind == "var" and first.idents:
            return self.chain(self.root, first, first.idents, args, final)
        if first.kind == "chain":
            return self.chain(self.value(first.children[0], ANY), first, first.idents, args, final)
        if first.kind == "ident":
            return self.function(first, args, final)
        if len(args) > 1 or final is not _MISSING:
            raise self.err(first, f"can't give argument to non-function {self.src[first.pos : first.end]}")
        if first.kind == "pipe":
            return self.pipeline(first)
        if first.kind in ("dot", "var"):
            return self.root
        if first.kind == "nil":
            raise self.err(first, "nil is not a command")
        return self.constant(first, ANY)

    def constant(self, node: Node, typ: Type) -> Val:
        if typ is ANY:
            typ = {"bool": BOOL, "number": INT, "string": STRING}[node.kind]
        expected = {"string": "string", "int": "number", "uint": "number", "bool": "bool"}.get(typ.kind)
        if expected != node.kind:
            noun = {"string": "string", "int": "integer", "uint": "integer", "bool": "bool"}.get(
                typ.kind, typ.name
            )
            raise self.err(node, f"expected {noun}; found {self.src[node.pos : node.end]}")
        if typ.kind == "uint" and node.value < 0:
            raise self.err(node, f"expected unsigned integer; found {self.src[node.pos : node.end]}")
        return Val(typ, node.value)

    def value(self, node: Node, typ: Type) -> Val:
        """An argument of type `typ` (Go's evalArg)."""
        if node.kind == "dot" or (node.kind == "var" and not node.idents):
            val = self.root
        elif node.kind in ("field", "var"):
            val = self.chain(self.root, node, node.idents, [node], _MISSING)
        elif node.kind == "chain":
            val = self.chain(self.value(node.children[0], ANY), node, node.idents, [node], _MISSING)
        elif node.kind == "pipe":
            val = self.pipeline(node)
        elif node.kind == "ident":
            val = self.function(node, [node], _MISSING)
        elif node.kind == "nil":
            raise self.err(node, f"nil is {SUBSET}")
        else:
            return self.constant(node, typ)
        return self.check_type(node, val, typ)

    def check_type(self, node: Node, val: Val, typ: Type) -> Val:
        if typ is ANY or val.type is typ:
            return val
        raise self.err(node, f"wrong type for value; expected {typ.name}; got {val.type.name}")

    def chain(self, recv: Val, node: Node, idents: Sequence[str], args: list[Node], final: Val) -> Val:
        for name in idents[:-1]:
            recv = self.field(recv, name, node, [node], _MISSING)
        return self.field(recv, idents[-1], node, args, final)

    def field(self, recv: Val, name: str, node: Node, args: list[Node], final: Val) -> Val:
        t = recv.type
        method = t.methods.get(name)
        if method is not None:
            return self.call(
                name,
                node,
                method.params,
                None,
                args,
                final,
                lambda *a: Val(method.result, method.fn(recv.v, *a)),
            )
        if t.kind == "struct" and name in recv.v:
            if len(args) > 1 or final is not _MISSING:
                raise self.err(node, f"{name} has arguments but cannot be invoked as function")
            field: Val = recv.v[name]
            return field
        if name in t.refused:
            raise self.err(node, t.refused[name])
        if name in t.outside:
            raise self.err(node, f"{name} of {t.name} is Gazette data {SUBSET}")
        known = sorted({*t.fields, *t.methods})
        listing = f" (it has: {', '.join(known)})" if known else ""
        raise self.err(node, f"can't evaluate field {name} in type {t.name}{listing}")

    def call(
        self,
        name: str,
        node: Node,
        params: Sequence[Type],
        variadic: Type | None,
        args: list[Node],
        final: Val,
        fn: Callable[..., Val],
    ) -> Val:
        arg_nodes = args[1:]
        count = len(arg_nodes) + (final is not _MISSING)
        if variadic is not None:
            if count < len(params):
                raise self.err(
                    node, f"wrong number of args for {name}: want at least {len(params)} got {count}"
                )
        elif count != len(params):
            raise self.err(node, f"wrong number of args for {name}: want {len(params)} got {count}")
        types = [*params, *[variadic or ANY] * count][:count]
        values = [
            self.value(a, typ).v if typ is not ANY else self.value(a, typ)
            for a, typ in zip(arg_nodes, types, strict=False)
        ]
        if final is not _MISSING:
            last = self.check_type(node, final, types[-1])
            values.append(last if types[-1] is ANY else last.v)
        try:
            return fn(*values)
        except CallError as exc:
            raise self.err(node, f"error calling {name}: {exc}") from None

    def function(self, ident: Node, args: list[Node], final: Val) -> Val:
        name = ident.text
        if name in ("and", "or"):
            if len(args) == 1 and final is _MISSING:
                raise self.err(ident, f"wrong number of args for {name}: want at least 1 got 0")
            val = _MISSING
            for a in args[1:]:
                val = self.value(a, ANY)
                if _truth(val) == (name == "or"):
                    return val
            return final if final is not _MISSING else val
        if name == "not":
            return self.call(name, ident, (ANY,), None, args, final, lambda v: Val(BOOL, not _truth(v)))
        if name == "len":
            return self.call(name, ident, (ANY,), None, args, final, _len)
        if name == "index":
            return self.call(name, ident, (ANY,), ANY, args, final, _index)
        if name == "printf":
            return self.call(
                name, ident, (STRING,), ANY, args, final, lambda f, *a: Val(STRING, printf(f, a))
            )
        spaces = name == "println"
        return self.call(
            name, ident, (), ANY, args, final, lambda *a: Val(STRING, sprint(a, spaces) + "\n" * spaces)
        )


def _len(item: Val) -> Val:
    if item.type.kind in ("string", "slice"):
        return Val(INT, len(item.v.encode()) if item.type.kind == "string" else len(item.v))
    raise CallError(f"len of type {item.type.name}")


def _index(item: Val, *indexes: Val) -> Val:
    for idx in indexes:
        kind = item.type.kind
        if kind not in ("slice", "string"):
            raise CallError(f"can't index item of type {item.type.name}")
        if idx.type.kind not in ("int", "uint"):
            raise CallError(f"cannot index slice/array with type {idx.type.name}")
        seq = item.v.encode() if kind == "string" else item.v
        if not 0 <= idx.v < len(seq):
            raise CallError(f"index out of range: {idx.v}")
        item = Val(UINT8, seq[idx.v]) if kind == "string" else seq[idx.v]
    return item
