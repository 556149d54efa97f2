"""LabelSelector: include and exclude label sets, their string grammar, matching and proto mapping (1.1).

A selector is a value: entries are validated, normalised (an empty value is never a prefix entry) and
sorted, so selectors parsed from equivalent text compare equal, and `parse(str(s)) == s`.
Journal meta-labels: `name` (added by `journal_labels`) and `prefix`, which `for_journals` rewrites.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.validate import (
    PATH_SYMBOLS,
    TOKEN_SYMBOLS,
    is_token_char,
    validate_label_name,
    validate_label_value,
)

PREFIX_MODIFIER = "prefix"


class SelectorLabel(NamedTuple):
    """One selector entry: label `name` with `value` ("" = any value), matched by prefix if `prefix`."""

    name: str
    value: str = ""
    prefix: bool = False

    def matches_value(self, value: str) -> bool:
        if self.value == "":
            return True
        return value.startswith(self.value) if self.prefix else value == self.value


SelectorLabelsLike = (
    LabelSet | Mapping[str, str] | Iterable[tuple[str, str] | tuple[str, str, bool] | SelectorLabel] | None
)


def _normalise(entries: SelectorLabelsLike, side: str) -> tuple[SelectorLabel, ...]:
    if entries is None:
        return ()
    items: Iterable[tuple[str, ...] | tuple[str, str, bool]]
    if isinstance(entries, Mapping):
        items = entries.items()
    else:
        items = entries  # type: ignore[assignment]
    out: set[SelectorLabel] = set()
    for item in items:
        if len(item) == 2:
            name, value = item  # type: ignore[misc]
            prefix = False
        elif len(item) == 3:
            name, value, prefix = item  # type: ignore[misc]
        else:
            raise ValidationError(f"selector {side} entry {item!r} is not (name, value[, prefix])")
        name, value, prefix = str(name), str(value), bool(prefix)
        validate_label_name(name)
        validate_label_value(value, name=name)
        out.add(SelectorLabel(name, value, prefix and value != ""))
    return tuple(sorted(out))


def _match(entries: tuple[SelectorLabel, ...], labels: LabelSet, require_all: bool) -> bool:
    """With require_all, whether every named group matches; otherwise whether any entry matches."""
    i = 0
    while i < len(entries):
        name = entries[i].name
        j = i
        while j < len(entries) and entries[j].name == name:
            j += 1
        values = labels.values_of(name)
        matched = any(e.matches_value(v) for e in entries[i:j] for v in values)
        if matched and not require_all:
            return True
        if not matched and require_all:
            return False
        i = j
    return require_all


@dataclasses.dataclass(frozen=True, init=False)
class LabelSelector:
    """Include: every named label present with one of the listed values. Exclude: any match rejects."""

    include: tuple[SelectorLabel, ...]
    exclude: tuple[SelectorLabel, ...]

    def __init__(self, include: SelectorLabelsLike = None, exclude: SelectorLabelsLike = None) -> None:
        object.__setattr__(self, "include", _normalise(include, "include"))
        object.__setattr__(self, "exclude", _normalise(exclude, "exclude"))

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """Parses the selector grammar of reference 1.1 (see `_Parser`); "" selects everything."""
        return _Parser(text).parse()

    @classmethod
    def coerce(cls, value: LabelSelector | str | pb.LabelSelector | None) -> LabelSelector:
        """A LabelSelector from a selector, its text, its proto, or None (select everything)."""
        if value is None:
            return cls()
        if isinstance(value, LabelSelector):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, pb.LabelSelector):
            return cls.from_proto(value)
        raise ValidationError(f"{value!r} is not a label selector")

    def matches(self, labels: LabelSet) -> bool:
        if _match(self.exclude, labels, require_all=False):
            return False
        return _match(self.include, labels, require_all=True)

    def for_journals(self) -> LabelSelector:
        """Rewrites the `prefix` meta-label into `name:prefix` terms (values must end in `/`)."""
        return LabelSelector(_rewrite_prefix(self.include), _rewrite_prefix(self.exclude))

    def to_proto(self) -> pb.LabelSelector:
        return pb.LabelSelector(include=_entries_to_proto(self.include), exclude=_entries_to_proto(self.exclude))

    @classmethod
    def from_proto(cls, msg: pb.LabelSelector | None) -> LabelSelector:
        if msg is None:
            return cls()
        return cls(
            [(lbl.name, lbl.value, lbl.prefix) for lbl in msg.include.labels],
            [(lbl.name, lbl.value, lbl.prefix) for lbl in msg.exclude.labels],
        )

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def __str__(self) -> str:
        return ", ".join(_format(self.include, exclude=False) + _format(self.exclude, exclude=True))

    def __repr__(self) -> str:
        return f"LabelSelector({str(self)!r})"


def journal_labels(spec_labels: LabelSet, name: str) -> LabelSet:
    """A journal's labels plus its `name` meta-label, as matched by `for_journals()` selectors."""
    return spec_labels.union(LabelSet([("name", name)]))


def _rewrite_prefix(entries: tuple[SelectorLabel, ...]) -> list[SelectorLabel]:
    out = []
    for e in entries:
        if e.name != "prefix":
            out.append(e)
            continue
        if not e.value.endswith("/"):
            raise ValidationError(
                f'selector label "prefix" value "{e.value}" must end in "/" (a journal name directory)'
            )
        out.append(SelectorLabel("name", e.value, True))
    return out


