"""One cluster's security settings, handed from LocalCluster to the brokers, consumers and clients it
starts: the auth keys every process signs and verifies with, the TLS config servers present, and
the one clients and peers present and trust. Subprocesses get them as flags and, for the keys, as
environment (never on a command line, where `ps` would show them).
"""

from __future__ import annotations

import dataclasses

from gazette.auth.tls import TLSConfig


@dataclasses.dataclass(frozen=True)
class ClusterSecurity:
    auth_keys: str | None = None
    server_tls: TLSConfig | None = None
    client_tls: TLSConfig | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.auth_keys or self.server_tls or self.client_tls)

    def server_args(self) -> list[str]:
        """`gazette broker serve` / `gazette consumer run` flags for TLS (servers and their peers)."""
        args: list[str] = []
        for flag, value in (
            ("--server-cert-file", self.server_tls and self.server_tls.cert_file),
            ("--server-cert-key-file", self.server_tls and self.server_tls.key_file),
            ("--server-ca-file", self.server_tls and self.server_tls.ca_file),
            ("--peer-cert-file", self.client_tls and self.client_tls.cert_file),
            ("--peer-cert-key-file", self.client_tls and self.client_tls.key_file),
            ("--peer-ca-file", self.client_tls and self.client_tls.ca_file),
        ):
            if value:
                args += [flag, value]
        return args

    def env(self, *names: str) -> dict[str, str]:
        """The auth keys under each environment variable of `names` (nothing without keys)."""
        return {name: self.auth_keys for name in names} if self.auth_keys else {}
