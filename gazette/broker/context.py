"""BrokerContext: what the stream handlers (append, read, replicate, journals) use of their broker.

The handlers depend on this narrow view, never on `broker.py`, which imports them: the package has
no import cycle (tests/broker/test_import_graph.py). `Broker` satisfies it; a unit test may pass a
stand-in holding only the members its handler touches. Handlers read these members and never
rebind them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import aetcd

    from gazette.broker.metrics import BrokerMetrics
    from gazette.broker.proxy import Proxy
    from gazette.broker.resolver import Resolver
    from gazette.fragment.fragment import Fragment
    from gazette.fragment.persister import Persister
    from gazette.keyspace.keyspace import KeySpace


class BrokerContext(Protocol):
    """One broker as its RPC handlers see it (docs/architecture.md#the-broker)."""

    # Who this broker is: its place in routes and assignment keys, and the cluster's etcd root.
    zone: str
    suffix: str
    root: str
    # Its configuration the handlers act on.
    spool_dir: str | None  # where replicas spool content (None: the temporary directory)
    max_replication: int  # caps a journal's desired replication (Gazette's --broker.max-replication)
    # What it owns and the handlers call.
    resolver: Resolver
    proxy: Proxy
    metrics: BrokerMetrics
    persister: Persister
    ks: KeySpace
    etcd: aetcd.Client

    @property
    def id(self) -> tuple[str, str]:
        """(zone, suffix)."""
        ...

    def background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Starts a task the broker owns and waits for (bounded) when it stops."""
        ...

    async def sign_url(self, fragment: Fragment, ttl_s: float) -> str:
        """A signed GET URL of a persisted fragment, valid `ttl_s` seconds."""
        ...
