"""SideEffects: blobs a shard's transactions write to `file://` or `s3://` stores, exactly once.

The discipline of register → prepare → commit → publish → cleanup (issue 18): a handler *registers*
a side effect in its open transaction (a location unique to the attempt: shard, primary's attempt
number, transaction, random id), *prepares* it (the blob is written durably to a staging name under
the store's `.pending/`, invisible to readers of the final location) and refers to it in the messages
it publishes (final address and SHA-1). The registration *commits* with the checkpoint in the shard's
store; only then are the side effects *published* (staged object copied to its final path, then
removed), and only after that are the transaction's ACKs appended: a committed message never points
at nothing. A new primary publishes what the last committed transaction registered before it
re-appends its ACK intents. *Cleanup* (on recovery, then every `cleanup_interval_s`) removes staged
objects of attempts below this primary's: the store's fence moved past them, so they can never
commit. Committed side effects are never removed. `SideEffects.state()` is where each side effect is
in that lifecycle (what Inspect, `gazette shards inspect` and CheckpointView show). Imports
fragment.stores and protocol only.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import re
import secrets
import string
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gazette.fragment.stores import ObjectNotFoundError, StoreError, get_store, parse_store_url
from gazette.fragment.stores.base import check_object_path
from gazette.protocol import gazette_py_pb2
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

PENDING_PREFIX = ".pending/"  # staged objects live under this prefix of their store
STAGING_KEY_HEX = 8  # hex digits of the shard's etcd key hash in its staging prefix
PHASES = ("registered", "prepared", "committed", "published")
CLEANUP_INTERVAL_S = 60.0
IO_WORKERS = 4  # concurrent puts and copies per shard
RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 5.0
RETRY_WARN_EVERY = 10  # a failing store is logged on its first failure and every this many after
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_PLACEHOLDERS = ("shard", "id", "kind")

PhaseCallback = Callable[[str, Sequence["SideEffectRecord"]], None]


class SideEffectError(GazetteError):
    """A side effect was misused (a location not unique per attempt, prepared twice, left unprepared)
    or cannot be published; the message names the side effect and the rule."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


