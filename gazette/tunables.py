"""Timing and size defaults that more than one module uses: one name per value
(docs/architecture.md#tunables).

Each module that needs one of these reads it from here where it is used (`tunables.LEASE_TTL_S`),
under this name only: no module keeps a local alias, so a name means one value everywhere and a test
patches the tunable itself. Standard library only; imports nothing of gazette, so every layer may import it.
"""

from __future__ import annotations

# ---- members (brokers and consumers) and their etcd leases

# TTL of a member's etcd lease: a member that stops renewing it (a crash, a pause) loses its
# assignments this long after its last renewal.
LEASE_TTL_S = 20
# After a lost lease, a member (RENEW policy) waits this long between attempts to get a new lease
# and announce itself again.
RENEW_RETRY_S = 1.0
# A stopping member waits this long for its background tasks (pipeline shutdowns, replica stops,
# lease renewal) before naming and cancelling those still running.
STOP_TASKS_TIMEOUT_S = 10.0
# A gracefully stopping broker waits this long for the allocator to move its journals away.
BROKER_EXIT_DRAIN_S = 60.0
# A gracefully stopping consumer waits this long for the allocator to move its shards away.
CONSUMER_EXIT_DRAIN_S = 30.0
# The same wait for the members of a LocalCluster and of run_consumer groups: shorter, since
# local clusters are stopped often (tests, notebooks, the demo).
LOCAL_EXIT_DRAIN_S = 15.0

# ---- journals and the broker

# The broker's --max-replication default: the allocator gives no journal more replicas than this
# (docs/semantics.md#journal-specs). Not JournalSpec's limit on `replication` (protocol/spec.py).
BROKER_MAX_REPLICATION = 9
# A primary (append) or replica (Replicate) whose Replica is not built yet (the reconcile lags the
# KeySpace) looks again after this long.
REPLICA_WAIT_S = 0.02
# The most journals one broker holds unless its --broker.limit says otherwise (Gazette's default).
BROKER_JOURNAL_LIMIT = 1024
# The largest content chunk a broker sends in one ReadResponse (Gazette sends 32 KiB - 32;
# per-message overhead dominates in Python, so chunks are larger here).
BROKER_READ_CHUNK_BYTES = 256 * 1024
# Uncompressed bytes read from a spool file per step.
SPOOL_READ_CHUNK_BYTES = 1 << 20
# Compressed bytes read from a fragment store per step when a persisted fragment is decoded.
STORE_READ_CHUNK_BYTES = 1 << 20

# ---- clients (journal and shard calls)

# Backoff between a call's attempts (docs/semantics.md#client-retries-and-backoff): 50 ms x2,
# 100 ms x2, 1 s x2, then 5 s; the last value repeats.
CLIENT_RETRY_BACKOFF_S = (0.05, 0.05, 0.1, 0.1, 1.0, 1.0, 5.0)
# A call gives up after this many retried attempts (UNAVAILABLE peers, routes in flux).
CLIENT_MAX_RETRY_ATTEMPTS = 20

# ---- local processes (consumer groups, embedded etcd, notebooks, the demo)

# A consumer group member (in-process or a subprocess) must be serving within this long.
CONSUMER_START_TIMEOUT_S = 60.0
# A stopping consumer group member is waited for this long (then its subprocess is killed).
CONSUMER_STOP_TIMEOUT_S = 60.0
# How often run_consumer groups and the demo look again at what they wait for.
LOCAL_POLL_INTERVAL_S = 0.05
# An embedded etcd must answer its health check within this long of being started.
ETCD_START_TIMEOUT_S = 30.0
# An embedded etcd is given this long to exit after SIGTERM (then SIGKILL), or to stop on SIGSTOP.
ETCD_STOP_TIMEOUT_S = 10.0
# A notebook widget's refresh thread and its etcd watches are given this long to stop.
NOTEBOOK_STOP_TIMEOUT_S = 10.0
