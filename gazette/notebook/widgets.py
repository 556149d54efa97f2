"""Live ipywidgets views: the cluster's journals (write heads, routes), one journal's fragments,
a Sequencer's state and a shard's checkpoint.

Each view has `refresh()` (one synchronous update), `start(interval_s)` (auto-refresh on a daemon
thread, so the kernel never blocks) and `stop()` / `close()`, which end that thread before returning.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

DEFAULT_INTERVAL_S = 1.0
STOP_TIMEOUT_S = 10.0


class _LiveView:
    """A VBox of a status line, key numbers and an HTML body, refreshed by `_snapshot()`."""

    def __init__(self, title: str) -> None:
        self.title = widgets.HTML(value=f"<b>{html.escape(title)}</b>")
        self.status = widgets.Label(value="")
        self.body = widgets.HTML(value="")
        self.widget = widgets.VBox([self.title, self.status, self.body])
        self.widget.add_class("gazette-view")
        self.refreshes = 0
        self.last_error: str | None = None
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
            raise ValueError(f"auto-refresh interval_s {interval_s} must be > 0")
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
            self._thread.join(STOP_TIMEOUT_S)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.widget.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], css: str) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class ClusterView(_LiveView):
    """Journals of `client` (optionally matching `selector`) with routes, primaries and write heads.

    `journals` holds the last snapshot: {name: {"primary", "members", "write_head"}}.
    """

    def __init__(
        self, client: Any, selector: str | None = None, *, auto_refresh_s: float | None = None
    ) -> None:
        super().__init__("Gazette journals")
        self.client = client
        self.selector = selector
        self.journals: dict[str, dict[str, Any]] = {}
        self.count = widgets.IntText(value=0, description="journals", disabled=True)
        self.widget.children = (*self.widget.children, self.count)
        self.widget.add_class("gazette-cluster-view")
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    def _snapshot(self) -> None:
        snap: dict[str, dict[str, Any]] = {}
        for info in self.client.list_journals(self.selector):
            primary = info.route.primary_id
            snap[info.spec.name] = {
                "primary": primary[1] if primary else None,
                "members": [suffix for _zone, suffix in info.route.members],
                "write_head": self.client.read_head(info.spec.name) if primary else None,
            }
        self.journals = snap
        rows = [
            [n, j["primary"] or "-", ",".join(j["members"]), j["write_head"]] for n, j in sorted(snap.items())
        ]
        self.body.value = _table(["journal", "primary", "members", "write head"], rows, "gazette-journals")
        self.count.value = len(snap)
        self.status.value = f"{len(snap)} journals"


class JournalView(_LiveView):
    """One journal's fragments (offset ranges, spooled or persisted, codec, store) as a table and an
    SVG timeline, its write head and append rate (bytes/s between the last two refreshes).
    `fragments` holds the last snapshot as dicts."""

    def __init__(self, client: Any, journal: str, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Journal {journal}")
        self.client = client
        self.journal = journal
        self.fragments: list[dict[str, Any]] = []
        self.write_head = widgets.IntText(value=0, description="write head", disabled=True)
        self.append_rate = widgets.FloatText(value=0.0, description="bytes/s", disabled=True)
        self.timeline = widgets.HTML(value="")
        self._last_head: tuple[float, int] | None = None  # (monotonic s, write head) of the last refresh
        self.widget.children = (
            self.title,
            self.status,
            self.write_head,
            self.append_rate,
            self.timeline,
            self.body,
        )
        self.widget.add_class("gazette-journal-view")
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
    if shard is None:
        raise ValueError("a shard view needs the shard id: pass (shard_client, shard)")
    return source.inspect(shard)


class SequencerView(_LiveView):
    """A Sequencer's per-(journal, producer) state, ring occupancy, queue outcomes and replays, from a
    `ReadCommitted` (its live `sequencer`) or from a running shard (`SequencerView(shard_client, shard)`).
    `state` holds the last `describe()` dict."""

    def __init__(self, source: Any, shard: str | None = None, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Sequencer of {shard or getattr(source, 'journal', '?')}")
        self.source = source
        self.shard = shard
        self.state: dict[str, Any] = {}
        self.ring = widgets.IntProgress(value=0, min=0, max=1, description="ring")
        self.pending = widgets.IntText(value=0, description="pending", disabled=True)
        self.replays = widgets.IntText(value=0, description="replays", disabled=True)
        self.widget.children = (self.title, self.status, self.ring, self.pending, self.replays, self.body)
        self.widget.add_class("gazette-sequencer-view")
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
    `offsets`, `producers` and `ack_intents` hold the last snapshot."""

    def __init__(self, source: Any, shard: str | None = None, *, auto_refresh_s: float | None = None) -> None:
        super().__init__(f"Checkpoint of {shard or getattr(source, 'journal', '?')}")
        self.source = source
        self.shard = shard
        self.offsets: dict[str, int] = {}
        self.producers: list[dict[str, Any]] = []
        self.ack_intents: list[str] = []
        self.transactions = widgets.IntText(value=0, description="txns", disabled=True)
        self.widget.children = (*self.widget.children, self.transactions)
        self.widget.add_class("gazette-checkpoint-view")
        self.refresh()
        if auto_refresh_s:
            self.start(auto_refresh_s)

    def _snapshot(self) -> None:
        timings: list[Any] = []
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
        )
        self.status.value = f"{len(self.offsets)} journals, {len(self.producers)} producers"
