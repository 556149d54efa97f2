"""etcd for gazette: the embedded etcd launcher, the key layout, and the KeySpace mirror.

May import only the standard library and aetcd; every higher layer reads etcd through a KeySpace
(load + watch + wait_for_revision) and writes through an aetcd client (`connect`, `transaction`).
"""

from gazette.keyspace import layout
from gazette.keyspace.etcd import (
    EmbeddedEtcd,
    TxnResult,
    connect,
    embedded_etcd,
    find_etcd_binary,
    transaction,
)
from gazette.keyspace.keyspace import KeySpace, KeyValue

__all__ = [
    "EmbeddedEtcd",
    "KeySpace",
    "KeyValue",
    "TxnResult",
    "connect",
    "embedded_etcd",
    "find_etcd_binary",
    "layout",
    "transaction",
]
