"""The `gazette` data source's options, parsed and checked once into a picklable ReadOptions.

Spark hands options case-insensitively (`dict(options)` lower-cases keys), so they are looked up in
lower case here and named in camelCase in errors and docs. Unknown options are an error.

Spark's Kafka source options are accepted where they mean the same (a journal is a Kafka partition
and its offsets are bytes): startingOffsets, endingOffsets, maxOffsetsPerTrigger (= maxBytesPerTrigger),
failOnDataLoss, isolation.level (also spelled kafka.isolation.level, the key Spark's Kafka source
reads) and the values read_committed / read_uncommitted of isolation.
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
DEFAULT_BROKER_TIMEOUT_S = 30.0  # live reads: a broker silent this long fails the task (Spark retries it)
ISOLATIONS = ("committed", "uncommitted", "raw")
ISOLATION_ALIASES = {"read_committed": "committed", "read_uncommitted": "uncommitted"}  # Kafka's values
EARLIEST, LATEST = -2, -1  # Kafka's sentinel offsets in startingOffsets / endingOffsets JSON
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
        "isolation.level",
        "kafka.isolation.level",
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
        "maxOffsetsPerTrigger",
        "checkpoint",
        "startingOffsets",
        "endingOffsets",
        "failOnDataLoss",
        "broker",
        "live",
        "brokerTimeout",
    )
}
STREAM_ONLY_OPTIONS = ("maxbytespertrigger", "maxoffsetspertrigger", "checkpoint")
BATCH_ONLY_OPTIONS = (
    "beginoffset",
    "endoffset",
    "endingoffsets",
    "beginmodtime",
    "endmodtime",
    "minpartitions",
)
# What a Kafka source option the gazette source lacks is called here (named in the unknown-option error).
KAFKA_HINTS = {
    "subscribe": "journals (a journal name, or a prefix ending in '/')",
    "subscribepattern": "journals (a journal name, or a prefix ending in '/')",
    "assign": "journals (a journal name, or a prefix ending in '/')",
    "kafka.bootstrap.servers": "store (the fragment store's URL) or etcd",
}
ISOLATION_KEYS = ("isolation", "isolation.level", "kafka.isolation.level")  # the same option, any of them


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
    # startingOffsets: "earliest" or "latest" for journals it does not name, and (journal, offset)
    # of those it names (offset >= 0, or EARLIEST / LATEST).
    starting_position: str = "earliest"
    starting_offsets: tuple[tuple[str, int], ...] = ()
    ending_offsets: tuple[tuple[str, int], ...] = ()  # batch: (journal, offset >= 0 or LATEST)
    fail_on_data_loss: bool = True
    # Live reads (fragments_io.live): committed bytes past the persisted fragments, through brokers.
    broker: str | None = None  # comma-separated broker URLs (None: found in etcd when live)
    live: bool = False  # read through brokers up to each journal's write head
    broker_timeout_s: float = DEFAULT_BROKER_TIMEOUT_S  # bound of each wait on a broker
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


def _isolation(name: str, text: Any) -> str:
    value = str(text).strip().lower()
    value = ISOLATION_ALIASES.get(value, value)
    if value not in ISOLATIONS:
        raise OptionError(f"option {name}={text!r} is not one of {[*ISOLATIONS, *ISOLATION_ALIASES]}")
    return value


def _journal_offsets(name: str, text: Any, words: tuple[str, ...], least: int) -> str | dict[str, int]:
    """One of `words` (lower case), or a JSON object of journal name -> offset (>= `least`: Kafka's
    -2 earliest and -1 latest where they may be given)."""
    import json

    raw = str(text).strip()
    if raw.lower() in words:
        return raw.lower()
    sentinels = {EARLIEST: "earliest", LATEST: "latest"}
    allowed = " | ".join([*words, '{"journal": offset, ...}'])
    try:
        data = json.loads(raw)
    except ValueError:
        raise OptionError(f"option {name}={text!r} is not one of {allowed}") from None
    if not isinstance(data, dict):
        raise OptionError(f"option {name}={text!r} is not one of {allowed}")
    out: dict[str, int] = {}
    for journal, offset in data.items():
        if isinstance(offset, dict):
            raise OptionError(
                f"option {name}: journal {journal!r} has {offset!r}, not an offset; journals are the partitions "
                f'of the gazette source, so give {{"{journal}": 1024}}, not {{"{journal}": {{"0": 1024}}}}'
            )
        if not journal or not isinstance(offset, int) or isinstance(offset, bool) or offset < least:
            what = ", ".join(f"{k} = {v}" for k, v in sentinels.items() if k >= least)
            raise OptionError(
                f"option {name}: offset {offset!r} of journal {journal!r} is not a byte offset >= 0"
                + (f" or {what}" if what else "")
            )
        out[journal] = offset
    return out


def _kafka_offsets(opts: dict[str, Any], kw: dict[str, Any]) -> None:
    """startingOffsets and endingOffsets into `kw`, checked against each other and the options
    they would contradict."""
    from fragments_io.discovery import is_label_selector, selects

    for key, other in (("startingoffsets", "beginoffset"), ("endingoffsets", "endoffset")):
        if key in opts and other in opts:
            raise OptionError(
                f"options {KNOWN_OPTIONS[key]} and {KNOWN_OPTIONS[other]} both bound the offsets read: give one"
            )
    if "startingoffsets" in opts and "checkpoint" in opts:
        raise OptionError("options startingOffsets and checkpoint both say where the stream starts: give one")
    start: str | dict[str, int] = {}
    end: str | dict[str, int] = {}
    if "startingoffsets" in opts:
        start = _journal_offsets("startingOffsets", opts["startingoffsets"], ("earliest", "latest"), EARLIEST)
    if "endingoffsets" in opts:
        end = _journal_offsets("endingOffsets", opts["endingoffsets"], ("latest",), LATEST)
    journals = kw["journals"]
    if not (kw.get("etcd") and is_label_selector(journals)):
        for name, given in (("startingOffsets", start), ("endingOffsets", end)):
            stray = sorted(j for j in given if isinstance(given, dict) and not selects(journals, j))
            if stray:
                raise OptionError(
                    f"option {name} names journal(s) {stray} that option journals={journals!r} does not select"
                )
    if isinstance(start, str):
        kw["starting_position"] = start
    else:
        kw["starting_offsets"] = tuple(sorted(start.items()))
    if isinstance(end, dict):
        kw["ending_offsets"] = tuple(sorted(end.items()))
        for journal, hi in end.items():
            lo = start.get(journal, EARLIEST) if isinstance(start, dict) else EARLIEST
            if 0 <= hi < lo:
                raise OptionError(
                    f"option endingOffsets: journal {journal} ends at {hi}, before its startingOffsets {lo}"
                )


def _live(opts: dict[str, Any], kw: dict[str, Any]) -> None:
    """Options broker, live and brokerTimeout: whether reads go past the persisted fragments."""
    if "broker" in opts:
        from gazette.client.aio import broker_endpoints

        try:
            kw["broker"] = ",".join(broker_endpoints(str(opts["broker"])))
        except ValueError as e:
            raise OptionError(f"option broker: {e}") from None
    live = _bool("live", opts["live"]) if "live" in opts else "broker" in kw
    if live and "broker" not in kw and not kw.get("etcd"):
        raise OptionError(
            "option live=true reads through brokers: give option broker (their URLs, comma-separated), "
            "or option etcd (the brokers registered there are used)"
        )
    if not live and "broker" in kw:
        raise OptionError(
            "option broker reads through brokers, which option live=false turns off: drop one of them"
        )
    kw["live"] = live
    if "brokertimeout" in opts:
        text = opts["brokertimeout"]
        try:
            seconds = float(str(text).strip())
        except ValueError:
            raise OptionError(f"option brokerTimeout={text!r} is not a number of seconds") from None
        if not seconds > 0 or seconds == float("inf"):
            raise OptionError(f"option brokerTimeout={text!r} must be a positive, finite number of seconds")
        if not live:
            raise OptionError("option brokerTimeout applies to live reads only (option broker, or live=true)")
        kw["broker_timeout_s"] = seconds


def check_batch(opts: ReadOptions) -> None:
    """Raises OptionError for options a batch read cannot take."""
    if opts.checkpoint is not None:
        raise OptionError(
            "option checkpoint applies to spark.readStream only (a batch read decides commits from "
            "each journal's start)"
        )
    if opts.starting_position == "latest" or any(o == LATEST for _, o in opts.starting_offsets):
        raise OptionError(
            "option startingOffsets: latest (or -1) applies to spark.readStream only; a batch read from "
            "there would be empty (give earliest, or offsets)"
        )


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
        hints = "".join(f"; for {k} use {KAFKA_HINTS[k]}" for k in unknown if k in KAFKA_HINTS)
        raise OptionError(
            f"unknown option(s) {unknown} of the gazette data source (known: {sorted(KNOWN_OPTIONS.values())})"
            + hints
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
    isolations = {
        KNOWN_OPTIONS[k]: _isolation(KNOWN_OPTIONS[k], opts[k]) for k in ISOLATION_KEYS if k in opts
    }
    if len(set(isolations.values())) > 1:
        given = " and ".join(f"{KNOWN_OPTIONS[k]}={opts[k]!r}" for k in ISOLATION_KEYS if k in opts)
        raise OptionError(f"options {given} disagree")
    kw["isolation"] = next(iter(isolations.values()), "committed")
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
    budgets = {
        KNOWN_OPTIONS[k]: _int(KNOWN_OPTIONS[k], opts[k], 1)
        for k in ("maxbytespertrigger", "maxoffsetspertrigger")
        if k in opts
    }
    if len(set(budgets.values())) > 1:
        raise OptionError(
            f"options maxBytesPerTrigger={budgets['maxBytesPerTrigger']} and maxOffsetsPerTrigger="
            f"{budgets['maxOffsetsPerTrigger']} disagree (a journal offset is a byte: they are one limit)"
        )
    if budgets:
        kw["max_bytes_per_trigger"] = next(iter(budgets.values()))
    if "checkpoint" in opts:
        kw["checkpoint"] = _checkpoint_json(opts["checkpoint"])
    if "failondataloss" in opts:
        kw["fail_on_data_loss"] = _bool("failOnDataLoss", opts["failondataloss"])
    _kafka_offsets(opts, kw)
    _live(opts, kw)
    kw["given"] = frozenset(opts)
    result = ReadOptions(**kw)
    if (
        result.begin_offset is not None
        and result.end_offset is not None
        and result.end_offset < result.begin_offset
    ):
        raise OptionError(f"option endOffset={result.end_offset} is below beginOffset={result.begin_offset}")
    return result
