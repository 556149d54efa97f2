"""Forwards requests this broker cannot serve to the route member that can (docs/semantics.md#read,
#append-and-registers).

The resolved header rides along so the receiver waits for this broker's etcd revision and checks it
is the process addressed. Channels are cached per endpoint and closed with the broker; they ping
gazette-py peers only (`Proxy.__init__`). With auth
keys, each forwarded call carries a token this broker signs for just that journal and the capability
the call needs (as Gazette's brokers self-sign their proxy and replication calls); https:// peers
are dialed over TLS with the broker's peer TLS config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from gazette.auth.tls import TLSConfig, aio_channel
from gazette.auth.tokens import UNARY_TOKEN_TTL_S, Capability, KeyedAuth, name_selector
from gazette.broker.resolver import Resolution
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol import gazette_py_pb2_grpc as gpy_grpc
from gazette.protocol.endpoints import GRPC_CLIENT_OPTIONS, GRPC_PEER_OPTIONS
from gazette.protocol.status import Status, to_pb

REPLICATE_METHOD = "/protocol.Journal/Replicate"


def _as_bytes(data: bytes) -> bytes:
    return data


class Proxy:
    def __init__(
        self,
        auth: KeyedAuth | None = None,
        peer_tls: TLSConfig | None = None,
        pings: Callable[[str], bool] | None = None,
    ) -> None:
        """`pings(endpoint)`: whether the channel to that peer pings it every PEER_KEEPALIVE_S (a
        gazette-py peer), or not at all (Gazette's Go brokers answer such pings with GOAWAY
        too_many_pings, which ends every stream on the connection); None: always."""
        self._channels: dict[tuple[str, bool], grpc.aio.Channel] = {}
        self.auth = auth
        self.peer_tls = peer_tls
        self._pings = pings

    def stub(self, endpoint: str) -> pb_grpc.JournalStub:
        return pb_grpc.JournalStub(self._channel(endpoint))

    def metadata(
        self, capability: Capability, journal: str, ttl_s: float | None = None
    ) -> tuple[tuple[str, str], ...] | None:
        """Call metadata authorizing `capability` on `journal` alone (None without auth keys)."""
        if self.auth is None:
            return None
        if ttl_s is None:
            return self.auth.metadata(capability, name_selector(journal))
        return self.auth.metadata(capability, name_selector(journal), ttl_s)

    def replicate(self, endpoint: str, journal: str) -> grpc.aio.StreamStreamCall:
        """A Replicate stream of `journal` to `endpoint` whose writes take requests already serialized,
        so a pipeline serializes each request once for all its peers."""
        method = self._channel(endpoint).stream_stream(
            REPLICATE_METHOD,
            request_serializer=_as_bytes,
            response_deserializer=pb.ReplicateResponse.FromString,
        )
        return method(metadata=self.metadata(Capability.REPLICATE, journal))

    def _channel(self, endpoint: str) -> grpc.aio.Channel:
        pings = self._pings is None or self._pings(endpoint)
        ch = self._channels.get((endpoint, pings))
        if ch is None:
            ch = aio_channel(endpoint, self.peer_tls, GRPC_PEER_OPTIONS if pings else GRPC_CLIENT_OPTIONS)
            self._channels[(endpoint, pings)] = ch
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

        md = self.metadata(Capability.APPEND, first.journal)
        return await self.stub(endpoint).Append(requests(), metadata=md)

    async def read(self, res: Resolution, req: pb.ReadRequest) -> AsyncIterator[pb.ReadResponse]:
        endpoint = self._endpoint(res)
        if endpoint is None:
            yield pb.ReadResponse(status=to_pb(Status.NOT_JOURNAL_BROKER), header=res.header)
            return
        fwd = pb.ReadRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        md = self.metadata(Capability.READ, req.journal)
        async for resp in self.stub(endpoint).Read(fwd, metadata=md):
            yield resp

    async def list_fragments(self, res: Resolution, req: pb.FragmentsRequest) -> pb.FragmentsResponse:
        endpoint = self._endpoint(res)
        if endpoint is None:
            return pb.FragmentsResponse(status=to_pb(Status.NOT_JOURNAL_BROKER), header=res.header)
        fwd = pb.FragmentsRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        md = self.metadata(Capability.READ, req.journal)
        return await self.stub(endpoint).ListFragments(fwd, metadata=md)

    async def flush(self, res: Resolution, req: gpy.FlushRequest) -> gpy.FlushResponse:
        endpoint = self._endpoint(res)
        if endpoint is None:
            return gpy.FlushResponse(status=to_pb(Status.NO_JOURNAL_PRIMARY_BROKER), header=res.header)
        fwd = gpy.FlushRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        return await gpy_grpc.FlusherStub(self._channel(endpoint)).Flush(
            fwd, metadata=self.metadata(Capability.APPEND, req.journal, UNARY_TOKEN_TTL_S)
        )
