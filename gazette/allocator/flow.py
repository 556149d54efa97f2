"""The desired assignment as a min-cost maximum flow (docs/semantics.md#allocation-goals,
#allocator-leader-loop), solved with networkx.

source -> item (R) -> zone-item (zone spread tiers) -> member (1, cheaper if current) -> sink (fair
share, then the rest of the effective limit). Costs are lexicographic, most important first: assign
every replica; span >= 2 zones; stay within fair share; keep current assignments; spread evenly over
zones. Pure and deterministic: the same members and items always give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

MemberID = tuple[str, str]  # (zone, suffix)

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


def solve(members: Iterable[FlowMember], items: Iterable[FlowItem]) -> dict[str, list[MemberID]]:
    """The desired members of each item, each list in (zone, suffix) order; items given none are absent.

    An item gets min(replication, members with capacity) replicas when capacity allows; its replicas
    span at least two zones whenever more than one zone has capacity, unless that would leave some
    replica unassigned; members stay within their fair share unless a full or zone-spread assignment
    needs more, and never exceed their limit; among equally good answers the one keeping the most
    current assignments wins, then the one spreading replicas most evenly over zones.
    """
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

    for item in wanted:
        r = replication[item.id]
        item_node = ("item", item.id)
        graph.add_edge(_SOURCE, item_node, capacity=r, weight=0)
        for zone in zones:
            zone_node = ("zone", item.id, zone)
            for capacity, weight in _zone_tiers(r, len(zones), w_skew, w_overflow):
                graph.add_edge(item_node, zone_node, capacity=capacity, weight=weight)
            for m in by_zone[zone]:
                weight = 0 if m.id in item.current else w_new
                graph.add_edge(zone_node, ("member", *m.id), capacity=1, weight=weight)

    for m in usable:
        fair = fair_share(m.limit, item_slots, member_slots)
        member_node = ("member", *m.id)
        if fair:
            graph.add_edge(member_node, _SINK, capacity=fair, weight=0)
        if m.limit > fair:
            graph.add_edge(member_node, _SINK, capacity=m.limit - fair, weight=w_excess)

    _, flows = nx.network_simplex(graph)

    desired: dict[str, list[MemberID]] = {}
    for item in wanted:
        chosen: list[MemberID] = []
        for zone in zones:
            for target, by_key in flows[("zone", item.id, zone)].items():
                if any(by_key.values()):
                    chosen.append((target[1], target[2]))
        if chosen:
            desired[item.id] = sorted(chosen)
    return desired


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