def _entries_to_proto(entries: tuple[SelectorLabel, ...]) -> pb.LabelSet:
    return pb.LabelSet(labels=[pb.Label(name=e.name, value=e.value, prefix=e.prefix) for e in entries])


def _format(entries: tuple[SelectorLabel, ...], *, exclude: bool) -> list[str]:
    groups: dict[tuple[str, bool], list[str]] = {}
    for e in entries:
        groups.setdefault((e.name, e.prefix), []).append(e.value)
    terms = []
    for (name, prefix), values in groups.items():
        key = f"{name}:{PREFIX_MODIFIER}" if prefix else name
        if "" in values:  # an existence entry; other values of the name are written separately
            terms.append(("!" if exclude else "") + name)
            values = [v for v in values if v != ""]
        if len(values) == 1:
            (value,) = values
            if exclude:
                terms.append(f"{key}!={value}")
            else:  # "==" keeps a value that starts with "=" from being read as part of the operator
                terms.append(f"{key}{'==' if value.startswith('=') else '='}{value}")
        elif values:
            terms.append(f"{key} {'notin' if exclude else 'in'} ({', '.join(values)})")
    return terms


class _Parser:
    """Recursive descent over the selector grammar; whitespace is allowed between any two tokens.

        selector := [term ("," term)*]
        term     := "!" NAME                                  (label absent)
                  | key                                       (label present, any value)
                  | key ("=" | "==") VALUE | key "!=" VALUE   (equal / not equal)
                  | key ("in" | "notin" | "not in") "(" VALUE ("," VALUE)* ")"
        key      := NAME [":prefix"]                          (match values by prefix)
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValidationError(f"label selector {text!r} is not a string")
        self.text = text
        self.pos = 0
        self.include: list[tuple[str, str, bool]] = []
        self.exclude: list[tuple[str, str, bool]] = []

    def fail(self, expected: str, at: int | None = None) -> ValidationError:
        at = self.pos if at is None else at
        found = repr(self.text[at]) if at < len(self.text) else "end of text"
        return ValidationError(
            f'label selector "{self.text}" is not valid at position {at}: expected {expected}, found {found}'
        )

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def word(self, symbols: str, what: str) -> str:
        start = self.pos
        while self.pos < len(self.text) and is_token_char(self.text[self.pos], symbols):
            self.pos += 1
        if self.pos == start:
            raise self.fail(what)
        return self.text[start : self.pos]

    def keyword(self, kw: str) -> bool:
        """Consumes `kw` if it is next and not merely the start of a longer word."""
        if not self.peek(kw):
            return False
        after = self.pos + len(kw)
        if after < len(self.text) and is_token_char(self.text[after], TOKEN_SYMBOLS):
            return False
        self.pos = after
        return True

    def parse(self) -> LabelSelector:
        self.skip_ws()
        if self.pos == len(self.text):
            return LabelSelector()
        while True:
            self.term()
            self.skip_ws()
            if self.pos == len(self.text):
                break
            if not self.peek(","):
                raise self.fail('"," or end of selector')
            self.pos += 1
            self.skip_ws()
        try:
            return LabelSelector(self.include, self.exclude)
        except ValidationError as exc:
            raise ValidationError(f'label selector "{self.text}" is not valid: {exc.message}') from None

    def value(self) -> str:
        self.skip_ws()
        return self.word(PATH_SYMBOLS, "a label value")

    def term(self) -> None:
        if self.peek("!"):
            self.pos += 1
            self.skip_ws()
            name = self.word(TOKEN_SYMBOLS, "a label name")
            if self.peek(":"):
                raise self.fail('"," or end of term (an absent label takes no ":prefix")')
            self.exclude.append((name, "", False))
            return
        name = self.word(TOKEN_SYMBOLS, 'a label name or "!"')
        prefix = False
        if self.peek(":"):
            self.pos += 1
            if not self.keyword(PREFIX_MODIFIER):
                raise self.fail('"prefix" after ":"')
            prefix = True
        self.skip_ws()
        if self.peek("!="):
            self.pos += 2
            self.exclude.append((name, self.value(), prefix))
        elif self.peek("="):
            self.pos += 2 if self.peek("==") else 1
            self.include.append((name, self.value(), prefix))
        elif self.keyword("in"):
            self.include.extend((name, v, prefix) for v in self.value_set())
        elif self.keyword("notin"):
            self.exclude.extend((name, v, prefix) for v in self.value_set())
        elif self.keyword("not"):
            self.skip_ws()
            if not self.keyword("in"):
                raise self.fail('"in" after "not"')
            self.exclude.extend((name, v, prefix) for v in self.value_set())
        elif prefix:
            raise self.fail(f'"=", "!=", "in" or "notin" after "{name}:prefix" (a prefix match needs values)')
        elif self.pos < len(self.text) and not self.peek(","):
            raise self.fail('an operator ("=", "==", "!=", "in", "notin"), "," or end of selector')
        else:
            self.include.append((name, "", False))

    def value_set(self) -> list[str]:
        self.skip_ws()
        if not self.peek("("):
            raise self.fail('"("')
        self.pos += 1
        values = [self.value()]
        while True:
            self.skip_ws()
            if self.peek(")"):
                self.pos += 1
                return values
            if not self.peek(","):
                raise self.fail('"," or ")"')
            self.pos += 1
            values.append(self.value())
