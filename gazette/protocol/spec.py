"""JournalSpec (docs/semantics.md#journal-specs): the public spec type, its validation, proto and dict forms,
and gazctl's YAML.

The constructor only normalises input types (strings, dicts, lists); `validate()` applies every rule,
since a spec stored in etcd must validate on its own. In YAML hierarchies a zero value means unset:
directory nodes (names ending in `/`) pass their non-zero fields down to children, and listing hoists
fields shared by all children of a directory up to it, so load(dump(specs)) == specs.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import yaml
from google.protobuf import duration_pb2

from gazette.protocol import broker_pb2 as pb
from gazette.protocol.codec import Codec
from gazette.protocol.durations import NS_PER_S, format_duration, parse_duration
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.postfix import validate_postfix_template
from gazette.protocol.validate import (
    CONTENT_TYPE,
    JOURNAL_RESERVED_LABELS,
    validate_journal_name,
    validate_labels,
)

MAX_REPLICATION = 5
FRAGMENT_LENGTH_BYTES = (1 << 10, 1 << 34)
REFRESH_INTERVAL_S = (1.0, 24 * 3600.0)
MIN_FLUSH_INTERVAL_S = 60.0
DEFAULT_FRAGMENT_LENGTH_BYTES = 16 << 20
DEFAULT_REFRESH_INTERVAL_S = 60.0
STORE_SCHEMES = ("s3", "gs", "azure", "azure-ad", "file")


class JournalFlag(IntEnum):
    """Exactly one of these; NOT_SPECIFIED means read and write."""

    NOT_SPECIFIED = 0
    O_RDONLY = 1
    O_WRONLY = 2
    O_RDWR = 4

    @classmethod
    def parse(cls, value: JournalFlag | int | str) -> JournalFlag:
        """Accepts a flag, its number, or a name such as "O_RDONLY", "rdonly", "rdwr"."""
        if isinstance(value, str):
            key = value.strip().upper().replace("-", "_")
            key = key if key in cls.__members__ or key.startswith("O_") else "O_" + key
            if key in cls.__members__:
                return cls[key]
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        raise ValidationError(
            f"flags {value!r} is not valid (expected exactly one of NOT_SPECIFIED=0, O_RDONLY=1, "
            "O_WRONLY=2, O_RDWR=4)"
        )

    @property
    def may_read(self) -> bool:
        return self != JournalFlag.O_WRONLY

    @property
    def may_write(self) -> bool:
        return self != JournalFlag.O_RDONLY


class SuspendLevel(IntEnum):
    """Journal suspension, managed by brokers: PARTIAL runs one replica, FULL none."""

    NONE = 0
    PARTIAL = 1
    FULL = 2

    @classmethod
    def parse(cls, value: SuspendLevel | int | str) -> SuspendLevel:
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        raise ValidationError(f"suspend level {value!r} is not valid (expected none, partial or full)")


LabelsLike = LabelSet | Mapping[str, str] | Iterable[tuple[str, str]] | None
DurationLike = float | int | str


def _as_int(what: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{what} {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValidationError(f"{what} {value!r} is not an integer")


def _as_stores(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        stores = tuple(value)
        for s in stores:
            if not isinstance(s, str):
                raise ValidationError(f"stores entry {s!r} is not a URL string")
        return stores
    raise ValidationError(f"stores {value!r} is not a list of URLs")


def _as_labels(value: Any) -> LabelSet:
    """A LabelSet from a LabelSet, pairs, a list of {name, value} or a mapping of name to value(s)."""
    if value is None:
        return LabelSet()
    if isinstance(value, LabelSet):
        return value
    pairs: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        for name, v in value.items():
            values = v if isinstance(v, list | tuple) else [v]
            pairs += [(str(name), "" if x is None else str(x)) for x in values]
    elif isinstance(value, Iterable) and not isinstance(value, str):
        for item in value:
            if isinstance(item, Mapping):
                unknown = set(item) - {"name", "value"}
                if "name" not in item or unknown:
                    raise ValidationError(f"labels entry {item!r} is not {{name, value}}")
                v = item.get("value")
                pairs.append((str(item["name"]), "" if v is None else str(v)))
            elif isinstance(item, list | tuple) and len(item) == 2:
                pairs.append((str(item[0]), str(item[1])))
            else:
                raise ValidationError(f"labels entry {item!r} is not a (name, value) pair")
    else:
        raise ValidationError(f"labels {value!r} is not a mapping or a list of labels")
    return LabelSet(pairs)


# Per field: the coercion applied by the constructor, and its zero value (unset in a YAML hierarchy).
_COERCE: dict[str, Callable[[Any], Any]] = {
    "replication": lambda v: _as_int("replication", v),
    "labels": _as_labels,
    "fragment_length": lambda v: _as_int("fragment_length", v),
    "compression": Codec.parse,
    "stores": _as_stores,
    "refresh_interval": lambda v: parse_duration(v, what="refresh_interval"),
    "retention": lambda v: parse_duration(v, what="retention"),
    "flush_interval": lambda v: parse_duration(v, what="flush_interval"),
    "path_postfix_template": lambda v: _as_str("path_postfix_template", v),
    "flags": JournalFlag.parse,
    "max_append_rate": lambda v: _as_int("max_append_rate", v),
    "suspend_level": SuspendLevel.parse,
    "suspend_offset": lambda v: _as_int("suspend_offset", v),
}


def _as_str(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{what} {value!r} is not a string")
    return value


def _is_zero(value: Any) -> bool:
    return not value


@dataclasses.dataclass(frozen=True)
class JournalSpec:
    """A journal's configuration; fields accept convenient types (see API.md) and are normalised."""

    name: str
    replication: int = 1
    labels: LabelSet = dataclasses.field(default_factory=LabelSet)
    fragment_length: int = DEFAULT_FRAGMENT_LENGTH_BYTES
    compression: Codec = Codec.SNAPPY
    stores: tuple[str, ...] = ()
    refresh_interval: float = DEFAULT_REFRESH_INTERVAL_S
    retention: float = 0.0
    flush_interval: float = 0.0
    path_postfix_template: str = ""
    flags: JournalFlag = JournalFlag.NOT_SPECIFIED
    max_append_rate: int = 0
    suspend_level: SuspendLevel = SuspendLevel.NONE
    suspend_offset: int = 0

    if TYPE_CHECKING:  # the accepted input types; the dataclass generates the same signature at run time

        def __init__(
            self,
            name: str,
            replication: int = 1,
            labels: LabelsLike = None,
            fragment_length: int = DEFAULT_FRAGMENT_LENGTH_BYTES,
            compression: Codec | str | int = Codec.SNAPPY,
            stores: Iterable[str] | str = (),
            refresh_interval: DurationLike = DEFAULT_REFRESH_INTERVAL_S,
            retention: DurationLike = 0.0,
            flush_interval: DurationLike = 0.0,
            path_postfix_template: str = "",
            flags: JournalFlag | int | str = JournalFlag.NOT_SPECIFIED,
            max_append_rate: int = 0,
            suspend_level: SuspendLevel | int | str = SuspendLevel.NONE,
            suspend_offset: int = 0,
        ) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValidationError(f"journal spec name {self.name!r} is not a string")
        try:
            for key, coerce in _COERCE.items():
                object.__setattr__(self, key, coerce(getattr(self, key)))
        except ValidationError as exc:
            raise ValidationError(f'journal spec "{self.name}": {exc.message}') from None

    @property
    def readable(self) -> bool:
        return self.flags.may_read

    @property
    def writable(self) -> bool:
        return self.flags.may_write

    @property
    def content_type(self) -> str | None:
        return self.labels.value_of(CONTENT_TYPE)

    def replace(self, **changes: Any) -> JournalSpec:
        return dataclasses.replace(self, **changes)

    def validate(self) -> JournalSpec:
        """Raises ValidationError naming the field and rule (docs/semantics.md#journal-specs); returns self
        when valid."""
        try:
            self._validate()
        except ValidationError as exc:
            raise ValidationError(f'journal spec "{self.name}": {exc.message}') from None
        return self

    def _validate(self) -> None:
        validate_journal_name(self.name)
        if not 1 <= self.replication <= MAX_REPLICATION:
            raise ValidationError(
                f"replication {self.replication} is out of range (expected 1..{MAX_REPLICATION})"
            )
        validate_labels(self.labels, JOURNAL_RESERVED_LABELS)
        lo, hi = FRAGMENT_LENGTH_BYTES
        if not lo <= self.fragment_length <= hi:
            raise ValidationError(
                f"fragment_length {self.fragment_length} is out of range (expected {lo}..{hi})"
            )
        for i, store in enumerate(self.stores):
            validate_store_url(store, what=f"stores[{i}]")
        if (
            self.stores
            and self.compression == Codec.GZIP_OFFLOAD_DECOMPRESSION
            and urllib.parse.urlsplit(self.stores[0]).scheme == "file"
        ):
            raise ValidationError(
                f'compression GZIP_OFFLOAD_DECOMPRESSION is not allowed with a file:// first store ("{self.stores[0]}")'
            )
        lo_s, hi_s = REFRESH_INTERVAL_S
        if not lo_s <= self.refresh_interval <= hi_s:
            raise ValidationError(
                f"refresh_interval {format_duration(self.refresh_interval)} is out of range "
                f"(expected {format_duration(lo_s)}..{format_duration(hi_s)})"
            )
        if self.flush_interval != 0 and self.flush_interval < MIN_FLUSH_INTERVAL_S:
            raise ValidationError(
                f"flush_interval {format_duration(self.flush_interval)} is too short "
                f"(expected 0 or >= {format_duration(MIN_FLUSH_INTERVAL_S)})"
            )
        validate_postfix_template(self.path_postfix_template, journal=self.name)
        if self.max_append_rate < 0:
            raise ValidationError(
                f"max_append_rate {self.max_append_rate} is negative (expected >= 0; 0 = unlimited)"
            )
        if self.suspend_offset < 0:
            raise ValidationError(f"suspend_offset {self.suspend_offset} is negative")

    def to_proto(self) -> pb.JournalSpec:
        msg = pb.JournalSpec(
            name=self.name,
            replication=self.replication,
            labels=self.labels.to_proto(),
            fragment=pb.JournalSpec.Fragment(
                length=self.fragment_length,
                compression_codec=self.compression.name,
                stores=list(self.stores),
                refresh_interval=_duration_pb(self.refresh_interval),
                retention=_duration_pb(self.retention),
                flush_interval=_duration_pb(self.flush_interval),
                path_postfix_template=self.path_postfix_template,
            ),
            flags=int(self.flags),
            max_append_rate=self.max_append_rate,
        )
        if self.suspend_level or self.suspend_offset:
            msg.suspend.level = int(self.suspend_level)  # type: ignore[assignment]
            msg.suspend.offset = self.suspend_offset
        return msg

    @classmethod
    def from_proto(cls, msg: pb.JournalSpec) -> JournalSpec:
        frag = msg.fragment
        return cls(
            name=msg.name,
            replication=msg.replication,
            labels=LabelSet.from_proto(msg.labels),
            fragment_length=frag.length,
            compression=frag.compression_codec,
            stores=tuple(frag.stores),
            refresh_interval=frag.refresh_interval.ToNanoseconds() / NS_PER_S,
            retention=frag.retention.ToNanoseconds() / NS_PER_S,
            flush_interval=frag.flush_interval.ToNanoseconds() / NS_PER_S,
            path_postfix_template=frag.path_postfix_template,
            flags=msg.flags,
            max_append_rate=msg.max_append_rate,
            suspend_level=msg.suspend.level,
            suspend_offset=msg.suspend.offset,
        )

    def to_dict(self) -> dict[str, Any]:
        """YAML-friendly form in gazctl's layout: nested `fragment`, durations as text, codec by name."""
        fields = {key: getattr(self, key) for key in _COERCE}
        return {"name": self.name, **_fields_to_yaml(fields)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JournalSpec:
        """Inverse of to_dict; also accepts flat field names (fragment_length, compression, ...)."""
        if not isinstance(d, Mapping):
            raise ValidationError(f"journal spec {d!r} is not a mapping")
        name = d.get("name")
        if not isinstance(name, str):
            raise ValidationError(f"journal spec {dict(d)!r} has no name")
        rest = {k: v for k, v in d.items() if k != "name"}
        try:
            fields = _fields_from_yaml(rest)
        except ValidationError as exc:
            raise ValidationError(f'journal spec "{name}": {exc.message}') from None
        return cls(name=name, **fields)


def _duration_pb(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * NS_PER_S))
    return d


