"""Helpers of the sink tests: journals on a LocalCluster and what ReadCommitted delivers from them."""

from __future__ import annotations

from collections import Counter

from gazette.message.reader import ReadCommitted, ReadUncommitted

JSON_CT = "application/x-ndjson"


def make_journals(cluster, names, content_type=JSON_CT, **labels):
    client = cluster.client()
    client.apply_journals(
        [cluster.journal_spec(n, labels={"content-type": content_type, **labels}) for n in names]
    )
    cluster.wait_for_routes(list(names))
    return client


def committed(client, journal):
    """The messages ReadCommitted delivers from `journal` (ACKs left out), without their _meta."""
    out = []
    for env in ReadCommitted(client, journal, skip_acks=True):
        msg = dict(env.message) if isinstance(env.message, dict) else env.message
        if isinstance(msg, dict):
            msg.pop("_meta", None)
        out.append(msg)
    return out


def uncommitted_count(client, journal):
    return sum(1 for _ in ReadUncommitted(client, journal))


def ids(messages):
    return Counter(m["id"] for m in messages)
