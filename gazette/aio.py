"""`gazette.aio`: the async API (the real one; `gazette.connect` is its sync facade)."""

from gazette.client.aio import AsyncClient
from gazette.client.timeouts import DEFAULT_TIMEOUT_S


def connect(
    etcd: str | None = None, broker: str = "http://127.0.0.1:8080", *, timeout: float | None = DEFAULT_TIMEOUT_S
) -> AsyncClient:
    """An async client for an existing cluster; call it from within a running event loop.
    `timeout` is its calls' default bound in seconds (None: none): see `AsyncClient`."""
    return AsyncClient(broker, etcd, timeout=timeout)


__all__ = ["AsyncClient", "connect"]
