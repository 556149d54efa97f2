"""A broker that was a journal's primary and no longer is leaves its pipeline idle in the replica's
slot, holding its spool. The new primary's Replicate stream must get that spool (the idle pipeline
is shut down), or every append to the journal waits for ever. Found by the chaos scheduler
(tests/faults/test_chaos.py): after an etcd pause, a broker briefly primary of a journal pulsed it,
was demoted, and the new primary's pipeline sync hung on it for minutes. Unit test of
gazette.broker.replicate.serve_replicate with stand-ins for the broker, its resolver and replica.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from gazette.broker.replicate import serve_replicate
from gazette.fragment.fragment import Fragment
from gazette.fragment.spool import Spool
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.labels import LabelSet

JOURNAL = "faults/idle-pipeline/part-000"


class _IdlePipeline:
    """What a demoted primary's idle Pipeline does when shut down: its spool goes back to the slot."""

    def __init__(self, spool: Spool, spool_slot: asyncio.Queue) -> None:
        self.spool, self.spool_slot, self.shut_down = spool, spool_slot, False

    async def shutdown(self, expect_err: bool) -> None:
        self.shut_down = True
        self.spool.rollback()
        self.spool_slot.put_nowait(self.spool)


class _Context:
    def add_done_callback(self, fn) -> None:
        self.done = fn

    def set_code(self, code) -> None: ...

    def set_details(self, details) -> None: ...

    async def abort(self, code, details) -> None:
        raise AssertionError(f"aborted {code}: {details}")


def _route() -> pb.Route:
    members = [pb.ProcessSpec.ID(zone="a", suffix="new-primary"), pb.ProcessSpec.ID(zone="a", suffix="us")]
    return pb.Route(members=members, primary=0, endpoints=["http://p:1", "http://us:1"])


async def _serve_one_proposal(idle: bool) -> tuple[list[pb.ReplicateResponse], _IdlePipeline | None]:
    spool = Spool(JOURNAL, SimpleNamespace(on_commit=lambda *a: None, on_complete=lambda *a: None))
    spool_slot: asyncio.Queue = asyncio.Queue(maxsize=1)
    pipeline_slot: asyncio.Queue = asyncio.Queue(maxsize=1)
    pipeline = _IdlePipeline(spool, spool_slot) if idle else None
    if pipeline is None:
        spool_slot.put_nowait(spool)
    pipeline_slot.put_nowait(pipeline)  # the demoted primary's idle pipeline (or None: none)
    replica = SimpleNamespace(spool_slot=spool_slot, pipeline_slot=pipeline_slot)
    invalidated = asyncio.Event()

    async def resolve(*args, **kw):
        return SimpleNamespace(
            status=0, header=pb.Header(route=_route()), replica=replica, invalidated=invalidated
        )

    resolver = SimpleNamespace(
        resolve=resolve, invalidation=lambda j: invalidated, route_of=lambda j: _route()
    )
    broker = SimpleNamespace(resolver=resolver)
    proposal = Fragment(journal=JOURNAL, begin=0, end=0)
    first = pb.ReplicateRequest(
        header=pb.Header(route=_route()), proposal=proposal.to_proto(),
        registers=LabelSet().to_proto(), acknowledge=True,
    )  # fmt: skip

    async def requests():
        yield first
        await asyncio.Event().wait()  # the new primary keeps its stream open

    responses: list[pb.ReplicateResponse] = []

    async def serve() -> None:
        async for resp in serve_replicate(broker, requests(), _Context()):  # type: ignore[arg-type]
            responses.append(resp)

    task = asyncio.ensure_future(serve())
    try:
        for _ in range(200):
            if responses:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return responses, pipeline


async def test_a_replicate_stream_gets_the_spool_an_idle_pipeline_of_a_former_primacy_held() -> None:
    responses, pipeline = await _serve_one_proposal(idle=True)
    assert pipeline is not None and pipeline.shut_down
    assert [r.status for r in responses] == [pb.OK]


async def test_without_an_idle_pipeline_the_spool_is_taken_at_once() -> None:
    responses, _ = await _serve_one_proposal(idle=False)
    assert [r.status for r in responses] == [pb.OK]
