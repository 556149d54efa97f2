"""Live ipywidgets views: the cluster (brokers, journals' routes and write heads, shards' statuses,
kept current by an etcd watch), one journal's fragments, a Sequencer's state and a shard's checkpoint.

Each view is an ipywidgets VBox (display it, or put it in another layout) whose model is exposed as
traitlets: `view.observe(callback, names=["offsets"])` is called with each change. Every view has the
traits `refreshes` (completed refreshes), `last_error` (of the last failed auto-refresh, None after a
good one) and `status_line` (the text of its status line), and `refresh()` (one synchronous update),
`start(interval_s)` (auto-refresh on a daemon thread, so the kernel never blocks) and `stop()` /
`close()`, which end that thread before returning. Observers run on the thread that changed the trait
(the caller of refresh(), the auto-refresh thread, or ClusterView's watch on the client's loop thread):
they must be quick and must not call refresh().
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets
import traitlets
from aetcd import rpc
from aetcd.utils import prefix_range_end

from gazette import tunables
from gazette.protocol.errors import ValidationError

DEFAULT_INTERVAL_S = 1.0
WATCH_START_TIMEOUT_S = 30.0
DEFAULT_BROKER_ROOT = "/gazette/cluster"  # the brokers' (and LocalCluster's) default etcd root


class _LiveView(widgets.VBox):
    """A VBox of a title, a status line (`status`, a Label), key numbers and an HTML body (`body`),
    refreshed by `_snapshot()`; its model fields are traits (not synced to the browser: the child
    widgets show them)."""

    refreshes = traitlets.Int(0, help="Completed refreshes.")
    last_error = traitlets.Unicode(None, allow_none=True, help="The last failed auto-refresh's error.")
    status_line = traitlets.Unicode("", help="The status line's text.")

    def __init__(self, title: str) -> None:
        self.title = widgets.HTML(value=f"<b>{html.escape(title)}</b>")
        self.status = widgets.Label(value="")
        self.body = widgets.HTML(value="")
        super().__init__([self.title, self.status, self.body])
        self.add_class("gazette-view")
        traitlets.dlink((self.status, "value"), (self, "status_line"))
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _snapshot(self) -> None:
        raise NotImplementedError

    def refresh(self) -> None:
        """Updates every model field from the source once (raises what the source raised)."""
        with self._lock:
            self._snapshot()
            self.refreshes += 1
            self.last_error = None

    def start(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """Refreshes every `interval_s` seconds on a daemon thread until `stop()`; a failed refresh
        shows its error in the status line and is retried at the next tick."""
        if interval_s <= 0:
            raise ValidationError(f"auto-refresh interval_s {interval_s} must be > 0")
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(interval_s,), daemon=True, name="gazette-view"
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as err:  # noqa: BLE001 - shown to the user, retried next tick
                self.last_error = f"{type(err).__name__}: {err}"
                self.status.value = f"refresh failed: {self.last_error}"
            self._stop.wait(interval_s)

    def stop(self) -> None:
        """Stops auto-refresh and waits for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(tunables.NOTEBOOK_STOP_TIMEOUT_S)
            self._thread = None

    @property
    def widget(self) -> widgets.VBox:
        """The view itself (it is the VBox); kept for code written when views held one."""
        return self

    def close(self) -> None:
        """Stops auto-refresh (waiting for it to end), then closes the widget and its children."""
        self.stop()
        self._close_widgets()

    def _close_widgets(self) -> None:
        for child in self.children:
            child.close()
        super().close()

    def __del__(self) -> None:
        # ipywidgets closes a collected widget with close(); ours would join threads and stop the etcd
        # watch, which must not happen in a finalizer (it may run on the loop thread): comms only.
        with contextlib.suppress(Exception):
            widgets.VBox.close(self)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], css: str) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class _Watch:
    """KeySpace mirrors of a broker root and (optionally) a consumer root, watched on the facade's
    loop thread; `on_change` runs there after each applied batch and must not block."""

    def __init__(
        self, etcd: str, root: str, consumer_root: str | None, on_change: Callable[[], None]
    ) -> None:
        from gazette.broker.resolver import decode_value as broker_decode
        from gazette.client.loop import default_loop
        from gazette.consumer.allocation import decode_value as consumer_decode
        from gazette.keyspace.etcd import connect
        from gazette.keyspace.keyspace import KeySpace

        self.loop = default_loop()
        self.tasks: list[asyncio.Task[None]] = []

        async def start() -> tuple[Any, list[KeySpace]]:
            client = connect(etcd)
            spaces = [KeySpace(client, root, broker_decode(root))]
            if consumer_root:
                spaces.append(KeySpace(client, consumer_root, consumer_decode(consumer_root)))
            try:
                for ks in spaces:
                    before = asyncio.all_tasks()
                    await ks.start()
                    self.tasks += [
                        t for t in asyncio.all_tasks() - before if t.get_name() == f"keyspace watch {ks.root}"
                    ]
                    ks.add_observer(on_change)
            except BaseException:
                await asyncio.gather(*(ks.stop() for ks in spaces), return_exceptions=True)
                await client.close()
                raise
            return client, spaces

        self.etcd, spaces = self.loop.run(start(), timeout=WATCH_START_TIMEOUT_S)
        self.brokers = spaces[0]
        self.consumers = spaces[1] if consumer_root else None

    @property
    def running(self) -> bool:
        return any(not t.done() for t in self.tasks)

    def has_brokers(self) -> bool:
        """Whether any broker is announced under the root (read on the loop thread)."""
        from gazette.keyspace import layout

        async def run() -> bool:
            return bool(self.brokers.prefixed(layout.members_prefix(self.brokers.root)))

        return self.loop.run(run())

    def sync(self) -> None:
        """Waits until each mirror holds every key as etcd has it now (deletes may lag)."""

        async def run() -> None:
            for ks in filter(None, (self.brokers, self.consumers)):
                prefix = (ks.root + "/").encode()
                await self.etcd.connect()
                resp = await self.etcd.kvstub.Range(
                    rpc.RangeRequest(
                        key=prefix, range_end=prefix_range_end(prefix), limit=1, keys_only=True,
                        sort_order=rpc.RangeRequest.DESCEND, sort_target=rpc.RangeRequest.MOD,
                    ),
                    timeout=WATCH_START_TIMEOUT_S,
                    metadata=self.etcd.metadata,
                )  # fmt: skip
                if resp.kvs:
                    await ks.wait_for_revision(resp.kvs[0].mod_revision, WATCH_START_TIMEOUT_S)

        self.loop.run(run(), timeout=2 * WATCH_START_TIMEOUT_S)

    def stop(self) -> None:
        async def run() -> None:
            for ks in filter(None, (self.brokers, self.consumers)):
                await ks.stop()
            await self.etcd.close()

        self.loop.run(run(), timeout=tunables.NOTEBOOK_STOP_TIMEOUT_S)


