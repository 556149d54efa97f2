"""Allocator: the leader loop every member runs (docs/semantics.md#allocator-leader-loop).

Each round reads a State from the KeySpace. The leader (lowest member CreateRevision) re-solves the
flow network only when the network hash changed, then commits one converge step in guarded, batched
transactions that also assert its own member key; everyone then waits for the next KeySpace revision
(at least that of the last commit). `wait_exited` completes once this member is exiting and holds no
assignment, so its owner may stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

import aetcd

from gazette.allocator.converge import Compare, converge
from gazette.allocator.flow import FlowItem, FlowMember, solve
from gazette.allocator.state import AllocatorAdapter, MemberID, State
from gazette.allocator.txn import MAX_TXN_OPS, TxnFailed, commit
from gazette.keyspace import layout
from gazette.keyspace.keyspace import KeySpace
from gazette.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# After an error other than a raced transaction (etcd unreachable), retry this soon even if the
# KeySpace shows no change.
RETRY_AFTER_ERROR_S = 1.0


class MemberKeyLost(Exception):
    """The allocator's own member key is gone from etcd (its lease ended, or it was deleted)."""


def flow_inputs(state: State) -> tuple[list[FlowMember], list[FlowItem]]:
    """The solver's view of a State: effective limits, replication and current members."""
    members = [FlowMember(m.zone, m.suffix, state.effective_limit(m)) for m in state.members]
    items = [
        FlowItem(item.id, item.replication, frozenset(a.member for a in state.assignments.get(item.id, ())))
        for item in state.items
    ]
    return members, items


def solve_state(state: State) -> dict[str, list[MemberID]]:
    """The desired assignment of every item of `state` (see flow.solve)."""
    return solve(*flow_inputs(state))


class Allocator:
    """Runs the allocation loop for the member `member_key` over a started KeySpace.

    `min_revision` (the announcement's revision) is awaited in the KeySpace before the first round, so
    the member's own key is known; the key missing later ends the loop with MemberKeyLost. The owner
    calls `start()` and, finally, `stop()`.
    """

    def __init__(
        self,
        client: aetcd.Client,
        ks: KeySpace,
        member_key: str,
        adapter: AllocatorAdapter,
        *,
        min_revision: int,
        max_txn_ops: int = MAX_TXN_OPS,
    ) -> None:
        self.client = client
        self.ks = ks
        self.member_key = member_key
        self.adapter = adapter
        self.min_revision = min_revision
        self.max_txn_ops = max_txn_ops
        self.state: State | None = None  # of the latest round
        self.solves = 0  # flow solutions computed while leading
        self.commits = 0  # converge rounds committed while leading
        # The latest revision at which this member led and found nothing to change: with the KeySpace
        # at this revision, the allocation is as converged as consistency currently allows.
        self.idle_revision = 0
        self._exited = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.is_leader

    @property
    def exited(self) -> bool:
        return self._exited.is_set() and self._error is None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f'allocator of "{self.member_key}" is already started')
        self._task = asyncio.create_task(self._run(), name=f"allocator {self.member_key}")

    async def stop(self) -> None:
        """Cancels the loop and waits for it to end; a pending `wait_exited` then raises. Idempotent."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if not self._exited.is_set():
            self._error = RuntimeError(
                f'allocator of "{self.member_key}" was stopped before the member exited'
            )
            self._exited.set()

    async def wait_exited(self) -> None:
        """Returns once this member is exiting and holds no assignment of a live item; raises
        MemberKeyLost (or the loop's error) if the loop ended otherwise."""
        await self._exited.wait()
        if self._error is not None:
            raise self._error

    async def wait_drained(self) -> None:
        """A graceful exit's wait: until this member holds no assignment (`wait_exited`), or until no
        live, non-exiting member is left to take its items (nothing will move: stop waiting)."""
        exited = asyncio.ensure_future(self.wait_exited())
        try:
            while not exited.done():
                members = self.ks.prefixed(layout.members_prefix(self.ks.root))
                if not any(not self.adapter.member_exiting(kv.decoded) for kv in members):
                    return
                change = asyncio.ensure_future(self.ks.wait_for_change())
                try:
                    await asyncio.wait({exited, change}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    change.cancel()
            exited.result()
        finally:
            exited.cancel()

    # ---- the loop

    async def _run(self) -> None:
        try:
            await self.ks.wait_for_revision(self.min_revision)
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._exited.is_set():  # already free to exit: the owner is tearing down
                log.info("allocator %s stopped after its exit: %s", self.member_key, exc)
                return
            log.error("allocator %s stopped: %s", self.member_key, exc)
            self._error = exc
            self._exited.set()

    async def _loop(self) -> None:
        desired: Mapping[str, Sequence[MemberID]] = {}
        solved_hash: str | None = None
        parsed: dict[str, layout.AssignmentKey] = {}
        while True:
            state = State.from_keyspace(self.ks, self.member_key, self.adapter, parsed)
            self.state = state
            local = state.local
            if local is None:
                raise MemberKeyLost(
                    f'member key "{self.member_key}" is not in etcd at revision {state.revision} '
                    "(its lease ended or it was deleted)"
                )
            if not self._exited.is_set() and state.should_exit():
                log.info("allocator %s: exiting and holding no assignments", self.member_key)
                self._exited.set()

            next_revision, timeout = state.revision + 1, None
            if state.is_leader:
                try:
                    if state.network_hash != solved_hash:
                        desired = await self._solve(state)
                        solved_hash = state.network_hash
                    checkpoints = converge(state, desired, self.adapter.is_consistent)
                    if not checkpoints:
                        self.idle_revision = state.revision
                    else:
                        fixed = [Compare(local.key, "mod", local.mod_revision)]
                        revision = await commit(self.client, checkpoints, fixed, self.max_txn_ops)
                        self.commits += 1
                        next_revision = max(next_revision, revision)
                except TxnFailed as exc:
                    # Our view was stale: a change is on its way to the KeySpace.
                    log.info("allocator %s: %s; retrying at the next revision", self.member_key, exc)
                    next_revision = max(next_revision, exc.applied_revision)
                except Exception as exc:
                    log.warning("allocator %s: converge failed (will retry): %r", self.member_key, exc)
                    timeout = RETRY_AFTER_ERROR_S
            try:
                await self.ks.wait_for_revision(next_revision, timeout=timeout)
            except TimeoutError:
                pass

    async def _solve(self, state: State) -> dict[str, list[MemberID]]:
        members, items = flow_inputs(state)
        # The solver is pure Python and may take a second per thousand items: off the loop thread.
        desired = await asyncio.to_thread(solve, members, items)
        self.solves += 1
        assigned = sum(len(v) for v in desired.values())
        attainable = sum(min(i.replication, sum(1 for m in members if m.limit > 0)) for i in items)
        log.info(
            "allocator %s: solved for %d members and %d items: %d of %d replicas placed",
            self.member_key,
            len(members),
            len(items),
            assigned,
            state.item_slots,
        )
        if assigned < attainable:
            log.warning(
                "allocator %s: cannot reach desired replication for all items (%d replicas unplaced); "
                "too few members, or too little capacity in their zones",
                self.member_key,
                attainable - assigned,
            )
        return desired
