"""Runnable examples of gazette-py that double as smoke tests (wordcount, streamsum).

Each example module defines its Application and a `run(...)` helper that drives it on a LocalCluster.
Examples may import every layer of gazette-py.
"""
