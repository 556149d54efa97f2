"""etcd for gazette: the embedded etcd launcher, the key layout, and the KeySpace mirror.

May import only the standard library, aetcd and gazette.tasks; every higher layer reads etcd through a KeySpace
(load + watch + wait_for_revision) and writes through an aetcd client (`connect`).
"""

from gazette.keyspace import layout
from gazette.keyspace.etcd import (
    EmbeddedEtcd,
    connect,
    embedded_etcd,
    find_etcd_binary,
)
from gazette.keyspace.keyspace import KeySpace, KeyValue

__all__ = [
    "EmbeddedEtcd",
    "KeySpace",
    "KeyValue",
    "connect",
    "embedded_etcd",
    "find_etcd_binary",
    "layout",
]