def validate_store_url(url: str, *, what: str = "store") -> None:
    """Scheme s3/gs/azure/azure-ad/file, absolute, path ending in `/`; file:// has no host (1.2)."""
    if not isinstance(url, str):
        raise ValidationError(f"{what} {url!r} is not a URL string")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise ValidationError(f'{what} "{url}" is not a URL ({exc})') from None
    if not parts.scheme:
        raise ValidationError(f'{what} "{url}" is not an absolute URL (expected scheme://...)')
    if parts.scheme not in STORE_SCHEMES:
        raise ValidationError(
            f'{what} "{url}" has unsupported scheme "{parts.scheme}" (expected one of {", ".join(STORE_SCHEMES)})'
        )
    if parts.scheme == "file" and parts.netloc:
        raise ValidationError(f'{what} "{url}" is a file:// URL with a host (expected file:///abs/dir/)')
    if parts.scheme != "file" and not parts.netloc:
        raise ValidationError(
            f'{what} "{url}" has no bucket or account (expected {parts.scheme}://bucket/...)'
        )
    if not parts.path.endswith("/"):
        raise ValidationError(f'{what} "{url}" path "{parts.path}" does not end in "/"')


# ---- YAML-friendly field dicts -------------------------------------------------------------------

# Nested gazctl keys -> field names. Flat field names are accepted too (see _FLAT).
_NESTED = {
    "fragment": {
        "length": "fragment_length",
        "compression_codec": "compression",
        "compression": "compression",
        "stores": "stores",
        "refresh_interval": "refresh_interval",
        "retention": "retention",
        "flush_interval": "flush_interval",
        "path_postfix_template": "path_postfix_template",
    },
    "suspend": {"level": "suspend_level", "offset": "suspend_offset"},
}
_FLAT = {key: key for key in _COERCE} | {"compression_codec": "compression"}
_DURATIONS = ("refresh_interval", "retention", "flush_interval")


