"""fragments_io: the PySpark data source over persisted fragments (the fragments_io issue builds it).

Depends on gazette.protocol, keyspace (read-only), fragment and message; never on a running broker.
"""
