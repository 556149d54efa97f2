"""`gazette.aio`: the async API (the real one; `gazette.connect` is its sync facade)."""

from gazette.client.aio import AsyncClient


def connect(etcd: str | None = None, broker: str = "http://127.0.0.1:8080") -> AsyncClient:
    """An async client for an existing cluster; call it from within a running event loop."""
    return AsyncClient(broker, etcd)


__all__ = ["AsyncClient", "connect"]