@dataclasses.dataclass(frozen=True, slots=True)
class SideEffectRecord:
    """A registration as the shard's store keeps it: which attempt made it, its kind, where it is
    staged and published (paths relative to the `store` URL), and its content's SHA-1 and size."""

    id: str
    attempt: int
    kind: str
    store: str
    path: str
    staging: str
    sha1: str
    size: int

    @property
    def url(self) -> str:
        """The final object's address: the store URL with `path` appended (before any query)."""
        return object_url(self.store, self.path)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "side-effect registration") -> SideEffectRecord:
        """A registration read back from a store; a ValidationError names `where` and the field."""
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != set(fields):
            raise ValidationError(
                f"{where} {data!r:.200} is not an object with exactly the keys {sorted(fields)}"
            )
        for name in fields:
            want = int if name in ("attempt", "size") else str
            if not isinstance(data[name], want) or isinstance(data[name], bool):
                raise ValidationError(f"{where}.{name} is {data[name]!r:.60}, expected {want.__name__}")
        return cls(**{name: data[name] for name in fields})

    def to_proto(self) -> gazette_py_pb2.SideEffectRecord:
        return gazette_py_pb2.SideEffectRecord(**self.to_dict())

    @classmethod
    def from_proto(cls, pb: gazette_py_pb2.SideEffectRecord) -> SideEffectRecord:
        return cls(**{f.name: getattr(pb, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True, slots=True)
class SideEffectsState:
    """Where a primary's side effects are (`SideEffects.state()`; Inspect's `side_effects`).

    `open`: registered in the open transaction (`sha1` is "" until prepared); `committing`: prepared
    and sealed, committing with the checkpoint; `unpublished`: committed, not yet published (a new
    primary's restored ones until its recovery (re)published them); `published`: how many this
    primary published, recovery's included, and `last_published` the latest transaction's.
    `cleanup_pending`: staged objects (URLs) of fenced-out attempts that the last cleanup found and
    has not removed yet (a store failing); `removed`: how many cleanup removed; `cleanups`: scans
    run, the last ending at `last_cleanup_at` (Unix seconds, 0 before the first) with
    `cleanup_error` ("" if it succeeded); the next is `cleanup_interval_s` after it.
    """

    attempt: int
    stores: tuple[str, ...]
    staging_prefix: str
    open: tuple[SideEffectRecord, ...] = ()
    committing: tuple[SideEffectRecord, ...] = ()
    unpublished: tuple[SideEffectRecord, ...] = ()
    published: int = 0
    last_published: tuple[SideEffectRecord, ...] = ()
    cleanup_pending: tuple[str, ...] = ()
    removed: int = 0
    cleanups: int = 0
    last_cleanup_at: float = 0.0
    cleanup_interval_s: float = CLEANUP_INTERVAL_S
    cleanup_error: str = ""
    store_retries: int = 0

    _RECORDS = ("open", "committing", "unpublished", "last_published")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: records as dicts, tuples as lists (`gazette shards inspect`)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in self._RECORDS:
            d[name] = [r.to_dict() for r in d[name]]
        d["stores"], d["cleanup_pending"] = list(self.stores), list(self.cleanup_pending)
        return d

    def to_proto(self) -> gazette_py_pb2.SideEffectsState:
        fields: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in self._RECORDS:
            fields[name] = [r.to_proto() for r in fields[name]]
        return gazette_py_pb2.SideEffectsState(**fields)

    @classmethod
    def from_proto(cls, pb: gazette_py_pb2.SideEffectsState) -> SideEffectsState:
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = getattr(pb, f.name)
            if f.name in cls._RECORDS:
                value = tuple(SideEffectRecord.from_proto(r) for r in value)
            elif f.name in ("stores", "cleanup_pending"):
                value = tuple(value)
            fields[f.name] = value
        return cls(**fields)


def object_url(store: str, path: str) -> str:
    base, sep, query = store.partition("?")
    return f"{base}{path}{sep}{query}"


def read_side_effect(reference: Mapping[str, Any]) -> bytes:
    """The bytes of a published side effect a message refers to (`SideEffect.reference()`: its
    `store`, `path` and `sha1`), checked against that SHA-1. Raises ObjectNotFoundError if it is
    absent, SideEffectError if its content differs."""
    store, path, sha1 = reference["store"], reference["path"], reference["sha1"]
    data = get_store(store).get(path)
    actual = hashlib.sha1(data).hexdigest()
    if actual != sha1:
        raise SideEffectError(
            f'side effect "{path}" in store {store} has SHA-1 {actual}, but the message refers to SHA-1 {sha1}'
        )
    return data


class SideEffect:
    """A side effect registered in the open transaction: `prepare(data)` it, then put
    `reference()` (or `url` and `sha1`) in the messages that refer to it."""

    def __init__(self, owner: SideEffects, record: SideEffectRecord) -> None:
        self._owner = owner
        self._record = record
        self._prepared: concurrent.futures.Future | None = None

    def __repr__(self) -> str:
        state = "registered" if self._prepared is None else "prepared"
        return f"SideEffect({self._record.kind!r}, {self.url!r}, {state})"

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def kind(self) -> str:
        return self._record.kind

    @property
    def store(self) -> str:
        return self._record.store

    @property
    def path(self) -> str:
        """The final object's path within `store` (where it is published once committed)."""
        return self._record.path

    @property
    def url(self) -> str:
        """The final object's address (visible once the transaction commits)."""
        return self._record.url

    @property
    def sha1(self) -> str:
        """The hex SHA-1 of the prepared content ("" until prepared)."""
        return self._record.sha1

    @property
    def size(self) -> int:
        return self._record.size

    @property
    def record(self) -> SideEffectRecord:
        return self._record

    def prepare(self, data: bytes | bytearray | memoryview) -> SideEffect:
        """Writes `data` to the side effect's staging name (in the background, retrying while the
        store fails; the commit waits for it and never happens if it cannot be written). Its SHA-1
        and size are known at once. Returns the side effect."""
        if self._prepared is not None:
            raise SideEffectError(f"side effect {self.id} ({self.kind}, {self.url}) was already prepared")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(
                f"side effect {self.id} ({self.kind}): prepare takes bytes, not {type(data).__name__}"
            )
        data = bytes(data)
        self._record = dataclasses.replace(self._record, sha1=hashlib.sha1(data).hexdigest(), size=len(data))
        self._prepared = self._owner._prepare(self._record, data)
        return self

    def reference(self) -> dict[str, Any]:
        """What a message carries to refer to the side effect (read back with `read_side_effect`)."""
        if self._prepared is None:
            raise SideEffectError(
                f"side effect {self.id} ({self.kind}, {self.url}) is referred to before it was prepared "
                "(its SHA-1 is not known yet)"
            )
        r = self._record
        return {
            "kind": r.kind,
            "url": r.url,
            "store": r.store,
            "path": r.path,
            "sha1": r.sha1,
            "size": r.size,
        }


class SideEffects:
    """A shard's side effects, written to the stores `stores` (file:// or s3:// URLs; every store
    a side effect may use is named here, so that cleanup finds what an uncommitted attempt left).

    Give it to a store that keeps registrations with its checkpoint (`SQLStore(...,
    side_effects=...)`, `JSONFileStore(..., side_effects=...)`); the application reaches it as
    `store.side_effects` and calls `register` in `consume_message` or `finalize_txn`. The store
    binds it on restore (`bind`) with its attempt number (SQLStore's fence; the recovery log's
    author's first sequence number) and the registrations of its last committed transaction, and
    persists `committing` in each commit. `on_phase(phase, records)` is called (on a background
    thread, or the shard's worker thread for "registered" and "prepared") at each phase boundary of
    `PHASES`: for observation, and for tests to stop a process at a chosen point. `state()` tells
    where each side effect of this primary is (a SideEffectsState).
    """

    def __init__(
        self,
        stores: Sequence[str],
        *,
        cleanup_interval_s: float = CLEANUP_INTERVAL_S,
        retry_timeout_s: float | None = None,
        on_phase: PhaseCallback | None = None,
    ) -> None:
        if isinstance(stores, str) or not stores:
            raise ValidationError(f"SideEffects needs a non-empty list of store URLs (got {stores!r})")
        for url in stores:
            parse_store_url(url)  # a ValidationError naming a bad URL
        if not cleanup_interval_s > 0:
            raise ValidationError(f"SideEffects cleanup_interval_s must be > 0 (got {cleanup_interval_s!r})")
        self.stores: tuple[str, ...] = tuple(dict.fromkeys(stores))
        self.cleanup_interval_s = float(cleanup_interval_s)
        self.retry_timeout_s = retry_timeout_s
        self.on_phase = on_phase
        self.shard_id = ""
        self.attempt = 0  # this primary's attempt number: 0 until bound
        self.restored: tuple[SideEffectRecord, ...] = ()  # the last committed transaction's, at restore
        self.committing: tuple[SideEffectRecord, ...] = ()  # sealed for the commit in progress
        self.store_retries = 0  # store operations retried after a failure (for tests and views)
        self.removed = 0  # staged objects removed by cleanup
        self.published = 0  # side effects this primary published (recovery's included)
        self.last_published: tuple[SideEffectRecord, ...] = ()
        self.cleanups = 0  # cleanup scans run
        self.last_cleanup_at = 0.0  # Unix seconds the last cleanup scan ended (0: none yet)
        self.cleanup_error = ""  # the last cleanup scan's failure ("" if it succeeded)
        self.cleanup_pending: tuple[str, ...] = ()  # fenced-out staged objects found, not removed yet
        # Sealed side effects by id, in order, each "committing" until its commit resolves, then
        # "unpublished" until published (guarded by _lock: state() reads it from another thread).
        self._inflight: dict[str, tuple[str, SideEffectRecord]] = {}
        self._prefix = ""
        self._txn = 0
        self._open: list[SideEffect] = []
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._io = concurrent.futures.ThreadPoolExecutor(IO_WORKERS, thread_name_prefix="side-effects-io")
        self._publisher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="side-effects-publish")

    def __repr__(self) -> str:
        return f"SideEffects({list(self.stores)!r}, shard={self.shard_id!r}, attempt={self.attempt})"

    @property
    def staging_prefix(self) -> str:
        """`.pending/<shard id>-<hash>/` (after `bind`): where this shard stages, in each of its stores.
        The hash (of the shard's etcd key, which names its consumer root) keeps apart applications
        whose shards share an id and a store: each cleans up only its own attempts."""
        return self._prefix

    # ---- binding (by the store, on restore)

    def bind(self, shard_id: str, shard_fqn: str, attempt: int, restored: Iterable[SideEffectRecord]) -> None:
        """Called by the store's restore: the shard's id and etcd key (`Shard.fqn`), this primary's
        attempt number (greater than every earlier primary's: its fence) and the registrations its
        last committed transaction made."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ValidationError(
                f"side-effect attempt number {attempt!r} of shard {shard_id} must be an integer >= 1"
            )
        self.shard_id = shard_id
        self.attempt = attempt
        self.restored = tuple(restored)
        key = hashlib.sha1(shard_fqn.encode()).hexdigest()[:STAGING_KEY_HEX]
        self._prefix = check_object_path("side effects", f"{PENDING_PREFIX}{shard_id}-{key}/x")[:-1]
        self._txn = 0
        self._open = []
        self.committing = ()
        with self._lock:
            # Committed by an earlier primary; published, or not, until `recover` makes sure.
            self._inflight = {r.id: ("unpublished", r) for r in self.restored}

    # ---- register and prepare (the shard's worker thread)

    def register(self, kind: str, path: str, *, store: str | None = None) -> SideEffect:
        """Registers a side effect of the open transaction. `path` (relative to `store`, default the
        first of `stores`) is a template that must contain `{id}`, the attempt-unique id
        (`<attempt>-<transaction>-<random>`), and may contain `{shard}` and `{kind}`: e.g.
        "reports/{shard}/{id}.json". A path without `{id}` is refused: two attempts at one
        transaction would write the same object, and a message could then refer to the other
        attempt's content."""
        if not self.attempt:
            raise SideEffectError(
                "side effects are registered inside a transaction of a restored primary: this SideEffects is not "
                "bound (give it to a store that keeps side effects, e.g. SQLStore(..., side_effects=...), and "
                "register in consume_message or finalize_txn)"
            )
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise ValidationError(
                f"side-effect kind {kind!r} must be a token of letters, digits, '.', '_', '-'"
            )
        store = self.stores[0] if store is None else store
        if store not in self.stores:
            raise SideEffectError(
                f"side effect {kind!r}: store {store} is not one of this shard's side-effect stores {list(self.stores)} "
                "(name every store in SideEffects(stores=...), so cleanup finds what uncommitted attempts leave there)"
            )
        fields = _template_fields(path, kind)
        if "id" not in fields:
            raise SideEffectError(
                f'side effect {kind!r}: path "{path}" is not unique per attempt: it must contain {{id}} (e.g. '
                f'"reports/{{shard}}/{{id}}.json"), or a retried or zombie attempt could overwrite the object a '
                "committed message refers to"
            )
        effect_id = f"{self.attempt}-{self._txn}-{secrets.token_hex(8)}"
        final = path.format(shard=self.shard_id, id=effect_id, kind=kind)
        check_object_path(store, final)
        if final.startswith(PENDING_PREFIX):
            raise SideEffectError(
                f'side effect {kind!r}: path "{final}" is under {PENDING_PREFIX}, the staging area'
            )
        staging = f"{self._prefix}{self.attempt}/{effect_id}"
        effect = SideEffect(
            self, SideEffectRecord(effect_id, self.attempt, kind, store, final, staging, "", 0)
        )
        self._open.append(effect)
        self._phase("registered", [effect.record])
        return effect

    def _prepare(self, record: SideEffectRecord, data: bytes) -> concurrent.futures.Future:
        store = get_store(record.store)
        what = f"preparing side effect {record.id} ({record.kind}) at {record.staging} of {record.store}"
        return self._io.submit(self._retry, what, store.put, record.staging, data)

    # ---- commit (the transaction loop)

    def seal(self) -> tuple[SideEffectRecord, ...]:
        """Ends the open transaction's registrations: waits until each is prepared (durable), and
        returns them as `committing`, what the store persists with this commit. Raises
        SideEffectError for one registered but never prepared, or the error of a failed prepare."""
        effects, self._open = self._open, []
        self._txn += 1
        unprepared = [e for e in effects if e._prepared is None]
        if unprepared:
            names = ", ".join(f"{e.id} ({e.kind}, {e.path})" for e in unprepared[:5])
            raise SideEffectError(
                f"shard {self.shard_id}: side effect(s) {names} were registered but never prepared before the "
                "transaction committed: prepare every side effect you register"
            )
        for e in effects:
            assert e._prepared is not None
            e._prepared.result()  # raises the prepare's failure: the transaction does not commit
        self.committing = tuple(e.record for e in effects)
        if self.committing:
            with self._lock:
                self._inflight.update((r.id, ("committing", r)) for r in self.committing)
            self._phase("prepared", self.committing)
        return self.committing

    def publish_after(
        self, commit: concurrent.futures.Future, records: Sequence[SideEffectRecord]
    ) -> concurrent.futures.Future:
        """A future that resolves once `commit` succeeded and `records` are published (failing if
        the commit failed, or if publishing did): what the transaction's ACK appends wait for."""
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                try:
                    commit.result()
                except BaseException:
                    self._settle(records, None)  # never committed: left for a successor's cleanup
                    raise
                self._settle(records, "unpublished")
                self._phase("committed", records)
                self.publish(records)
                self._phase("published", records)
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        def committed(_: concurrent.futures.Future) -> None:  # on whichever thread resolved the commit
            try:
                self._publisher.submit(run)
            except RuntimeError as exc:  # closed: the shard is stopping
                done.set_exception(
                    SideEffectError(f"shard {self.shard_id}: side effects closed before publishing ({exc})")
                )

        commit.add_done_callback(committed)
        return done

    def publish(self, records: Sequence[SideEffectRecord]) -> None:
        """Publishes committed side effects, idempotently: each staged object is copied to its final
        path, then removed; one already published (staged object gone, final present) is left as it
        is. Store failures are retried. Raises SideEffectError if a committed side effect has
        neither object (something outside this protocol removed it)."""
        futures = [self._io.submit(self._publish_one, r) for r in records]
        for f in futures:
            f.result()
        self._settle(records, None, published=True)

    def _publish_one(self, r: SideEffectRecord) -> None:
        store = get_store(r.store)
        where = f"side effect {r.id} ({r.kind}) of shard {self.shard_id}"
        try:
            self._retry(f"publishing {where} to {r.path} of {r.store}", store.copy, r.staging, r.path)
        except ObjectNotFoundError:
            if not self._retry(f"checking {where} at {r.path} of {r.store}", store.exists, r.path):
                raise SideEffectError(
                    f"{where} was committed, but neither its staged object {r.staging} nor its final object "
                    f"{r.path} exists in store {r.store}: it was removed outside the side-effect protocol"
                ) from None
            return  # published before (a crash or a deposed primary left only the final object)
        self._retry(
            f"removing the staged object of {where} ({r.staging} of {r.store})", store.remove, r.staging
        )

    def recover(self) -> None:
        """On a new primary's start, before its ACK intents are re-appended: publishes what the last
        committed transaction registered (as it may have crashed before or while publishing)."""
        if self.restored:
            log.info(
                "shard %s: publishing %d side effect(s) of its last committed transaction",
                self.shard_id,
                len(self.restored),
            )
            self.publish(self.restored)

    # ---- cleanup

    def cleanup(self) -> list[str]:
        """Removes the staged objects that attempts below this one left in the stores: each such
        attempt was fenced out (this primary's restore moved the fence past it) and can never
        commit. Staged objects of this attempt or a newer one are left alone, as are the last
        committed transaction's (published by `recover`, which runs first). Returns the removed
        object URLs."""
        if not self.attempt:
            return []
        try:
            removed = self._clean()
        except BaseException as exc:
            with self._lock:
                self.cleanup_error = f"{type(exc).__name__}: {exc}"
            raise
        else:
            with self._lock:
                self.cleanup_error = ""
        finally:
            with self._lock:
                self.cleanups += 1
                self.last_cleanup_at = time.time()
        if removed:
            log.info(
                "shard %s: removed %d staged side effect(s) of attempts before %d (fenced out, never committed)",
                self.shard_id, len(removed), self.attempt,
            )  # fmt: skip
        return removed

    def _clean(self) -> list[str]:
        """One cleanup scan: lists every store's staging prefix, then removes the fenced-out attempts'
        objects, keeping `cleanup_pending` to what is found and not removed yet."""
        keep = {(r.store, r.staging) for r in self.restored}
        stale: list[tuple[str, str]] = []  # (store URL, path)
        for url in self.stores:
            store = get_store(url)
            for entry in store.list(self._prefix):
                attempt, sep, _ = entry.path.partition("/")
                if not sep or not attempt.isdigit():
                    log.warning(
                        "shard %s: %s%s in %s is not a staged side effect; left alone",
                        self.shard_id,
                        self._prefix,
                        entry.path,
                        url,
                    )
                    continue
                path = self._prefix + entry.path
                if int(attempt) >= self.attempt or (url, path) in keep:
                    continue
                stale.append((url, path))
        with self._lock:
            self.cleanup_pending = tuple(object_url(url, path) for url, path in stale)
        removed: list[str] = []
        for url, path in stale:
            get_store(url).remove(path)
            removed.append(object_url(url, path))
            with self._lock:
                self.removed += 1
                self.cleanup_pending = self.cleanup_pending[1:]
        return removed

    # ---- state (for Inspect, from any thread)

    def state(self) -> SideEffectsState:
        """A snapshot of where this primary's side effects are (see SideEffectsState)."""
        open_ = tuple(e.record for e in list(self._open))  # the worker thread's list: copied at once
        with self._lock:
            inflight = list(self._inflight.values())
            return SideEffectsState(
                attempt=self.attempt,
                stores=self.stores,
                staging_prefix=self._prefix,
                open=open_,
                committing=tuple(r for phase, r in inflight if phase == "committing"),
                unpublished=tuple(r for phase, r in inflight if phase == "unpublished"),
                published=self.published,
                last_published=self.last_published,
                cleanup_pending=self.cleanup_pending,
                removed=self.removed,
                cleanups=self.cleanups,
                last_cleanup_at=self.last_cleanup_at,
                cleanup_interval_s=self.cleanup_interval_s,
                cleanup_error=self.cleanup_error,
                store_retries=self.store_retries,
            )

    def close(self) -> None:
        """Stops retries and background work (the store is being destroyed: the shard stopped)."""
        self._closed.set()
        self._io.shutdown(wait=False, cancel_futures=True)
        self._publisher.shutdown(wait=False, cancel_futures=True)

    # ---- internals

    def _settle(
        self, records: Sequence[SideEffectRecord], phase: str | None, published: bool = False
    ) -> None:
        """Moves `records` to `phase` in the state (None: out of it; `published`: counting those that
        were committed and waiting, not a repeated publication)."""
        if not records:
            return
        with self._lock:
            for r in records:
                if phase is not None:
                    self._inflight[r.id] = (phase, r)
                elif self._inflight.pop(r.id, None) is not None and published:
                    self.published += 1
            if published:
                self.last_published = tuple(records)

    def _phase(self, phase: str, records: Sequence[SideEffectRecord]) -> None:
        if self.on_phase is not None:
            self.on_phase(phase, records)

    def _retry(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, retried with backoff while the store fails (StoreError other than a missing
        object), until it succeeds, the side effects are closed, or `retry_timeout_s` passed."""
        delay, failures = RETRY_FIRST_DELAY_S, 0
        deadline = None if self.retry_timeout_s is None else time.monotonic() + self.retry_timeout_s
        while True:
            try:
                return fn(*args)
            except ObjectNotFoundError:
                raise
            except StoreError as exc:
                failures += 1
                with self._lock:
                    self.store_retries += 1
                if self._closed.is_set():
                    raise SideEffectError(f"{what}: side effects closed (the shard stopped): {exc}") from exc
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise SideEffectError(
                        f"{what}: the store failed for {self.retry_timeout_s} s: {exc}"
                    ) from exc
                if failures == 1 or failures % RETRY_WARN_EVERY == 0:
                    log.warning("%s failed (%d time(s)); retrying: %s", what, failures, exc)
            if self._closed.wait(delay):
                raise SideEffectError(f"{what}: side effects closed (the shard stopped) while retrying")
            delay = min(delay * 2, RETRY_MAX_DELAY_S)


def _template_fields(path: str, kind: str) -> set[str]:
    """The placeholders of a side-effect path template; ValidationError for unknown ones."""
    if not isinstance(path, str) or not path:
        raise ValidationError(f"side effect {kind!r}: path {path!r} must be a non-empty string")
    try:
        parsed = list(string.Formatter().parse(path))
    except ValueError as exc:
        raise ValidationError(f'side effect {kind!r}: path template "{path}" does not parse: {exc}') from None
    fields = {name for _, name, spec, conv in parsed if name is not None}
    unknown = sorted(fields - set(_PLACEHOLDERS))
    if unknown or any(spec or conv for _, name, spec, conv in parsed if name is not None):
        raise ValidationError(
            f'side effect {kind!r}: path template "{path}" may use only the placeholders '
            f"{{shard}}, {{id}} and {{kind}} (found {unknown or 'a format spec'})"
        )
    return fields
