"""Shardspace YAML as gazctl writes and reads it (Gazette's consumer/shardspace): push-down of
`common`, zero fields as unset, labels as name/value lists (the single label store=rocksdb), `;meta`
sources, comments, revisions and deletes; the hoisted dump and its round trip."""

from __future__ import annotations

import re

import pytest
import yaml

from gazette.consumer import ShardSpec
from gazette.consumer.shardspace import dump_shardspace, load_shardspace
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet

# Gazette's own fixture (consumer/shardspace/shardspace_test.go TestYAMLRoundTrip), with a ;meta source.
GAZCTL_YAML = """
common:
  recovery_log_prefix: recovery/logs
  hint_prefix: /hints
  hint_backups: 2
  max_txn_duration: 1s
  min_txn_duration: 1ms
  hot_standbys: 1
  labels:
  - name: name-1
    value: val-1
  disable_wait_for_ack: true
shards:
- comment: This is a comment
  delete: true
  id: shard-A
  sources:
  - journal: journal/A
  labels:
  - name: name-2
    value: val-2
  revision: 123
- id: shard-B
  sources:
  - journal: journal/B;derived
    min_offset: 1024
  disable: true
  labels:
  - name: name-3
    value: val-3
  revision: 456
"""

COMMON = dict(
    recovery_log_prefix="recovery/logs", hint_prefix="/hints", hint_backups=2, max_txn_duration="1s",
    min_txn_duration="1ms", hot_standbys=1, disable_wait_for_ack=True,
)  # fmt: skip


def test_loads_gazctls_shardspace() -> None:
    delete, upsert = load_shardspace(GAZCTL_YAML)
    assert (delete.delete, delete.expect_mod_revision) == ("shard-A", 123)
    assert upsert.expect_mod_revision == 456
    assert upsert.upsert == ShardSpec(
        "shard-B",
        [{"journal": "journal/B;derived", "min_offset": 1024}],
        disable=True,
        labels=[{"name": "name-1", "value": "val-1"}, {"name": "name-3", "value": "val-3"}],
        **COMMON,
    )
    assert upsert.upsert.labels == LabelSet({"name-1": "val-1", "name-3": "val-3"})


def test_zero_fields_take_common_and_entry_labels_win() -> None:
    text = """
common: {hot_standbys: 2, max_txn_duration: 2s, labels: [{name: store, value: rocksdb}, {name: tier, value: a}]}
shards:
  - {id: count-000, sources: [a/journal], hot_standbys: 0, min_txn_duration: 0s, labels: {tier: b}}
  - {id: count-001, sources: [a/journal], hot_standbys: 3, labels: null, revision: -1}
"""
    first, second = load_shardspace(text)
    assert first.upsert.hot_standbys == 2 and first.upsert.max_txn_duration == 2.0  # 0: unset
    assert first.upsert.labels == LabelSet({"store": "rocksdb", "tier": "b"})
    assert (second.upsert.hot_standbys, second.expect_mod_revision) == (3, -1)
    assert second.upsert.labels == LabelSet({"store": "rocksdb", "tier": "a"})


def test_dump_hoists_as_gazctl_and_round_trips() -> None:
    a = ShardSpec("shard-A", ["journal/A"], labels={"name-1": "val-1", "name-2": "val-2"}, **COMMON)
    b = ShardSpec(
        "shard-B", [{"journal": "journal/B;derived", "min_offset": 1024}], disable=True,
        labels={"name-1": "val-1", "name-3": "val-3"}, **COMMON,
    )  # fmt: skip
    text = dump_shardspace([(a, 123), (b, 456)])
    assert yaml.safe_load(text) == {
        "common": {
            "recovery_log_prefix": "recovery/logs",
            "hint_prefix": "/hints",
            "hint_backups": 2,
            "max_txn_duration": "1s",
            "min_txn_duration": "1ms",
            "hot_standbys": 1,
            "labels": [{"name": "name-1", "value": "val-1"}],
            "disable_wait_for_ack": True,
        },
        "shards": [
            {
                "id": "shard-A",
                "sources": [{"journal": "journal/A"}],
                "labels": [{"name": "name-2", "value": "val-2"}],
                "revision": 123,
            },
            {
                "id": "shard-B",
                "sources": [{"journal": "journal/B;derived", "min_offset": 1024}],
                "disable": True,
                "labels": [{"name": "name-3", "value": "val-3"}],
                "revision": 456,
            },
        ],
    }
    assert [(c.upsert, c.expect_mod_revision) for c in load_shardspace(text)] == [(a, 123), (b, 456)]
    assert yaml.safe_load(dump_shardspace([])) == {"common": {}, "shards": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("common: {id: a}\nshards: []\n", '"common" may not set "id"'),
        ("common: {revision: 3}\nshards: []\n", '"common" may not set "revision"'),
        ("shards: [{id: count-000, colour: red}]\n", 'shard "count-000" has unknown field "colour"'),
        ("shards: [{id: count-000, max_txn_duration: soon}]\n", 'shard "count-000": max_txn_duration "soon"'),
        ("shards: [{id: count-000, revision: -2}]\n", "revision -2"),
        ("shards: [{id: count-000, delete: yes please}]\n", "delete 'yes please'"),
        ("shards: [{sources: [a/b]}]\n", "shards[0] is not a map with an id"),
        ("shards: [a: b: c]", "not valid YAML"),
        ("- just a list\n", 'must be a map with "shards"'),
    ],
)
def test_errors_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        load_shardspace(text)
