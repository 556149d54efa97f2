"""Clients of the journal service: the async core (`AsyncClient`) and the sync facade (`Client`).

Imports protocol and fragment (types only); never the broker.
"""

from gazette.client.aio import AppendResult, AsyncClient, JournalInfo, ReadChunk, Route
from gazette.client.sync import Client, connect
from gazette.client.timeouts import DEFAULT_TIMEOUT_S, USE_CLIENT_DEFAULT, CallTimeout

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "USE_CLIENT_DEFAULT",
    "AppendResult",
    "AsyncClient",
    "CallTimeout",
    "Client",
    "JournalInfo",
    "ReadChunk",
    "Route",
    "connect",
]
