"""Which journals to read and which fragment objects hold them: from a store listing, or from etcd.

Store-only mode lists the store under the `journals` name or prefix; an object's journal is its
directory with trailing `key=value` (path postfix) components removed, and objects whose names don't
parse as fragments are foreign and skipped. etcd mode reads JournalSpecs under `<root>/items/`
(read-only), selects them by name, prefix or label selector, and lists each journal in its stores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections import defaultdict
from typing import Any

from fragments_io.errors import OptionError
from fragments_io.options import FRAMING_OF_CONTENT_TYPE, ReadOptions
from gazette.fragment.fragment import Fragment, parse_content_name
from gazette.fragment.stores import get_store
from gazette.protocol.errors import ValidationError
from gazette.protocol.spec import JournalSpec

log = logging.getLogger(__name__)
ETCD_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class JournalSource:
    """One journal to read: its name, framing and every persisted fragment found (unsorted, overlaps
    included; planning dedupes them)."""

    name: str
    framing: str
    fragments: tuple[Fragment, ...]
    # Live reads: committed offsets past (or between) the persisted fragments, up to the write head
    # at planning, read through brokers (fragments_io.live.LiveRange, sorted, disjoint from the cover).
    live: tuple[Any, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.length for f in self.fragments) + sum(r.length for r in self.live)


@dataclasses.dataclass(frozen=True)
class Discovery:
    journals: tuple[JournalSource, ...]
    foreign: tuple[str, ...]  # store URL + object path of skipped objects


def split_object_path(path: str) -> tuple[str, str, str] | None:
    """(journal, path_postfix, content name) of a store-relative object path, None if it has no
    directory. Trailing `key=value` directory components form the postfix."""
    parts = path.split("/")
    if len(parts) < 2:
        return None
    dirs = parts[:-1]
    i = len(dirs)
    while i > 1 and "=" in dirs[i - 1]:
        i -= 1
    return "/".join(dirs[:i]), "/".join(dirs[i:]), parts[-1]


def selects(journals: str, name: str) -> bool:
    """Whether option `journals` (a name, a prefix ending in "/", or "" for all) selects `name`."""
    if not journals:
        return True
    if journals.endswith("/"):
        return name.startswith(journals)
    return name == journals


def is_label_selector(journals: str) -> bool:
    """Whether option `journals` is a label selector (etcd mode) rather than a name or prefix."""
    return bool(journals) and (any(c in journals for c in "=:,") or journals.startswith("!"))


def list_store(store_url: str, journals: str) -> tuple[dict[str, list[Fragment]], list[str]]:
    """Fragments per journal under `journals` (a name, a prefix ending in "/", or "" for all) in one
    store, and the foreign objects skipped."""
    store = get_store(store_url)
    prefix = journals if (not journals or journals.endswith("/")) else journals + "/"
    found: dict[str, list[Fragment]] = defaultdict(list)
    foreign: list[str] = []
    for entry in store.list(prefix):
        path = prefix + entry.path
        split = split_object_path(path)
        if split is None:
            foreign.append(store_url + path)
            continue
        journal, postfix, name = split
        try:
            begin, end, sum_, codec = parse_content_name(name)
        except ValidationError:
            foreign.append(store_url + path)
            continue
        if not selects(journals, journal):
            continue
        found[journal].append(Fragment(journal, begin, end, sum_, codec, store_url, entry.mod_time, postfix))
    for obj in foreign:
        log.info("skipping foreign object %s (not a fragment content name)", obj)
    return found, foreign


def discover(opts: ReadOptions) -> Discovery:
    """The journals `opts` select, with their fragments, sorted by name; for live reads, also the
    ranges up to each journal's write head that brokers serve (fragments_io.live)."""
    found = _discover(opts)
    if opts.live:
        from fragments_io.live import with_heads

        return with_heads(found, opts)
    return found


def _discover(opts: ReadOptions) -> Discovery:
    if opts.store:
        found, foreign = list_store(opts.store, opts.journals)
        framing = opts.framing or "json"
        journals = tuple(JournalSource(name, framing, tuple(frags)) for name, frags in sorted(found.items()))
        return Discovery(journals, tuple(foreign))
    specs = etcd_specs(opts)
    out: list[JournalSource] = []
    all_foreign: list[str] = []
    for spec in specs:
        framing = opts.framing or framing_of_spec(spec)
        fragments: list[Fragment] = []
        for store_url in spec.stores:
            found, foreign = list_store(store_url, spec.name)
            fragments.extend(found.get(spec.name, ()))
            all_foreign.extend(foreign)
        out.append(JournalSource(spec.name, framing, tuple(fragments)))
    return Discovery(tuple(out), tuple(all_foreign))


def framing_of_spec(spec: JournalSpec) -> str:
    content_type = spec.content_type
    if not content_type:
        return "json"
    base = content_type.split(";")[0].strip().lower()
    framing = FRAMING_OF_CONTENT_TYPE.get(base)
    if framing is None:
        raise OptionError(
            f'journal {spec.name} has content-type "{content_type}", which fragments_io cannot decode; '
            f"set option framing to one of json, csv, fixed, lines"
        )
    return framing


def _run_coroutine(coro: Any) -> Any:
    """`asyncio.run(coro)`, also where an event loop already runs on this thread (a notebook's kernel):
    then on a thread of its own, as asyncio.run refuses a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fragments-io-etcd") as pool:
        return pool.submit(asyncio.run, coro).result()


def etcd_specs(opts: ReadOptions) -> list[JournalSpec]:
    """JournalSpecs under `<etcdRoot>/items/` matching `journals` (name, prefix, or label selector)."""
    assert opts.etcd
    from gazette.protocol import broker_pb2 as pb
    from gazette.protocol.selector import LabelSelector, journal_labels

    selector: LabelSelector | None = None
    sel = opts.journals
    if is_label_selector(sel):
        try:
            selector = LabelSelector.parse(sel).for_journals()
        except ValidationError as e:
            raise OptionError(f"option journals={sel!r} is not a label selector: {e}") from None
    prefix = f"{opts.etcd_root}/items/"
    kvs = _run_coroutine(_get_prefix(opts.etcd, prefix))
    specs: list[JournalSpec] = []
    for key, raw in kvs:
        try:
            spec = JournalSpec.from_proto(pb.JournalSpec.FromString(raw))
        except Exception as e:
            log.warning("skipping etcd key %s: not a JournalSpec: %s", key, e)
            continue
        if selector is not None:
            if not selector.matches(journal_labels(spec.labels, spec.name)):
                continue
        elif not selects(sel, spec.name):
            continue
        specs.append(spec)
    specs.sort(key=lambda s: s.name)
    return specs


async def _get_prefix(endpoint: str, prefix: str) -> list[tuple[str, bytes]]:
    from gazette.keyspace import connect

    try:
        client = connect(endpoint, timeout=ETCD_TIMEOUT_S)
    except ValueError as e:
        raise OptionError(f"option etcd: {e}") from None
    try:
        resp = await client.get_prefix(prefix.encode())
        return [(kv.key.decode(), kv.value) for kv in resp.kvs]
    except Exception as e:
        raise OptionError(f"option etcd={endpoint!r}: reading {prefix} failed: {e}") from e
    finally:
        await client.close()
