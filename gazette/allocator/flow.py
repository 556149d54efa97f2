"""The desired assignment as a min-cost maximum flow (docs/semantics.md#allocation-goals,
#allocator-leader-loop), solved with networkx: exactly for small clusters, in networks of
CHUNK_ITEMS items (time linear in the items) for large ones.

source -> item (R) -> zone-item (zone spread tiers) -> member (1, cheaper if current) -> sink (fair
share, then the rest of the effective limit). Costs are lexicographic, most important first: assign
every replica; span >= 2 zones; stay within fair share; keep current assignments; spread evenly over
zones. Pure and deterministic: the same members and items always give the same answer.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

MemberID = tuple[str, str]  # (zone, suffix)

# Items per flow network, and the members of a zone an item may move to besides its current ones
# (solve). networkx's simplex time grows faster than its network, so small networks are faster in
# all (Gazette's push/relabel in Go takes 10,000 items a network). A window of six makes each member
# a candidate of 600 / (members in its zone) items of a network: in Gazette's benchmark scenario, at
# any size, near three times the replicas its share of a network holds.
CHUNK_ITEMS = 100
ZONE_CANDIDATES = 6

_SOURCE = ("source",)
_SINK = ("sink",)


@dataclass(frozen=True, slots=True)
class FlowMember:
    """A member as the solver sees it: `limit` is its effective item limit (shed capacity removed)."""

    zone: str
    suffix: str
    limit: int

    @property
    def id(self) -> MemberID:
        return (self.zone, self.suffix)


@dataclass(frozen=True, slots=True)
class FlowItem:
    """An item, its desired replication and the members currently assigned to it."""

    id: str
    replication: int
    current: frozenset[MemberID] = frozenset()


def fair_share(limit: int, item_slots: int, member_slots: int) -> int:
    """`limit x item_slots / member_slots`, rounded half up, at most `limit` (5.1)."""
    if member_slots <= 0:
        return 0
    return min(limit, (2 * limit * item_slots + member_slots) // (2 * member_slots))


def solve(
    members: Iterable[FlowMember],
    items: Iterable[FlowItem],
    *,
    chunk_items: int = CHUNK_ITEMS,
    zone_candidates: int | None = ZONE_CANDIDATES,
) -> dict[str, list[MemberID]]:
    """The desired members of each item, each list in (zone, suffix) order; items given none are absent.

    An item gets min(replication, members with capacity) replicas when capacity allows; its replicas
    span at least two zones whenever more than one zone has capacity, unless that would leave some
    replica unassigned; members stay within their fair share unless a full or zone-spread assignment
    needs more, and never exceed their limit; among equally good answers the one keeping the most
    current assignments wins, then the one spreading replicas most evenly over zones.

    That answer is exact for up to `chunk_items` items when no zone has more than `zone_candidates`
    members. Beyond that the solver trades the global optimum for time linear in the items, as
    Gazette's does: items are solved in networks of `chunk_items` (in id order), each given its share
    of what every member's limit and fair share have left (`_share`), and an item may move only to
    the members of each zone that `_candidates` picks for it (besides its current ones, which it may
    always keep). The chunks that could not fully place an item are solved once more, one after the
    other, over what every member has left, with every member a candidate.
    """
    if chunk_items <= 0:
        raise ValueError(f"chunk_items must be positive, not {chunk_items}")
    if zone_candidates is not None and zone_candidates <= 0:
        raise ValueError(f"zone_candidates must be positive or None, not {zone_candidates}")
    usable = sorted((m for m in members if m.limit > 0), key=lambda m: m.id)
    if len({m.id for m in usable}) != len(usable):
        raise ValueError("flow members must be unique by (zone, suffix)")
    wanted = sorted((i for i in items if i.replication > 0), key=lambda i: i.id)
    if len({i.id for i in wanted}) != len(wanted):
        raise ValueError("flow items must be unique by id")
    if not usable or not wanted:
        return {}

    zones = sorted({m.zone for m in usable})
    by_zone: dict[str, list[FlowMember]] = {z: [] for z in zones}
    for m in usable:
        by_zone[m.zone].append(m)
    replication = {i.id: min(i.replication, len(usable)) for i in wanted}
    item_slots = sum(replication.values())
    member_slots = sum(m.limit for m in usable)
    network = _Network(zones, by_zone, replication, zone_candidates)

    chunks = [wanted[i : i + chunk_items] for i in range(0, len(wanted), chunk_items)]
    fair = {m.id: fair_share(m.limit, item_slots, member_slots) for m in usable}
    held: Counter[MemberID] = Counter()
    left = item_slots  # replicas of the chunks not yet solved
    desired: dict[str, list[MemberID]] = {}
    for c, chunk in enumerate(chunks):
        slots = sum(replication[i.id] for i in chunk)
        current = Counter(m for i in chunk for m in i.current)
        # Each member offers a chunk its share of what it has left, in proportion to the chunk's
        # replicas, so that what one chunk took beyond a share the later ones do not.
        capacity = {}
        for m in usable:
            phase = _phase(m, c)
            capacity[m.id] = (
                _share(fair[m.id] - held[m.id], slots, left, current[m.id], phase),
                _share(m.limit - held[m.id], slots, left, current[m.id], phase),
            )
        solved = network.solve(chunk, capacity, current, c * chunk_items)
        desired.update(solved)
        held.update(m for chosen in solved.values() for m in chosen)
        left -= slots
    if len(chunks) == 1:
        return desired

    # The chunks that left an item short are solved again over what every member has left, with every
    # member a candidate: a chunk's share of the limits (or its items' candidates) may not have fit
    # it, and its other items give the solver room to make way.
    # With no room left anywhere (the cluster is full) there is nothing to gain.
    if all(held[m.id] >= m.limit for m in usable):
        return desired
    again = [chunk for chunk in chunks if any(len(desired.get(i.id, ())) < replication[i.id] for i in chunk)]
    if not again:
        return desired
    for chunk in again:
        held.subtract(m for i in chunk for m in desired.pop(i.id, ()))
    everyone = _Network(zones, by_zone, replication, None)
    for chunk in again:  # a network each, so that its size stays bounded however many fell short
        residual = {m.id: (max(0, fair[m.id] - held[m.id]), max(0, m.limit - held[m.id])) for m in usable}
        solved = everyone.solve(chunk, residual, Counter(m for i in chunk for m in i.current))
        desired.update(solved)
        held.update(m for chosen in solved.values() for m in chosen)
    return desired


class _Network:
    """Builds and solves the flow network of some items over the members (see solve)."""

    def __init__(
        self,
        zones: list[str],
        by_zone: dict[str, list[FlowMember]],
        replication: dict[str, int],
        zone_candidates: int | None,
    ) -> None:
        self.zones = zones
        self.by_zone = by_zone
        self.replication = replication
        self.zone_candidates = zone_candidates
        self.zone_index = {m.id: n for z in zones for n, m in enumerate(by_zone[z])}

    def solve(
        self,
        items: Sequence[FlowItem],
        capacity: dict[MemberID, tuple[int, int]],
        holding: Counter[MemberID],
        first: int = 0,
    ) -> dict[str, list[MemberID]]:
        """The members chosen for each of `items` (the `first`-th item onward, in id order), members
        taking at most their (fair, limit) `capacity` (the second at a cost); `holding` counts the
        items' current assignments per member."""
        zones, replication = self.zones, self.replication
        item_slots = sum(replication[i.id] for i in items)
        # Each unit of flow crosses one arc of each tier, so a tier's total cost is at most item_slots
        # times its weight: weights that are powers of (item_slots + 1) make the objectives strictly
        # lexicographic (no amount of a lesser one outweighs one unit of a greater one).
        base = item_slots + 1
        w_skew, w_new, w_excess, w_overflow, w_unassigned = (base**k for k in range(5))

        graph = nx.MultiDiGraph()
        graph.add_node(_SOURCE, demand=-item_slots)
        graph.add_node(_SINK, demand=item_slots)
        # A replica that finds no member flows here: the costliest way to meet the sink's demand.
        graph.add_edge(_SOURCE, _SINK, capacity=item_slots, weight=w_unassigned)

        receivers = self._receivers(holding, capacity)
        used: set[MemberID] = set()  # members some item may be given: only they need arcs to the sink
        for position, item in enumerate(items, start=first):
            r = replication[item.id]
            item_node = ("item", item.id)
            graph.add_edge(_SOURCE, item_node, capacity=r, weight=0)
            for zone in zones:
                zone_node = ("zone", item.id, zone)
                for cap, weight in _zone_tiers(r, len(zones), w_skew, w_overflow):
                    graph.add_edge(item_node, zone_node, capacity=cap, weight=weight)
                for m in self._candidates(item, zone, position, receivers[zone]):
                    weight = 0 if m.id in item.current else w_new
                    graph.add_edge(zone_node, ("member", *m.id), capacity=1, weight=weight)
                    used.add(m.id)

        for member_id in sorted(used):
            fair, limit = capacity[member_id]
            fair = min(fair, limit)
            member_node = ("member", *member_id)
            if fair:
                graph.add_edge(member_node, _SINK, capacity=fair, weight=0)
            if limit > fair:
                graph.add_edge(member_node, _SINK, capacity=limit - fair, weight=w_excess)

        _, flows = nx.network_simplex(graph)

        desired: dict[str, list[MemberID]] = {}
        for item in items:
            chosen: list[MemberID] = []
            for zone in zones:
                for target, by_key in flows[("zone", item.id, zone)].items():
                    if any(by_key.values()):
                        chosen.append((target[1], target[2]))
            if chosen:
                desired[item.id] = sorted(chosen)
        return desired

    def _receivers(
        self, holding: Counter[MemberID], capacity: dict[MemberID, tuple[int, int]]
    ) -> dict[str, set[int]]:
        """Per zone where some member holds (`holding`) more than its fair share, the
        `zone_candidates` members (indexes in the zone) furthest below theirs (new members, mostly):
        every item may move to them, so that a member over its share hands items straight to one
        under it instead of through a chain of others."""
        k = self.zone_candidates
        out: dict[str, set[int]] = {z: set() for z in self.zones}
        if k is None:
            return out
        for zone in self.zones:
            in_zone = self.by_zone[zone]
            if len(in_zone) <= k or all(holding[m.id] <= capacity[m.id][0] for m in in_zone):
                continue  # every member is a candidate, or none has items to hand over
            below = sorted(
                (holding[m.id] - capacity[m.id][0], n)
                for n, m in enumerate(in_zone)
                if holding[m.id] < capacity[m.id][0]
            )
            out[zone] = {n for _, n in below[:k]}
        return out

    def _candidates(self, item: FlowItem, zone: str, position: int, receivers: set[int]) -> list[FlowMember]:
        """The members of `zone` that `item` may be given: all of them when the zone has at most
        `zone_candidates`; otherwise its current members there, the zone's `receivers`, and a window
        of `zone_candidates` consecutive members (by id). The `position`-th item's window starts
        `zone_candidates` members after the previous item's, so that every member of the zone is a
        candidate of as many items as any other."""
        in_zone = self.by_zone[zone]
        k = self.zone_candidates
        if k is None or len(in_zone) <= k:
            return in_zone
        n = len(in_zone)
        start = position * k
        picked = {(start + j) % n for j in range(k)} | receivers
        for member_id in item.current:
            index = self.zone_index.get(member_id)
            if index is not None and member_id[0] == zone:
                picked.add(index)
        return [in_zone[i] for i in sorted(picked)]


