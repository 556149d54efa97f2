"""Process endpoints as gRPC channels take them, and the message size limit brokers and clients share."""

from __future__ import annotations

# gRPC's default of 4 MiB is too tight for 1 MiB append chunks plus read batches; both sides use this.
GRPC_MAX_MESSAGE_BYTES = 8 << 20
GRPC_MESSAGE_OPTIONS = [
    ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
]


def grpc_target(endpoint: str) -> str:
    """`http://host:port` -> `host:port` (the form grpc channels take)."""
    for scheme in ("http://", "https://"):
        if endpoint.startswith(scheme):
            endpoint = endpoint[len(scheme) :]
    return endpoint.rstrip("/")
