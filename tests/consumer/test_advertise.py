"""A consumer member's Shard service advertised under another host than the one it binds."""

from __future__ import annotations

import pytest

from gazette.client.loop import default_loop
from gazette.consumer.consumer import Consumer
from gazette.examples.wordcount import WordCount


def test_consumer_advertises_its_shard_service_under_the_given_host(etcd, etcd_root, tmp_path) -> None:
    with pytest.raises(ValueError, match="--advertise HOST"):
        Consumer(
            WordCount(str(tmp_path)), etcd.endpoint, "http://127.0.0.1:1", root=etcd_root, host="0.0.0.0"
        )
    consumer = Consumer(
        WordCount(str(tmp_path)), etcd.endpoint, "http://127.0.0.1:1", root=etcd_root, lease_ttl_s=5,
        host="127.0.0.1", advertise="localhost",
    )  # fmt: skip
    loop = default_loop()
    loop.run(consumer.start(), timeout=60)
    try:
        assert consumer.endpoint.startswith("http://localhost:")
    finally:
        loop.run(consumer.stop(graceful=False), timeout=60)
