"""Security of gazette-py's RPCs, as Gazette's: bearer-token authorization and TLS.

`tokens` owns Gazette's authorization model (capabilities, claims, pre-shared-key JWTs); `tls` owns
the TLS configuration of servers and channels; `certs` makes throwaway certificates for local
clusters. Brokers, consumers and clients import from here; this package imports only protocol.
"""

from gazette.auth.tls import TLSConfig
from gazette.auth.tokens import AuthError, Capability, Claims, KeyedAuth

__all__ = ["AuthError", "Capability", "Claims", "KeyedAuth", "TLSConfig"]
