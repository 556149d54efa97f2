"""Forwards requests this broker cannot serve to the route member that can (reference 3.5, 3.6).

The resolved header rides along so the receiver waits for this broker's etcd revision and checks it
is the process addressed. Channels are cached per endpoint and closed with the broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from gazette.broker.resolver import Resolution
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol import gazette_py_pb2_grpc as gpy_grpc
from gazette.protocol.endpoints import GRPC_CLIENT_OPTIONS, GRPC_PEER_KEEPALIVE_OPTIONS, grpc_target
from gazette.protocol.status import Status, to_pb

REPLICATE_METHOD = "/protocol.Journal/Replicate"


def _as_bytes(data: bytes) -> bytes:
    return data


class Proxy:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, endpoint: str) -> pb_grpc.JournalStub:
        return pb_grpc.JournalStub(self._channel(endpoint))

    def replicate(self, endpoint: str) -> grpc.aio.StreamStreamCall:
        """A Replicate stream to `endpoint` whose writes take requests already serialized, so a
        pipeline serializes each request once for all its peers."""
        method = self._channel(endpoint).stream_stream(
            REPLICATE_METHOD, request_serializer=_as_bytes, response_deserializer=pb.ReplicateResponse.FromString
        )
        return method()

    def _channel(self, endpoint: str) -> grpc.aio.Channel:
        ch = self._channels.get(endpoint)
        if ch is None:
            ch = grpc.aio.insecure_channel(
                grpc_target(endpoint), options=[*GRPC_CLIENT_OPTIONS, *GRPC_PEER_KEEPALIVE_OPTIONS]
            )
            self._channels[endpoint] = ch
        return ch

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    def _endpoint(self, res: Resolution) -> str | None:
        pid = res.header.process_id
        for member, endpoint in zip(res.route.members, res.route.endpoints, strict=False):
            if (member.zone, member.suffix) == (pid.zone, pid.suffix) and endpoint:
                return endpoint
        return None

    async def append(
        self, res: Resolution, first: pb.AppendRequest, rest: AsyncIterator[pb.AppendRequest]
    ) -> pb.AppendResponse:
        endpoint = self._endpoint(res)
        if endpoint is None:
            return pb.AppendResponse(status=to_pb(Status.NO_JOURNAL_PRIMARY_BROKER), header=res.header)
        fwd = pb.AppendRequest()
        fwd.CopyFrom(first)
        fwd.header.CopyFrom(res.header)

        async def requests() -> AsyncIterator[pb.AppendRequest]:
            yield fwd
            async for req in rest:
                yield req

        return await self.stub(endpoint).Append(requests())

    async def read(self, res: Resolution, req: pb.ReadRequest) -> AsyncIterator[pb.ReadResponse]:
        endpoint = self._endpoint(res)
        if endpoint is None:
            yield pb.ReadResponse(status=to_pb(Status.NOT_JOURNAL_BROKER), header=res.header)
            return
        fwd = pb.ReadRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        async for resp in self.stub(endpoint).Read(fwd):
            yield resp

    async def list_fragments(self, res: Resolution, req: pb.FragmentsRequest) -> pb.FragmentsResponse:
        endpoint = self._endpoint(res)
        if endpoint is None:
            return pb.FragmentsResponse(status=to_pb(Status.NOT_JOURNAL_BROKER), header=res.header)
        fwd = pb.FragmentsRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        return await self.stub(endpoint).ListFragments(fwd)

    async def flush(self, res: Resolution, req: gpy.FlushRequest) -> gpy.FlushResponse:
        endpoint = self._endpoint(res)
        if endpoint is None:
            return gpy.FlushResponse(status=to_pb(Status.NO_JOURNAL_PRIMARY_BROKER), header=res.header)
        fwd = gpy.FlushRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        return await gpy_grpc.FlusherStub(self._channel(endpoint)).Flush(fwd)
