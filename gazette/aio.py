"""`gazette.aio`: the async API (the real one; `gazette.connect` is its sync facade)."""

from gazette.auth.tls import TLSConfig
from gazette.auth.tokens import KeyedAuth
from gazette.client.aio import AsyncClient
from gazette.client.timeouts import DEFAULT_TIMEOUT_S


def connect(
    etcd: str | None = None,
    broker: str = "http://127.0.0.1:8080",
    *,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    auth_keys: KeyedAuth | str | None = None,
    tls: TLSConfig | None = None,
    keepalive: float | None = None,
) -> AsyncClient:
    """An async client for an existing cluster; call it from within a running event loop.
    `timeout` is its calls' default bound in seconds (None: none); `auth_keys`, `tls` and
    `keepalive` as `gazette.connect`: see `AsyncClient`."""
    return AsyncClient(broker, etcd, timeout=timeout, auth_keys=auth_keys, tls=tls, keepalive=keepalive)


__all__ = ["AsyncClient", "connect"]
