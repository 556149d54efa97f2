"""Throwaway certificates for local clusters and tests: one CA, and certificates it signs for servers
(valid for localhost and loopback addresses) and for clients (mutual TLS). Needs `cryptography`.

Never for production: keys are written unencrypted and live a day.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from collections.abc import Sequence

from gazette.auth.tls import TLSConfig
from gazette.protocol.errors import ValidationError

VALIDITY = datetime.timedelta(days=1)
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclasses.dataclass(frozen=True)
class LocalCA:
    """PEM files under `directory`: the CA, a server certificate and a client certificate it signed."""

    directory: str
    ca_file: str
    server_cert_file: str
    server_key_file: str
    client_cert_file: str
    client_key_file: str

    @property
    def server(self) -> TLSConfig:
        """A server's config: its certificate, and the CA that client certificates must chain to."""
        return TLSConfig(self.server_cert_file, self.server_key_file, self.ca_file)

    @property
    def client(self) -> TLSConfig:
        """A client's (and a peer's) config: trust the CA, present the client certificate."""
        return TLSConfig(self.client_cert_file, self.client_key_file, self.ca_file)


def make_local_ca(directory: str, hosts: Sequence[str] = DEFAULT_HOSTS) -> LocalCA:
    """Writes a new CA and a server and a client certificate into `directory` (created if missing)."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ValidationError(
            "throwaway TLS certificates need the `cryptography` package: pip install 'gazette-py[tls]'"
        ) from None
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gazette-py local"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # fmt: skip

    def write(filename: str, data: bytes, private: bool = False) -> str:
        path = os.path.join(directory, filename)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("gazette-py local CA"))
        .issuer_name(name("gazette-py local CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: x509.ObjectIdentifier, sans: Sequence[str]) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        if sans:
            entries: list[x509.GeneralName] = []
            for host in sans:
                try:
                    entries.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    entries.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

    server_cert, server_key = leaf("gazette-py server", ExtendedKeyUsageOID.SERVER_AUTH, hosts)
    client_cert, client_key = leaf("gazette-py client", ExtendedKeyUsageOID.CLIENT_AUTH, ())
    return LocalCA(
        directory=directory,
        ca_file=write("ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM)),
        server_cert_file=write("server.pem", server_cert),
        server_key_file=write("server-key.pem", server_key, private=True),
        client_cert_file=write("client.pem", client_cert),
        client_key_file=write("client-key.pem", client_key, private=True),
    )