def _fields_from_yaml(d: Mapping[str, Any]) -> dict[str, Any]:
    """Coerced field values of the spec keys of `d`; raises on unknown or repeated keys."""
    out: dict[str, Any] = {}
    shown: dict[str, str] = {}

    def put(field: str, key: str, value: Any) -> None:
        if field in out:
            raise ValidationError(f"{key} repeats {shown[field]}")
        out[field], shown[field] = _COERCE[field](value), key

    for key, value in d.items():
        if key in _NESTED:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ValidationError(f"{key} {value!r} is not a mapping")
            for sub, v in value.items():
                if sub not in _NESTED[key]:
                    raise ValidationError(
                        f'unknown key "{key}.{sub}" (expected one of {", ".join(_NESTED[key])})'
                    )
                put(_NESTED[key][sub], f"{key}.{sub}", v)
        elif key in _FLAT:
            put(_FLAT[key], key, value)
        else:
            raise ValidationError(f'unknown key "{key}"')
    return out


def _fields_to_yaml(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Nested gazctl layout of the given (coerced) fields, in a stable order."""
    out: dict[str, Any] = {}
    frag: dict[str, Any] = {}
    suspend: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "labels":
            out["labels"] = [{"name": n, "value": v} if v else {"name": n} for n, v in value]
        elif key == "fragment_length":
            frag["length"] = value
        elif key == "compression":
            frag["compression_codec"] = value.name  # gazctl reads the enum's own name only (SNAPPY)
        elif key == "stores":
            frag["stores"] = list(value)
        elif key in _DURATIONS:
            frag[key] = format_duration(value)
        elif key == "path_postfix_template":
            frag[key] = value
        elif key == "flags":
            out["flags"] = value.name
        elif key == "suspend_level":
            suspend["level"] = value.name
        elif key == "suspend_offset":
            suspend["offset"] = value
        else:
            out[key] = value
    order = list(_NESTED["fragment"])
    if frag:
        out["fragment"] = {k: frag[k] for k in order if k in frag}
    if suspend:
        out["suspend"] = suspend
    keys = ("name", "replication", "labels", "fragment", "flags", "max_append_rate", "suspend")
    return {k: out[k] for k in keys if k in out}


# ---- gazctl YAML hierarchy (docs/semantics.md#journal-specs, broker/journalspace) ----------------

_NODE_KEYS = ("name", "revision", "delete", "children", "comment")  # comment: gazctl's no-op field
_LEAF_ONLY = ("suspend_level", "suspend_offset")


@dataclasses.dataclass(frozen=True)
class SpecChange:
    """One change of an Apply: upsert `spec`, or delete it; expect_mod_revision 0 = create, -1 = any."""

    spec: JournalSpec
    expect_mod_revision: int = 0
    delete: bool = False

    def to_proto(self) -> pb.ApplyRequest.Change:
        if self.delete:
            return pb.ApplyRequest.Change(expect_mod_revision=self.expect_mod_revision, delete=self.spec.name)
        return pb.ApplyRequest.Change(
            expect_mod_revision=self.expect_mod_revision, upsert=self.spec.to_proto()
        )


def _push_down(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """The child's non-zero fields, filled from the parent's; labels union per name, the child's winning."""
    out = {k: v for k, v in parent.items() if k not in _LEAF_ONLY}
    for key, value in child.items():
        if key == "labels" and "labels" in out:
            own = {n for n, _ in value}
            out["labels"] = LabelSet([*value, *((n, v) for n, v in out["labels"] if n not in own)])
        elif not _is_zero(value) or key not in out:
            out[key] = value
    return out


def load_specs_yaml(text: str, *, validate: bool = True) -> list[SpecChange]:
    """Flattens gazctl-style YAML (a node tree, a list of nodes, or several documents) into changes.

    The tree's rules are gazctl's (broker/journalspace): a directory's fields fill its children's unset
    ones, its `delete` applies to each child that doesn't set its own, children are listed in name
    order, and a directory takes no (non-zero) revision.
    """
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValidationError(f"journal specs YAML does not parse: {exc}") from None
    changes: list[SpecChange] = []
    for doc in docs:
        roots = doc if isinstance(doc, list) else [doc]
        for i, node in enumerate(roots):
            where = f"[{i}]" if isinstance(doc, list) else "document root"
            _load_node(node, where, None, {}, None, changes, validate)
    seen: set[str] = set()
    for ch in changes:
        if ch.spec.name in seen:
            raise ValidationError(f'journal specs YAML lists journal "{ch.spec.name}" more than once')
        seen.add(ch.spec.name)
    return changes


def _node_name(node: Any, where: str) -> str:
    if not isinstance(node, Mapping):
        raise ValidationError(f"journal specs YAML node {where} is not a mapping")
    name = node.get("name") or ""
    if not isinstance(name, str):
        raise ValidationError(f"journal specs YAML node {where}: name {name!r} is not a string")
    return name


def _load_node(
    node: Any,
    where: str,
    parent_name: str | None,
    inherited: dict[str, Any],
    inherited_delete: bool | None,
    out: list[SpecChange],
    validate: bool,
) -> None:
    name = _node_name(node, where)
    label = f'node "{name}"' if name else f"node {where}"
    try:
        if parent_name is not None and not name.startswith(parent_name):
            # As gazctl (journalspace Node.Validate): a nameless node is a directory, and only a
            # nameless parent prefixes it.
            raise ValidationError(f'name is not under its parent directory "{parent_name}"')
        own = _fields_from_yaml({k: v for k, v in node.items() if k not in _NODE_KEYS})
        delete = node.get("delete")
        if delete is not None and not isinstance(delete, bool):
            raise ValidationError(f"delete {delete!r} is not true or false")
        # As gazctl's PushDown: a node's own delete (true or false) wins over its directory's.
        delete = inherited_delete if delete is None else delete
        revision = _as_int("revision", node.get("revision") or 0)
        children: list[Any] | None = node.get("children")
        if children is not None and not isinstance(children, list):
            raise ValidationError("children is not a list")
        is_dir = name == "" or name.endswith("/")
        if is_dir:
            misplaced = [k for k in _LEAF_ONLY if k in own] or (["revision"] if revision else [])
            if misplaced:
                raise ValidationError(f'"{misplaced[0]}" is allowed only on journals, not directories')
            if not children:
                raise ValidationError('a directory (a name ending in "/", or no name) needs children')
        elif children:
            raise ValidationError('a journal cannot have children (directory names end in "/")')
        fields = _push_down(inherited, own)
    except ValidationError as exc:
        raise ValidationError(f"journal specs YAML {label}: {exc.message}") from None

    if is_dir:
        assert children
        previous = None
        for i, child in enumerate(children):
            child_name = _node_name(child, f"{where}.children[{i}]")
            if previous is not None and previous >= child_name and child_name.startswith(name):
                # As gazctl (journalspace Node.Validate): children are in strictly increasing name order.
                raise ValidationError(
                    f"journal specs YAML {label}: children are not in name order "
                    f'("{child_name}" at children[{i}] follows "{previous}")'
                )
            previous = child_name
            _load_node(child, f"{where}.children[{i}]", name, fields, delete, out, validate)
        return
    try:
        spec = JournalSpec(name=name, **fields)
        if delete:
            # As Gazette's ApplyRequest.Change validation.
            if revision <= 0 and revision != -1:
                raise ValidationError(
                    f"delete needs a revision (the journal's mod revision, or -1 for any), not {revision}"
                )
            if validate:
                validate_journal_name(name)  # only its name matters
        else:
            if revision < -1:
                raise ValidationError(f"revision {revision} is not valid (expected >= 0, or -1 for any)")
            if validate:
                spec.validate()
    except ValidationError as exc:
        raise ValidationError(f"journal specs YAML {label}: {exc.message}") from None
    out.append(SpecChange(spec=spec, expect_mod_revision=revision, delete=bool(delete)))


@dataclasses.dataclass
class _Node:
    name: str
    fields: dict[str, Any]
    revision: int = 0
    children: list[_Node] = dataclasses.field(default_factory=list)

    @property
    def is_dir(self) -> bool:
        return bool(self.children)


def _set_fields(spec: JournalSpec) -> dict[str, Any]:
    return {key: getattr(spec, key) for key in _COERCE if not _is_zero(getattr(spec, key))}


def _build(prefix: str, leaves: list[_Node]) -> _Node:
    """A directory node for `prefix` over sorted leaves, one sub-directory per shared directory prefix."""
    node = _Node(prefix, {})
    groups: dict[str, list[_Node]] = {}
    for leaf in leaves:
        rest = leaf.name[len(prefix) :]
        slash = rest.find("/")
        key = leaf.name if slash == -1 else prefix + rest[: slash + 1]
        groups.setdefault(key, []).append(leaf)
    for group in groups.values():
        if len(group) == 1:
            node.children.append(group[0])
        else:
            common = os.path.commonprefix([g.name for g in group])
            node.children.append(_build(common[: common.rfind("/") + 1], group))
    return node


def _same_label_values(name: str, labels: LabelSet, others: list[dict[str, Any]]) -> bool:
    """Whether every other field dict has exactly the values of label `name` that `labels` has."""
    mine = labels.values_of(name)
    return all(o.get("labels", LabelSet()).values_of(name) == mine for o in others)


def _hoist(node: _Node) -> None:
    """Moves fields equal (and non-zero) across all children up into the directory node."""
    for child in node.children:
        if child.is_dir:
            _hoist(child)
    first, *others = [c.fields for c in node.children]
    shared: dict[str, Any] = {}
    for key, value in first.items():
        if key in _LEAF_ONLY:
            continue
        if key == "labels":
            common = LabelSet((n, v) for n, v in value if _same_label_values(n, value, others))
            if common:
                shared["labels"] = common
        elif all(o.get(key) == value for o in others):
            shared[key] = value
    node.fields = shared
    for child in node.children:
        for key in shared:
            if key == "labels":
                drop = {n for n, _ in shared["labels"]}
                rest = LabelSet((n, v) for n, v in child.fields["labels"] if n not in drop)
                child.fields["labels"] = rest
                if not rest:
                    del child.fields["labels"]
            else:
                del child.fields[key]


def _node_to_yaml(node: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name} if node.name else {}
    out |= _fields_to_yaml(node.fields)
    if node.is_dir:
        out["children"] = [_node_to_yaml(c) for c in node.children]
    elif node.revision:
        out["revision"] = node.revision
    return out


def dump_specs_yaml(specs_with_revisions: Iterable[tuple[JournalSpec, int] | JournalSpec]) -> str:
    """gazctl-style YAML of the specs: a hoisted directory tree with each journal's `revision`."""
    leaves = []
    for item in specs_with_revisions:
        spec, revision = (item, 0) if isinstance(item, JournalSpec) else item
        leaves.append(_Node(spec.name, _set_fields(spec), revision))
    leaves.sort(key=lambda n: n.name)
    for a, b in zip(leaves, leaves[1:], strict=False):
        if a.name == b.name:
            raise ValidationError(f'journal "{a.name}" is given more than once')
    if not leaves:
        return "[]\n"
    if len(leaves) == 1:
        doc = _node_to_yaml(leaves[0])
    else:
        common = os.path.commonprefix([n.name for n in leaves])
        root = _build(common[: common.rfind("/") + 1], leaves)
        _hoist(root)
        doc = _node_to_yaml(root)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 16)