class ClusterView(_LiveView):
    """The cluster as etcd has it, updated live by a KeySpace watch: brokers (zone, suffix, endpoint),
    journals (optionally matching `selector`) with routes, primaries and write heads, and the shards
    of the consumer application under `consumer_root` with their replicas' statuses.

    The watch needs etcd (`etcd`, default the client's) and the brokers' root (`root`, default
    /gazette/cluster); it runs on the facade's loop thread, so the kernel never blocks, and `close()`
    ends it. Write heads are read at `refresh()` (or every `auto_refresh_s`). Without etcd, or with
    `watch=False`, the view polls the brokers' journal list instead (no brokers or shards).
    Model fields: `brokers` {"zone#suffix": {"zone", "suffix", "endpoint"}}, `journals`
    {name: {"primary", "members", "write_head"}}, `shards` {id: {"status", "primary", "replicas"}}; each
    is a trait replaced by a new dict on change, as is `updates`, the renders driven by the watch.
    """

    brokers = traitlets.Dict(help='{"zone#suffix": {"zone", "suffix", "endpoint"}}')
    journals = traitlets.Dict(help='{name: {"primary", "members", "write_head"}}')
    shards = traitlets.Dict(help='{id: {"status", "primary", "replicas"}}')
    updates = traitlets.Int(0, help="Renders driven by the etcd watch.")

    def __init__(
        self,
        client: Any,
        selector: str | None = None,
        *,
        auto_refresh_s: float | None = None,
        etcd: str | None = None,
        root: str | None = None,
        consumer_root: str | None = None,
        watch: bool = True,
    ) -> None:
        from gazette.protocol.selector import LabelSelector

        super().__init__("Gazette cluster")
        self.client = client
        self.selector = selector
        self._selector = LabelSelector.parse(selector or "").for_journals()
        self._heads: dict[str, int] = {}
        self._model_lock = threading.Lock()  # never held while waiting on the loop thread
        self.count = widgets.IntText(value=0, description="journals", disabled=True)
        self.broker_count = widgets.IntText(value=0, description="brokers", disabled=True)
        self.shard_count = widgets.IntText(value=0, description="shards", disabled=True)
        self.brokers_body = widgets.HTML(value="")
        self.shards_body = widgets.HTML(value="")
        self.children = (
            self.title, self.status, self.broker_count, self.brokers_body, self.count, self.body,
            self.shard_count, self.shards_body,
        )  # fmt: skip
        self.add_class("gazette-cluster-view")
        etcd = etcd or getattr(client, "etcd", None)
        self._watch: _Watch | None = None
        self._note = ""
        if watch and etcd:
            self._watch = _Watch(etcd, root or DEFAULT_BROKER_ROOT, consumer_root, self._on_change)
            if not self._watch.has_brokers():
                if root is not None or consumer_root is not None:
                    self._watch.stop()
                    raise ValidationError(
                        f'ClusterView: no broker is announced under etcd root "{self._watch.brokers.root}"'
                    )
                self._watch.stop()  # the default root is not this cluster's: poll its brokers instead
                self._watch = None
                self._note = f"; no brokers under {DEFAULT_BROKER_ROOT} in etcd: pass root= to watch"
        elif consumer_root:
            raise ValidationError(
                f"ClusterView(consumer_root={consumer_root!r}) watches etcd: pass etcd= (an endpoint)"
            )
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    @property
    def watching(self) -> bool:
        """Whether the etcd watch is running (False after close(), or when polling)."""
        return self._watch is not None and self._watch.running

    @property
    def watch_tasks(self) -> tuple[asyncio.Task[None], ...]:
        """The asyncio tasks (on the facade's loop) watching etcd for this view."""
        return tuple(self._watch.tasks) if self._watch is not None else ()

    def _on_change(self) -> None:
        self._render()
        self.updates += 1

    def _snapshot(self) -> None:
        if self._watch is None:
            self._poll()
            return
        watch = self._watch
        watch.sync()  # so what refresh() shows includes every change made before it

        async def primaried() -> list[str]:  # the mirrors are read on their loop thread only
            return [n for n, j in self._journals_of(watch.brokers).items() if j["primary"] is not None]

        heads = {name: self.client.read_head(name) for name in watch.loop.run(primaried())}
        with self._model_lock:
            self._heads = heads

        async def render() -> None:
            self._render()

        watch.loop.run(render())

    def _poll(self) -> None:
        snap: dict[str, dict[str, Any]] = {}
        for info in self.client.list_journals(self.selector):
            primary = info.route.primary_id
            snap[info.spec.name] = {
                "primary": primary[1] if primary else None,
                "members": [suffix for _zone, suffix in info.route.members],
                "write_head": self.client.read_head(info.spec.name) if primary else None,
            }
        with self._model_lock:
            self.journals = snap
            self._show()

    def _journals_of(self, ks: Any) -> dict[str, dict[str, Any]]:
        from gazette.keyspace import layout
        from gazette.protocol.selector import journal_labels

        routes: dict[str, list[tuple[int, str]]] = {}
        for kv in ks.prefixed(layout.assign_prefix(ks.root)):
            try:
                key = layout.parse_assignment_key(ks.root, kv.key)
            except ValueError:
                continue
            routes.setdefault(key.item, []).append((key.slot, key.suffix))
        out = {}
        prefix = layout.items_prefix(ks.root)
        for kv in ks.prefixed(prefix):
            spec = kv.decoded
            if not self._selector.matches(journal_labels(spec.labels, spec.name)):
                continue
            members = sorted(routes.get(spec.name, []))
            primary = next((suffix for slot, suffix in members if slot == 0), None)
            out[spec.name] = {"primary": primary, "members": [suffix for _slot, suffix in members]}
        return out

    def _render(self) -> None:
        """Rebuilds the model from the mirrors (cheap, in memory: it runs on the loop thread too)."""
        from gazette.consumer.status import ReplicaStatus
        from gazette.keyspace import layout

        watch = self._watch
        if watch is None:
            return
        ks = watch.brokers
        brokers = {}
        for kv in ks.prefixed(layout.members_prefix(ks.root)):
            try:
                member = layout.parse_member_key(ks.root, kv.key)
            except ValueError:
                continue
            brokers[f"{member.zone}#{member.suffix}"] = {
                "zone": member.zone,
                "suffix": member.suffix,
                "endpoint": kv.decoded.process_spec.endpoint,
            }
        journals = self._journals_of(ks)
        shards: dict[str, dict[str, Any]] = {}
        cs = watch.consumers
        if cs is not None:
            replicas: dict[str, list[dict[str, Any]]] = {}
            for kv in cs.prefixed(layout.assign_prefix(cs.root)):
                try:
                    key = layout.parse_assignment_key(cs.root, kv.key)
                except ValueError:
                    continue
                status = kv.decoded if isinstance(kv.decoded, ReplicaStatus) else ReplicaStatus()
                replicas.setdefault(key.item, []).append(
                    {"zone": key.zone, "suffix": key.suffix, "slot": key.slot, "status": status.code.name}
                )
            prefix = layout.items_prefix(cs.root)
            for kv in cs.prefixed(prefix):
                shard_id = kv.key[len(prefix) :]
                reps = sorted(replicas.get(shard_id, []), key=lambda r: r["slot"])
                primary = next((r for r in reps if r["slot"] == 0), None)
                shards[shard_id] = {
                    "status": primary["status"] if primary else "",
                    "primary": primary["suffix"] if primary else None,
                    "replicas": reps,
                }
        with self._model_lock:
            for name, j in journals.items():
                j["write_head"] = self._heads.get(name)
            self.brokers, self.journals, self.shards = brokers, journals, shards
            self._show()

    def _show(self) -> None:
        snap = self.journals
        rows = [
            [n, j["primary"] or "-", ",".join(j["members"]), j["write_head"]] for n, j in sorted(snap.items())
        ]
        self.body.value = _table(["journal", "primary", "members", "write head"], rows, "gazette-journals")
        self.count.value = len(snap)
        brows = [[b["zone"], b["suffix"], b["endpoint"]] for _, b in sorted(self.brokers.items())]
        self.brokers_body.value = _table(["zone", "suffix", "endpoint"], brows, "gazette-brokers")
        self.broker_count.value = len(self.brokers)
        srows = [
            [i, s["status"] or "-", " ".join(f"{r['suffix']}:{r['status']}" for r in s["replicas"]) or "-"]
            for i, s in sorted(self.shards.items())
        ]
        self.shards_body.value = _table(["shard", "status", "replicas"], srows, "gazette-shards")
        self.shard_count.value = len(self.shards)
        how = "watching etcd" if self._watch is not None else f"polling{self._note}"
        self.status.value = (
            f"{len(self.brokers)} brokers, {len(snap)} journals, {len(self.shards)} shards ({how})"
        )

    def close(self) -> None:
        """Stops auto-refresh and the etcd watch (waiting for both to end), then closes the widget."""
        super().stop()
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        self._close_widgets()


