"""LabelSelector: include and exclude label sets, their string grammar, matching and proto mapping (1.1).

A selector is a value: entries are validated and sorted, so selectors parsed from equivalent text
compare equal, and `parse(str(s)) == s`. The grammar, the entries a parse yields and the rules a
selector must keep are Gazette's own (ParseLabelSelector, LabelSelector.Validate).
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
        out.add(SelectorLabel(name, value, prefix))
    entries = tuple(sorted(out))
    # As Gazette's LabelSelector.Validate: per side, a name's values are unique (an exact and a prefix
    # entry of one value collide) and "" (any value) stands alone.
    for a, b in zip(entries, entries[1:], strict=False):
        if a.name != b.name:
            continue
        if a.value == b.value:
            raise ValidationError(
                f'selector {side} label "{a.name}" has the value "{a.value}" both as a prefix and exactly'
            )
        if a.value == "":
            raise ValidationError(
                f'selector {side} label "{a.name}" has both an empty value (any value) '
                f'and the value "{b.value}"'
            )
    return entries


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
        """Parses the selector grammar (docs/semantics.md#names-labels-and-selectors, `_Parser`); "" selects
        everything."""
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
        return pb.LabelSelector(
            include=_entries_to_proto(self.include), exclude=_entries_to_proto(self.exclude)
        )

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
    return LabelSet([("name", name)]).union(spec_labels)  # as Gazette's LabelSetExt: the meta-label wins


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
        if values == [""]:  # an existence entry ("" stands alone: see _normalise)
            terms.append(("!" if exclude else "") + key)
            continue
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
    """Gazette's ParseLabelSelector: terms, each matched whole at the current position, where `_` is
    one optional space (never more), KEY is a label name of 2+ token characters with an optional
    ":prefix", and VALUE is 0+ value characters:

        _ KEY _ ("=" | "==") _ VALUE _ END       include KEY=VALUE ("" = any value)
        _ KEY _ "!=" _ VALUE _ END               exclude KEY=VALUE
        _ KEY " in" _ "(" SET ")" _ END          include KEY=each value of SET
        _ KEY " not" _ "in" _ "(" SET ")" _ END  exclude KEY=each value of SET
        _ KEY _ END                              include KEY, any value
        _ "!" _ KEY _ END                        exclude KEY, any value
        END := "," | end of text                 SET := (_ VALUE _ END)+ over the text inside ( )

    The first form that matches wins. So a trailing "," is accepted, and "" selects everything.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValidationError(f"label selector {text!r} is not a string")
        self.text = text
        self.include: list[tuple[str, str, bool]] = []
        self.exclude: list[tuple[str, str, bool]] = []

    # Each matcher takes a position and returns the position after what it matched, or None.
    def _space(self, pos: int) -> int:
        return pos + 1 if self.text.startswith(" ", pos) else pos

    def _lit(self, pos: int | None, lit: str) -> int | None:
        return pos + len(lit) if pos is not None and self.text.startswith(lit, pos) else None

    def _run(self, pos: int, symbols: str) -> int:
        text = self.text
        while pos < len(text) and is_token_char(text[pos], symbols):
            pos += 1
        return pos

    def _key(self, pos: int | None) -> tuple[str, bool, int] | None:
        if pos is None:
            return None
        begin = self._space(pos)
        end = self._run(begin, TOKEN_SYMBOLS)
        if end - begin < 2:
            return None
        after = self._lit(end, ":" + PREFIX_MODIFIER)
        if after is None:
            return self.text[begin:end], False, end
        return self.text[begin:end], True, after

    def _value(self, pos: int | None) -> tuple[str, int] | None:
        if pos is None:
            return None
        begin = self._space(pos)
        end = self._run(begin, PATH_SYMBOLS)
        return self.text[begin:end], end

    def _end(self, pos: int | None, stop: int) -> int | None:
        """`_ END` within text[:stop]."""
        if pos is None:
            return None
        pos = self._space(pos) if pos < stop else pos
        if pos == stop:
            return pos
        return pos + 1 if self.text[pos] == "," else None

    def _set(self, pos: int | None) -> tuple[int, int, int] | None:
        """`_ "(" ... ")" _ END`: (inside begin, inside end, position after)."""
        pos = self._lit(self._space(pos), "(") if pos is not None else None
        if pos is None:
            return None
        close = self.text.find(")", pos)
        if close <= pos:  # no ")", or nothing inside
            return None
        after = self._end(close + 1, len(self.text))
        return (pos, close, after) if after is not None else None

    def _set_values(self, begin: int, end: int, term: int) -> list[str]:
        values = []
        pos = begin
        while pos < end:
            value = self._value(pos)
            assert value is not None  # a value's characters never include the closing ")"
            after = self._end(value[1], end)
            if after is None:
                raise ValidationError(
                    f'label selector "{self.text}" is not valid at position {pos}: parsing '
                    f'"{self.text[term:]}": could not match "{self.text[pos:end]}" to a label selector set '
                    "expression"
                )
            values.append(value[0])
            pos = after
        return values

    def _term(self, pos: int) -> int | None:
        n = len(self.text)
        key = self._key(pos)
        if key is not None:
            name, prefix, at = key
            op = self._space(at)
            eq = self._lit(op, "==") or self._lit(op, "=")
            if eq is not None and (v := self._value(eq)) and (after := self._end(v[1], n)) is not None:
                self.include.append((name, v[0], prefix))
                return after
            ne = self._lit(op, "!=")
            if ne is not None and (v := self._value(ne)) and (after := self._end(v[1], n)) is not None:
                self.exclude.append((name, v[0], prefix))
                return after
            for side, kw in ((self.include, self._lit(at, " in")), (self.exclude, self._not_in(at))):
                if kw is not None and (inside := self._set(kw)) is not None:
                    begin, end, after = inside
                    side.extend((name, v, prefix) for v in self._set_values(begin, end, pos))
                    return after
            if (after := self._end(at, n)) is not None:
                self.include.append((name, "", prefix))
                return after
        bang = self._lit(self._space(pos), "!")
        key = self._key(bang)
        if key is not None and (after := self._end(key[2], n)) is not None:
            self.exclude.append((key[0], "", key[1]))
            return after
        return None

    def _not_in(self, pos: int) -> int | None:
        at = self._lit(pos, " not")
        return self._lit(self._space(at), "in") if at is not None else None

    def parse(self) -> LabelSelector:
        pos = 0
        while pos < len(self.text):
            after = self._term(pos)
            if after is None:
                raise ValidationError(
                    f'label selector "{self.text}" is not valid at position {pos}: could not match '
                    f'"{self.text[pos:]}" to a label selector expression'
                )
            pos = after
        try:
            return LabelSelector(self.include, self.exclude)
        except ValidationError as exc:
            raise ValidationError(f'label selector "{self.text}" is not valid: {exc.message}') from None
