"""Process endpoints as gRPC channels take them, and the message size limit brokers and clients share."""

from __future__ import annotations

from gazette.protocol.errors import ValidationError

# gRPC's default of 4 MiB is too tight for 1 MiB append chunks plus read batches; both sides use this.
GRPC_MAX_MESSAGE_BYTES = 8 << 20
GRPC_MESSAGE_OPTIONS = [
    ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
]

# Channels to brokers and consumers: gRPC's default reconnect backoff grows to two minutes, so a
# channel to a process that was killed and restarted at the same address could refuse calls
# ("failed to connect") for that long after it is back. Keep it near a second, as for etcd.
GRPC_CLIENT_OPTIONS = [
    *GRPC_MESSAGE_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

PEER_KEEPALIVE_S = 2.0
# The least ping interval gazette-py servers accept (GRPC_SERVER_KEEPALIVE_OPTIONS).
MIN_KEEPALIVE_S = 1.0


def check_keepalive(interval_s: float | None) -> float | None:
    """`interval_s` when it is None or a ping interval gazette-py servers accept; ValueError otherwise."""
    if interval_s is None:
        return None
    if (
        isinstance(interval_s, bool)
        or not isinstance(interval_s, int | float)
        or not interval_s >= MIN_KEEPALIVE_S
    ):
        raise ValidationError(
            f"keepalive {interval_s!r} is not a number of seconds >= {MIN_KEEPALIVE_S:g} (or None: off)"
        )
    return float(interval_s)


def client_options(keepalive_s: float | None) -> list[tuple[str, int]]:
    """GRPC_CLIENT_OPTIONS, plus (unless `keepalive_s` is None) a ping every `keepalive_s` seconds
    that ends the connection when it goes unanswered for twice that: calls on it then fail
    UNAVAILABLE (and are retried) instead of waiting on a connection a partition or a stopped process
    silently broke. Pings only for gazette-py servers: Gazette's Go servers keep gRPC's default
    policy and answer pings more often than every 5 minutes, on a connection they send nothing on,
    with GOAWAY ("too_many_pings"). ValueError for an interval our servers would refuse."""
    interval_s = check_keepalive(keepalive_s)
    if interval_s is None:
        return list(GRPC_CLIENT_OPTIONS)
    return [*GRPC_CLIENT_OPTIONS, *_ping_options(interval_s)]


def _ping_options(interval_s: float) -> list[tuple[str, int]]:
    """Ping every `interval_s`, even when idle, and end the connection after twice that unanswered."""
    ms = int(interval_s * 1000)
    return [
        ("grpc.keepalive_time_ms", ms),
        ("grpc.keepalive_timeout_ms", 2 * ms),
        # gRPC core times an unanswered ping out after this (60 s by default), whatever
        # keepalive_timeout says: without it a dead peer was found only a minute later.
        ("grpc.http2.ping_timeout_ms", 2 * ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


# Broker-to-broker (and member-to-member) channels ping every PEER_KEEPALIVE_S, so a peer that stopped
# (SIGSTOP, a dead host) breaks its Replicate streams within seconds instead of holding a spool forever.
GRPC_PEER_OPTIONS = client_options(PEER_KEEPALIVE_S)
# Servers accept those pings (the default policy answers pings more often than 5 min with GOAWAY),
# and ping their own clients as often: a replica's Replicate handler only reads, so without pings of
# its own a primary cut off by a partition (packets dropped, no reset) would leave that handler
# holding the replica's spool for good, and the primary's next pipeline, once the partition heals,
# would wait for that spool for ever. With them the dead connection ends within seconds and the
# spool is released.
GRPC_SERVER_KEEPALIVE_OPTIONS = [
    ("grpc.http2.min_recv_ping_interval_without_data_ms", int(MIN_KEEPALIVE_S * 1000)),
    ("grpc.http2.max_ping_strikes", 0),
    *_ping_options(PEER_KEEPALIVE_S),
]


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def advertised_host(host: str, advertise: str | None) -> str:
    """The host a server puts in its endpoint for peers and clients: `advertise` when given, else the
    bound `host`. A wildcard bind (0.0.0.0, ::) reaches nobody as an address, so it needs `advertise`."""
    if advertise:
        return advertise
    if host in WILDCARD_HOSTS:
        raise ValidationError(
            f"--host {host or '(empty)'} binds every interface but is no address to reach this process at: "
            "pass --advertise HOST (a name or address the other hosts and clients reach)"
        )
    return host


def grpc_target(endpoint: str) -> str:
    """`http://host:port` -> `host:port` (the form grpc channels take)."""
    for scheme in ("http://", "https://"):
        if endpoint.startswith(scheme):
            endpoint = endpoint[len(scheme) :]
    return endpoint.rstrip("/")
