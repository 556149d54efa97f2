"""The journal broker: the gRPC Journal service of one process (resolver, replicas, append, read,
list/apply, flush, proxying, metrics). Imports protocol, keyspace and fragment; never client.
"""
