"""A TCP forwarder that can cut its connections the way a network partition does (a test helper)."""

from __future__ import annotations

import asyncio
import contextlib


class BlackHole:
    """A TCP forwarder on 127.0.0.1 whose `cut()` stops moving bytes both ways on every connection open
    at that moment while keeping them open: the packets of a cut link, as the peers see them (no
    reset, no FIN). Connections made after the cut forward normally: the partition has healed for
    anyone who reconnects."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut_event = asyncio.Event()  # of the connections accepted since the last cut
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        self.cut_event.set()
        self.cut_event = asyncio.Event()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        cut = self.cut_event
        await asyncio.gather(
            self._pump(reader, up_writer, cut), self._pump(up_reader, writer, cut), return_exceptions=True
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        while not cut.is_set():
            data = await reader.read(65536)
            if not data:
                return
            if cut.is_set():
                return  # dropped, and nothing more is read: the kernel buffers fill, as on a dead link
            writer.write(data)
            await writer.drain()
        await asyncio.Event().wait()  # cut: hold the connection open, moving nothing

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
