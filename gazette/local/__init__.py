"""A local cluster in one call: embedded etcd plus brokers, in-process or as subprocesses, with faults.

May import every layer below it (keyspace, allocator, broker, client).
"""

from gazette.local.cluster import LocalCluster

__all__ = ["LocalCluster"]