class JournalView(_LiveView):
    """One journal's fragments (offset ranges, spooled or persisted, codec, store) as a table and an
    SVG timeline, its write head and append rate (bytes/s between the last two refreshes).
    `fragments` (a trait) holds the last snapshot as dicts; `head` (a trait) the write head, which
    the `write_head` number widget shows."""

    fragments: traitlets.List[dict[str, Any]] = traitlets.List(
        help='[{"begin", "end", "codec", "store", "persisted"}] of the last refresh'
    )
    head = traitlets.Int(0, help="The journal's write head at the last refresh.")

    def __init__(self, client: Any, journal: str, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Journal {journal}")
        self.client = client
        self.journal = journal
        self.write_head = widgets.IntText(value=0, description="write head", disabled=True)
        self.append_rate = widgets.FloatText(value=0.0, description="bytes/s", disabled=True)
        self.timeline = widgets.HTML(value="")
        self._last_head: tuple[float, int] | None = None  # (monotonic s, write head) of the last refresh
        self.children = (
            self.title,
            self.status,
            self.write_head,
            self.append_rate,
            self.timeline,
            self.body,
        )
        self.add_class("gazette-journal-view")
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    def _snapshot(self) -> None:
        frags = self.client.list_fragments(self.journal)
        head = self.client.read_head(self.journal)
        self.fragments = [
            {
                "begin": f.begin,
                "end": f.end,
                "codec": f.codec.name,
                "store": f.store_url,
                "persisted": bool(f.store_url),
            }
            for f in frags
        ]
        self.write_head.value = head
        self.head = head
        now = time.monotonic()
        if self._last_head is not None and now > self._last_head[0]:
            self.append_rate.value = round((head - self._last_head[1]) / (now - self._last_head[0]), 1)
        self._last_head = (now, head)
        rows = [[f["begin"], f["end"], f["codec"], f["store"] or "(spooled)"] for f in self.fragments]
        self.body.value = _table(["begin", "end", "codec", "store"], rows, "gazette-fragments")
        self.timeline.value = self._svg(head)
        persisted = sum(f["persisted"] for f in self.fragments)
        self.status.value = f"{len(self.fragments)} fragments ({persisted} persisted), head {head}"

    def _svg(self, head: int, width_px: int = 600, height_px: int = 24) -> str:
        span = max(head, max((f["end"] for f in self.fragments), default=0), 1)
        rects = []
        for f in self.fragments:
            x = f["begin"] * width_px / span
            w = max((f["end"] - f["begin"]) * width_px / span, 1.0)
            color = "#4a90d9" if f["persisted"] else "#f5a623"
            rects.append(
                f'<rect x="{x:.1f}" y="2" width="{w:.1f}" height="{height_px - 4}" fill="{color}" stroke="#333">'
                f"<title>{f['begin']}-{f['end']}</title></rect>"
            )
        return (
            f'<svg class="gazette-timeline" width="{width_px}" height="{height_px}">{"".join(rects)}</svg>'
            '<div><span style="color:#4a90d9">&#9632; persisted</span> '
            '<span style="color:#f5a623">&#9632; spooled</span></div>'
        )


def _inspect_of(source: Any, shard: str | None) -> Any:
    """Inspect of `shard` through a ShardClient, or through a journal Client that knows its consumers
    (`CheckpointView(client, "count-000")` with a LocalCluster's client)."""
    if shard is None:
        raise ValidationError("a shard view needs the shard id: pass (client, shard)")
    if hasattr(source, "inspect_shard"):
        return source.inspect_shard(shard)
    from gazette.consumer.client import ShardClient

    if isinstance(source, ShardClient):  # a Gazette consumer (no Inspect) is shown from Stat
        return source.inspect(shard, stat_fallback=True)
    return source.inspect(shard)


class SequencerView(_LiveView):
    """A Sequencer's per-(journal, producer) state, ring occupancy, queue outcomes and replays, from a
    `ReadCommitted` (its live `sequencer`) or from a running shard (`SequencerView(shard_client, shard)`).
    `state` (a trait) holds the last `describe()` dict."""

    state = traitlets.Dict(help="The Sequencer's describe() at the last refresh.")

    def __init__(self, source: Any, shard: str | None = None, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Sequencer of {shard or getattr(source, 'journal', '?')}")
        self.source = source
        self.shard = shard
        self.ring = widgets.IntProgress(value=0, min=0, max=1, description="ring")
        self.pending = widgets.IntText(value=0, description="pending", disabled=True)
        self.replays = widgets.IntText(value=0, description="replays", disabled=True)
        self.children = (self.title, self.status, self.ring, self.pending, self.replays, self.body)
        self.add_class("gazette-sequencer-view")
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    def _snapshot(self) -> None:
        if hasattr(self.source, "sequencer"):
            state = self.source.sequencer.describe()
            replays = int(getattr(self.source, "replays", 0))
        else:
            state = _inspect_of(self.source, self.shard).sequencer
            replays = (
                sum(state.get("replayed", {}).values()) if isinstance(state.get("replayed"), dict) else 0
            )
        self.state = state
        ring = state.get("ring", {})
        self.ring.max = max(int(ring.get("size", 1)), 1)
        self.ring.value = int(ring.get("occupied", 0))
        self.pending.value = int(state.get("pending", 0))
        self.replays.value = replays
        rows = [
            [p["journal"], p["producer"], p["max_clock"], p["begin"], p["ring_entries"], p["pending"]]
            for p in state.get("producers", [])
        ]
        queued = ", ".join(f"{k}: {v}" for k, v in state.get("queued", {}).items())
        self.body.value = (
            _table(
                ["journal", "producer", "last clock", "open span begin", "ring entries", "pending"],
                rows,
                "gazette-producers",
            )
            + f'<div class="gazette-queued">{html.escape(queued)}</div>'
        )
        self.status.value = f"offsets {state.get('offsets', {})}"


class CheckpointView(_LiveView):
    """A checkpoint: a shard's last committed one with its transaction timings
    (`CheckpointView(shard_client, shard)`), or a ReadCommitted's current one (`CheckpointView(reader)`).
    `offsets`, `producers` and `ack_intents` hold the last snapshot; `side_effects` the shard's
    side effects (a SideEffectsState: committing, committed but unpublished, published, pending
    cleanup), None when its store keeps none. Each is a trait."""

    offsets = traitlets.Dict(help="{journal: offset read through}")
    producers: traitlets.List[dict[str, Any]] = traitlets.List(
        help='[{"journal", "producer", "last_ack", "begin"}]'
    )
    ack_intents: traitlets.List[str] = traitlets.List(help="Journals with ACK intents in the checkpoint.")
    side_effects = traitlets.Any(None, help="The shard's SideEffectsState, None when none is kept.")

    def __init__(self, source: Any, shard: str | None = None, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Checkpoint of {shard or getattr(source, 'journal', '?')}")
        self.source = source
        self.shard = shard
        self.transactions = widgets.IntText(value=0, description="txns", disabled=True)
        self.children = (self.title, self.status, self.body, self.transactions)
        self.add_class("gazette-checkpoint-view")
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    def _snapshot(self) -> None:
        timings: list[Any] = []
        effects = None
        if hasattr(self.source, "checkpoint") and self.shard is None:
            cp = self.source.checkpoint()
            intents: list[str] = []
            completed = 0
        else:
            ins = _inspect_of(self.source, self.shard)
            cp = ins.checkpoint.sequencer
            intents = sorted(ins.checkpoint.ack_intents)
            timings = list(ins.transactions)
            completed = int(getattr(ins, "transactions_completed", len(timings)))
            effects = getattr(ins, "side_effects", None)
        self.side_effects = effects
        d = cp.to_dict()
        self.offsets = dict(d["offsets"])
        self.producers = list(d["producers"])
        self.ack_intents = intents
        self.transactions.value = completed
        rows = [[j, o] for j, o in sorted(self.offsets.items())]
        prow = [[p["journal"], p["producer"], p["last_ack"], p["begin"]] for p in self.producers]
        trow = [
            [t.messages, f"{t.consume_s:.3f}", f"{t.commit_s:.3f}", f"{t.ack_s:.3f}"] for t in timings[-5:]
        ]
        self.body.value = (
            _table(["journal", "read through"], rows, "gazette-offsets")
            + _table(["journal", "producer", "last ACK", "begin"], prow, "gazette-producer-states")
            + (f"<div>ACK intents: {html.escape(', '.join(intents))}</div>" if intents else "")
            + (_table(["messages", "consume s", "commit s", "ack s"], trow, "gazette-txns") if trow else "")
            + (_side_effects_html(effects) if effects is not None else "")
        )
        self.status.value = f"{len(self.offsets)} journals, {len(self.producers)} producers"
        if self.shard is not None and getattr(ins, "from_stat", False):
            self.status.value += " (a Gazette consumer: offsets from Stat; producers and ACKs need Inspect)"


def _side_effects_html(e: Any) -> str:
    """A SideEffectsState: its counts, the side effects not yet published, and what cleanup has left."""
    summary = (
        f"Side effects (attempt {e.attempt}): {len(e.open)} open, {len(e.committing)} committing, "
        f"{len(e.unpublished)} committed but unpublished, {e.published} published; cleanup: "
        f"{e.cleanups} scans, {e.removed} removed, {len(e.cleanup_pending)} pending"
        + (f", last failed: {e.cleanup_error}" if e.cleanup_error else "")
        + (f"; {e.store_retries} store retries" if e.store_retries else "")
    )
    rows = [
        [phase, r.kind, r.url, r.sha1[:12] or "-", r.size]
        for phase, records in (
            ("open", e.open),
            ("committing", e.committing),
            ("unpublished", e.unpublished),
            ("last published", e.last_published),
        )
        for r in records
    ] + [["pending cleanup", "", url, "", ""] for url in e.cleanup_pending]
    table = _table(["phase", "kind", "object", "sha1", "size"], rows, "gazette-side-effects") if rows else ""
    return f'<div class="gazette-side-effects-summary">{html.escape(summary)}</div>' + table
