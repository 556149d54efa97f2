"""The `gazette` data source's options, parsed and checked once into a picklable ReadOptions.

Spark hands options case-insensitively (`dict(options)` lower-cases keys), so they are looked up in
lower case here and named in camelCase in errors and docs. Unknown options are an error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from fragments_io.errors import OptionError

DEFAULT_MAX_PARTITION_BYTES = 128 << 20  # uncompressed content per Spark partition
DEFAULT_SAMPLING_BYTES = 1 << 20  # content read to infer a JSON schema
DEFAULT_ETCD_ROOT = "/gazette/cluster"
DEFAULT_UUID_POINTER = "/_meta/uuid"
ISOLATIONS = ("committed", "uncommitted", "raw")
FRAMINGS = ("json", "csv", "fixed", "lines")
FRAMING_OF_CONTENT_TYPE = {
    "application/x-ndjson": "json",
    "text/csv": "csv",
    "application/x-protobuf-fixed": "fixed",
    "text/plain": "lines",
}

# lower-case key -> the documented camelCase name
KNOWN_OPTIONS = {
    name.lower(): name
    for name in (
        "store",
        "path",
        "etcd",
        "etcdRoot",
        "journals",
        "isolation",
        "framing",
        "uuidPointer",
        "beginOffset",
        "endOffset",
        "beginModTime",
        "endModTime",
        "maxPartitionBytes",
        "minPartitions",
        "ignoreCorruptFragments",
        "schema",
        "inferSchema",
        "samplingBytes",
        "maxBytesPerTrigger",
        "checkpoint",
    )
}
STREAM_ONLY_OPTIONS = ("maxbytespertrigger", "checkpoint")
BATCH_ONLY_OPTIONS = ("beginoffset", "endoffset", "beginmodtime", "endmodtime", "minpartitions")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    store: str | None = None
    etcd: str | None = None
    etcd_root: str = DEFAULT_ETCD_ROOT
    journals: str = ""
    isolation: str = "committed"
    framing: str | None = None  # None: from the content type (etcd) or JSON lines (store-only)
    uuid_pointer: str = DEFAULT_UUID_POINTER
    begin_offset: int | None = None
    end_offset: int | None = None
    begin_mod_time: int | None = None  # unix seconds, inclusive
    end_mod_time: int | None = None  # unix seconds, exclusive
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    min_partitions: int | None = None  # batch: spread content over this many (None: the planner's cores)
    ignore_corrupt_fragments: bool = False
    schema: str | None = None  # DDL of the message fields
    infer_schema: bool = True
    sampling_bytes: int = DEFAULT_SAMPLING_BYTES
    max_bytes_per_trigger: int | None = None  # streaming: content bytes admitted per micro-batch
    checkpoint: str | None = None  # streaming: a Checkpoint's JSON form to start from
    given: frozenset[str] = frozenset()  # lower-case keys of the options given

    def replace(self, **changes: Any) -> ReadOptions:
        return dataclasses.replace(self, **changes)


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"option {name}={text!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}={text!r} must be >= {minimum}")
    return value


def _bool(name: str, text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={text!r} is not true or false")


def parse_time(name: str, text: Any) -> int:
    """Unix seconds from an integer (seconds) or an ISO-8601 time (UTC unless it names a zone)."""
    if isinstance(text, dt.datetime):
        when = text
    else:
        raw = str(text).strip()
        try:
            return int(raw)
        except ValueError:
            pass
        try:
            when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise OptionError(
                f"option {name}={text!r} is neither unix seconds nor an ISO-8601 time"
            ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp())


def _checkpoint_json(value: Any) -> str:
    """The canonical JSON of a Checkpoint given as JSON text or its dict form (validated)."""
    import json

    from gazette.message.checkpoint import Checkpoint
    from gazette.protocol.errors import ValidationError

    data = value
    if isinstance(value, str | bytes):
        try:
            data = json.loads(value)
        except ValueError as e:
            raise OptionError(f"option checkpoint is not JSON: {e}") from None
    try:
        checkpoint = Checkpoint.from_dict(data)
    except ValidationError as e:
        raise OptionError(f"option checkpoint is not a consumer checkpoint: {e}") from None
    return json.dumps(checkpoint.to_dict(), sort_keys=True)


def parse_options(raw: Mapping[str, Any]) -> ReadOptions:
    """ReadOptions from Spark's options (any key case). Raises OptionError naming the bad option."""
    opts = {str(k).lower(): v for k, v in raw.items() if v is not None}
    unknown = sorted(k for k in opts if k not in KNOWN_OPTIONS)
    if unknown:
        raise OptionError(
            f"unknown option(s) {unknown} of the gazette data source (known: {sorted(KNOWN_OPTIONS.values())})"
        )
    kw: dict[str, Any] = {}
    store = opts.get("store") or opts.get("path")
    if opts.get("store") and opts.get("path") and opts["store"] != opts["path"]:
        raise OptionError(f"options store={opts['store']!r} and load(path={opts['path']!r}) disagree")
    etcd = opts.get("etcd")
    if not store and not etcd:
        raise OptionError("the gazette data source needs option store (a file:// or s3:// URL) or etcd")
    if store and etcd:
        raise OptionError("give option store or etcd, not both (etcd discovers the stores of each journal)")
    if store:
        from gazette.fragment.stores import parse_store_url

        try:
            parse_store_url(store)
        except Exception as e:
            raise OptionError(f"option store: {e}") from None
        kw["store"] = store
    if etcd:
        kw["etcd"] = etcd.strip()
        if "etcdroot" in opts:
            root = str(opts["etcdroot"]).rstrip("/")
            if not root.startswith("/"):
                raise OptionError(f"option etcdRoot={opts['etcdroot']!r} must start with '/'")
            kw["etcd_root"] = root
    elif "etcdroot" in opts:
        raise OptionError("option etcdRoot needs option etcd")
    kw["journals"] = str(opts.get("journals", "")).strip()
    isolation = str(opts.get("isolation", "committed")).strip().lower()
    if isolation not in ISOLATIONS:
        raise OptionError(f"option isolation={opts['isolation']!r} is not one of {list(ISOLATIONS)}")
    kw["isolation"] = isolation
    if "framing" in opts:
        framing = str(opts["framing"]).strip().lower()
        if framing not in FRAMINGS:
            raise OptionError(f"option framing={opts['framing']!r} is not one of {list(FRAMINGS)}")
        kw["framing"] = framing
    if "uuidpointer" in opts:
        pointer = str(opts["uuidpointer"])
        if not pointer.startswith("/"):
            raise OptionError(f"option uuidPointer={pointer!r} is not a JSON pointer (must start with '/')")
        kw["uuid_pointer"] = pointer
    for key, field in (("beginoffset", "begin_offset"), ("endoffset", "end_offset")):
        if key in opts:
            kw[field] = _int(KNOWN_OPTIONS[key], opts[key], 0)
    for key, field in (("beginmodtime", "begin_mod_time"), ("endmodtime", "end_mod_time")):
        if key in opts:
            kw[field] = parse_time(KNOWN_OPTIONS[key], opts[key])
    if "maxpartitionbytes" in opts:
        kw["max_partition_bytes"] = _int("maxPartitionBytes", opts["maxpartitionbytes"], 1)
    if "minpartitions" in opts:
        kw["min_partitions"] = _int("minPartitions", opts["minpartitions"], 1)
    if "ignorecorruptfragments" in opts:
        kw["ignore_corrupt_fragments"] = _bool("ignoreCorruptFragments", opts["ignorecorruptfragments"])
    if "schema" in opts:
        kw["schema"] = str(opts["schema"])
    if "inferschema" in opts:
        kw["infer_schema"] = _bool("inferSchema", opts["inferschema"])
    if "samplingbytes" in opts:
        kw["sampling_bytes"] = _int("samplingBytes", opts["samplingbytes"], 1)
    if "maxbytespertrigger" in opts:
        kw["max_bytes_per_trigger"] = _int("maxBytesPerTrigger", opts["maxbytespertrigger"], 1)
    if "checkpoint" in opts:
        kw["checkpoint"] = _checkpoint_json(opts["checkpoint"])
    kw["given"] = frozenset(opts)
    result = ReadOptions(**kw)
    if (
        result.begin_offset is not None
        and result.end_offset is not None
        and result.end_offset < result.begin_offset
    ):
        raise OptionError(f"option endOffset={result.end_offset} is below beginOffset={result.begin_offset}")
    return result