def _phase(member: FlowMember, chunk: int) -> int:
    """A number of the member's own for each chunk, whoever else is a member (see _share)."""
    return zlib.crc32(f"{member.zone}/{member.suffix}/{chunk}".encode())


def _share(total: int, part: int, whole: int, current: int, phase: int) -> int:
    """`total` x `part` / `whole`, all of `total` for the last part, never below zero.

    A fraction rounds up when the member holds more than the rounded-down share of the part now
    (rounding alone then moves nothing), otherwise as `phase` says (members of equal figures round
    differently)."""
    if total <= 0:
        return 0
    if part >= whole:
        return total
    low, rest = divmod(total * part, whole)
    if rest and (current > low or phase % whole < rest):
        return low + 1
    return low


def _zone_tiers(r: int, zones: int, w_skew: int, w_overflow: int) -> Sequence[tuple[int, int]]:
    """(capacity, weight) arcs from an item of replication `r` to each of its `zones` zone nodes.

    Free up to an even share of the zones, then `w_skew` up to r-1 (still two zones), then
    `w_overflow` for the last replica (all in one zone). With one zone there is nothing to spread.
    """
    if zones == 1:
        return ((r, 0),)
    spread = max(r - 1, 1)
    uniform = min(-(-r // zones), spread)  # ceil(r / zones)
    tiers = [(uniform, 0)]
    if spread > uniform:
        tiers.append((spread - uniform, w_skew))
    if r > spread:
        tiers.append((r - spread, w_overflow))
    return tiers
