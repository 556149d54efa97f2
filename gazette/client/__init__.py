"""Clients of the journal service: the async core (`AsyncClient`) and the sync facade (`Client`).

Imports protocol and fragment (types only); never the broker.
"""

from gazette.client.aio import AppendResult, AsyncClient, JournalInfo, ReadChunk, Route
from gazette.client.sync import Client, connect

__all__ = ["AppendResult", "AsyncClient", "Client", "JournalInfo", "ReadChunk", "Route", "connect"]
