"""TLS for gRPC servers and channels, configured as Gazette's (server.BuildTLSConfig, dispatcher.go).

A `TLSConfig` is a certificate and key to present and a CA to trust. As a server's: TLS is on when
it has a certificate, and with a CA every client must present a certificate that CA signed (mutual
TLS). As a client's: `https://` endpoints are dialed over TLS, verifying the server against the CA
(the system's roots without one) and presenting the certificate if any; `http://` endpoints stay in
the clear, so one client reaches both kinds of process, as Gazette's dispatcher does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from gazette.protocol.endpoints import grpc_target
from gazette.protocol.errors import ValidationError

HTTPS = "https://"
HTTP = "http://"


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    """File paths (PEM): `cert_file` and `key_file` to present, `ca_file` to trust ("" when unset)."""

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValidationError(
                f"TLS certificate {self.cert_file or '(none)'} and key {self.key_file or '(none)'} go together: "
                "give both or neither"
            )

    @classmethod
    def of(
        cls, cert_file: str | None = None, key_file: str | None = None, ca_file: str | None = None
    ) -> TLSConfig | None:
        """A config from optional paths; None when none is given."""
        if not (cert_file or key_file or ca_file):
            return None
        return cls(cert_file or "", key_file or "", ca_file or "")

    @property
    def scheme(self) -> str:
        """The scheme of a server's endpoint under this config: https with a certificate."""
        return HTTPS if self.cert_file else HTTP

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server credentials; a CA makes client certificates required and verified against it."""
        if not self.cert_file:
            raise ValidationError("a TLS server needs a certificate (--server-cert-file) and its key")
        ca = _read(self.ca_file, "CA") if self.ca_file else None
        return grpc.ssl_server_credentials(
            [(_read(self.key_file, "key"), _read(self.cert_file, "certificate"))],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials: trust the CA (the system's roots without one), present the certificate."""
        return _channel_credentials(self)


@functools.lru_cache(maxsize=32)
def _channel_credentials(tls: TLSConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file, "CA") if tls.ca_file else None,
        private_key=_read(tls.key_file, "key") if tls.key_file else None,
        certificate_chain=_read(tls.cert_file, "certificate") if tls.cert_file else None,
    )


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read the TLS {what} {path}: {exc.strerror}") from None


def is_tls(endpoint: str) -> bool:
    return endpoint.startswith(HTTPS)


def aio_channel(
    endpoint: str, tls: TLSConfig | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """An asyncio channel to `endpoint`: TLS for https:// (with `tls`, else the system's roots)."""
    if is_tls(endpoint):
        creds = (tls or TLSConfig()).channel_credentials()
        return grpc.aio.secure_channel(grpc_target(endpoint), creds, options=list(options))
    return grpc.aio.insecure_channel(grpc_target(endpoint), options=list(options))


def sync_channel(
    endpoint: str, tls: TLSConfig | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.Channel:
    """A blocking channel to `endpoint`, as `aio_channel`."""
    if is_tls(endpoint):
        creds = (tls or TLSConfig()).channel_credentials()
        return grpc.secure_channel(grpc_target(endpoint), creds, options=list(options))
    return grpc.insecure_channel(grpc_target(endpoint), options=list(options))


def bind(server: grpc.aio.Server, address: str, tls: TLSConfig | None) -> tuple[int, str]:
    """Binds `server` at `address` (TLS when `tls` has a certificate); returns (port, endpoint scheme)."""
    if tls is not None and tls.cert_file:
        return server.add_secure_port(address, tls.server_credentials()), HTTPS
    return server.add_insecure_port(address), HTTP
