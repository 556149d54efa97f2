"""Assignment of items (journals, later shards) to members through etcd. Today a static stand-in
(`static.StaticAssigner`) until the max-flow allocator lands; imports keyspace only.
"""
