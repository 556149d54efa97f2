"""Stores and fragment content on a real file directory and on moto's S3 server over HTTP."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from gazette.fragment.codecs import compress
from gazette.fragment.content import CorruptFragmentError, list_fragments, open_fragment, persist
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.stores import (
    ObjectNotFoundError,
    Store,
    StoreEntry,
    StoreError,
    clear_store_cache,
    get_store,
    parse_store_url,
)
from gazette.protocol.errors import ValidationError


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_store_url"))


def fragment_of(journal: str, begin: int, data: bytes, codec: Codec = Codec.NONE) -> Fragment:
    return Fragment(journal, begin, begin + len(data), hashlib.sha1(data).digest(), codec)


def reader_of(data: bytes, chunk: int = 100_000):  # type: ignore[no-untyped-def]
    def read() -> Iterator[bytes]:
        for i in range(0, len(data), chunk):
            yield data[i : i + chunk]

    return read


# --- Store interface ---


def test_store_operations(store_url: str) -> None:
    store = get_store(store_url)
    assert isinstance(store, Store)
    assert get_store(store_url) is store  # cached per URL
    assert store.list("j/") == []
    assert not store.exists("j/a")

    store.put("j/a", b"alpha")
    store.put("j/sub/b", io.BytesIO(b"beta" * 1000), content_encoding="gzip")
    store.put("other/c", b"gamma")
    store.put("j/a", b"alpha2")  # replace

    listed = store.list("j/")
    assert [(e.path, e.size) for e in listed] == [("a", 6), ("sub/b", 4000)]
    assert all(isinstance(e, StoreEntry) and e.mod_time > 1_600_000_000 for e in listed)
    assert sorted(e.path for e in store.list("")) == ["j/a", "j/sub/b", "other/c"]
    assert [e.path for e in store.list("j/s")] == ["ub/b"]

    assert store.exists("j/a") and store.exists("j/sub/b")
    assert store.get("j/a") == b"alpha2"
    with store.open("j/sub/b") as f:
        assert f.read(4) == b"beta"
        assert f.read() == b"beta" * 999
    assert abs(store.mod_time("j/a") - listed[0].mod_time) <= 1

    signed = store.sign_get("j/a", 60)
    if store_url.startswith("file://"):
        assert signed == "file://" + str(Path(store_url[len("file://") :]) / "j" / "a")
    with urllib.request.urlopen(signed) as resp:
        assert resp.read() == b"alpha2"

    store.remove("j/a")
    store.remove("j/a")  # absent: not an error
    assert not store.exists("j/a")
    with pytest.raises(ObjectNotFoundError, match='"j/a"'):
        store.get("j/a")
    with pytest.raises(ObjectNotFoundError):
        store.mod_time("j/a")
    assert [e.path for e in store.list("j/")] == ["sub/b"]


def test_copy_replaces_the_target_and_names_a_missing_source(store_url: str) -> None:
    store = get_store(store_url)
    store.put("j/src", b"source" * 1000)
    store.put("j/dst", b"old")
    store.copy("j/src", "j/dst")
    assert store.get("j/dst") == b"source" * 1000 and store.get("j/src") == b"source" * 1000
    store.copy("j/src", "k/deeper/dst")  # into a prefix ("directory") that does not exist yet
    assert store.get("k/deeper/dst") == b"source" * 1000
    with pytest.raises(ObjectNotFoundError, match='"j/none"'):
        store.copy("j/none", "j/dst2")
    assert not store.exists("j/dst2")


def test_mod_time_answers_for_what_exists_sees(store_url: str) -> None:
    # persist uses mod_time alone as its "already there?" check: it must agree with exists().
    store = get_store(store_url)
    store.put("j/sub/b", b"beta")
    for absent in ["j/sub", "j/sub/b/c", "j/none"]:  # a "directory", below an object, missing
        assert not store.exists(absent)
        with pytest.raises(ObjectNotFoundError, match=f'"{absent}"'):
            store.mod_time(absent)
    assert store.exists("j/sub/b") and store.mod_time("j/sub/b") > 1_600_000_000


def test_object_paths_must_be_clean(file_store_url: str) -> None:
    store = get_store(file_store_url)
    for bad in ["/abs", "../escape", "a//b", "a/./b", "dir/"]:
        with pytest.raises(ValidationError, match="object path"):
            store.put(bad, b"x")


def test_file_put_is_atomic_and_hides_partials(file_store_url: str) -> None:
    store = get_store(file_store_url)
    root = Path(file_store_url[len("file://") :])

    class Exploding(io.RawIOBase):
        def __init__(self) -> None:
            self.sent = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
            if self.sent > 2 << 20:
                raise OSError("disk went away")
            b[: len(b)] = b"x" * len(b)
            self.sent += len(b)
            return len(b)

    with pytest.raises(Exception, match="disk went away"):
        store.put("j/big", Exploding())  # type: ignore[arg-type]
    assert not store.exists("j/big")
    assert list((root / "j").iterdir()) == []  # the temp file was cleaned up
    # A stray temp file from a crashed writer is never listed.
    (root / "j" / ".x.abc.gazette-partial").write_bytes(b"partial")
    assert store.list("j/") == []


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file://host/tmp/x/", "has host"),
        ("file:///tmp/x", 'ending in "/"'),
        ("file://relative/", "has host"),
        ("file:///tmp/../x/", "not clean"),
        ("file:///tmp/x/?endpoint=a", "query arguments"),
        ("gs://bucket/p/", 'unsupported scheme "gs"'),
        ("/tmp/x/", 'unsupported scheme ""'),
        ("s3:///prefix/", "no bucket"),
        ("s3://bucket/prefix", 'must end in "/"'),
        ("s3://bucket/a//b/", "not clean"),
        ("s3://bucket/p/?endpont=http://x", "unknown query arguments ['endpont']"),
        ("s3://bucket/p/?region=a&region=b", 'repeats query argument "region"'),
        ("s3://bucket/p/?endpoint=localhost:9000", "must be an http(s)://host"),
        ("s3://bucket/p/#frag", "fragment"),
    ],
)
def test_invalid_store_urls(url: str, problem: str) -> None:
    with pytest.raises(ValidationError) as err:
        get_store(url)
    assert url in str(err.value)
    assert problem in str(err.value)


def test_s3_unknown_profile_is_a_validation_error(moto_server: str) -> None:
    url = f"s3://bucket/p/?endpoint={moto_server}&profile=no-such-profile"
    with pytest.raises(ValidationError, match="no-such-profile"):
        get_store(url)


def test_s3_bucket_root_and_put_args(moto_server: str, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/?endpoint={moto_server}&region=us-east-1&ACL=private&storageClass=STANDARD_IA"
    store = get_store(url)
    store.put("j/x", b"x")
    assert [e.path for e in store.list("")] == ["j/x"]
    assert store.get("j/x") == b"x"

    # What reached S3, as the server reports it: put_object (bytes) and upload_fileobj (a stream).
    store.put("j/gz", b"gz", content_encoding="gzip")
    store.put("j/gz-stream", io.BytesIO(b"gz" * 1000), content_encoding="gzip")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    for key, encoding in [("j/x", None), ("j/gz", "gzip"), ("j/gz-stream", "gzip")]:
        head = s3.head_object(Bucket=s3_bucket, Key=key)  # the bucket root: no key prefix
        assert head.get("StorageClass") == "STANDARD_IA", key
        assert head.get("ContentEncoding") == encoding, key
    # ACL=private is sent too, but moto can't tell it from the default (bucket-owner-full-control)
    # with a single account: both read back as the owner's lone FULL_CONTROL grant.
    grants = s3.get_object_acl(Bucket=s3_bucket, Key="j/gz")["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]


def test_s3_get_translates_errors(
    s3_store_url: str, closed_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import botocore.exceptions

    # Failing to reach S3 at all.
    dead = get_store(f"s3://nowhere/p/?endpoint={closed_endpoint}&region=us-east-1")
    with pytest.raises(StoreError, match='reading "j/a" in store s3://nowhere/') as err:
        dead.get("j/a")
    assert not isinstance(err.value, ObjectNotFoundError)

    # Failing while the body streams in, after get_object answered.
    store = get_store(s3_store_url)
    store.put("j/a", b"alpha")

    class FailingBody:
        def read(self, n: int = -1) -> bytes:
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3.example")

        def close(self) -> None:
            pass

    monkeypatch.setattr(store._client, "get_object", lambda **kw: {"Body": FailingBody()})  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match=f'reading "j/a" in store {re.escape(s3_store_url)}: .*timeout'):
        store.get("j/a")


# --- Store URLs as Gazette reads them (its broker/stores/{fs,s3,common}) ---


def test_query_argument_names_match_case_insensitively() -> None:
    # Gazette decodes them into struct fields by case-insensitive name: `Endpoint=` or `acl=` work there.
    parsed = parse_store_url(
        "s3://b/p/?Endpoint=http://h:1&REGION=r&acl=private&storageclass=S&Find=x&REPLACE=y"
    )
    assert parsed.args == {
        "endpoint": "http://h:1", "region": "r", "ACL": "private", "storageClass": "S", "find": "x", "replace": "y"
    }  # fmt: skip
    with pytest.raises(ValidationError, match='repeats query argument "region"'):
        parse_store_url("s3://b/p/?region=a&Region=b")


def test_file_stores_take_only_the_path_rewrite() -> None:
    assert parse_store_url("file:///tmp/x/?find=a/&replace=b/").args == {"find": "a/", "replace": "b/"}
    with pytest.raises(ValidationError, match=r"query arguments \['endpoint'\] \(file stores take only"):
        parse_store_url("file:///tmp/x/?find=a/&endpoint=b")


def test_find_replace_rewrites_object_paths_as_gazette(store_url: str) -> None:
    """Gazette's RewriterConfig: the first `find` in each object's (and listing prefix's) path relative to
    the store URL becomes `replace`; Gazette brokers given this URL read and write the same keys."""
    plain = get_store(store_url)
    rewriting = get_store(store_url + ("&" if "?" in store_url else "?") + "find=j/&replace=moved/")
    rewriting.put("j/a", b"alpha")
    rewriting.put("j/sub/j/b", b"beta")  # only the first "j/" is replaced
    assert sorted(e.path for e in plain.list("")) == ["moved/a", "moved/sub/j/b"]
    assert [e.path for e in rewriting.list("j/")] == ["a", "sub/j/b"]  # relative to the rewritten prefix
    assert rewriting.get("j/a") == b"alpha" and rewriting.exists("j/sub/j/b")
    assert rewriting.mod_time("j/a") == plain.mod_time("moved/a")
    if store_url.startswith("file://"):
        assert rewriting.sign_get("j/a", 60).endswith("/moved/a")
    rewriting.remove("j/a")
    assert [e.path for e in plain.list("")] == ["moved/sub/j/b"]


def test_s3_key_prefix_is_url_decoded(moto_server: str, s3_bucket: str) -> None:
    # Gazette keys objects under the URL's decoded path, as every file store does.
    get_store(f"s3://{s3_bucket}/a%20b%3Dc/?endpoint={moto_server}&region=us-east-1").put("j/x", b"x")
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket)["Contents"]] == ["a b=c/j/x"]


def test_s3_region_defaults_to_aws_region(
    moto_server: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL without `region=`: Gazette's AWS SDK takes AWS_REGION, so ours does too (botocore alone
    would read only AWS_DEFAULT_REGION); `region=` wins over both."""
    url = f"s3://{s3_bucket}/p/?endpoint={moto_server}"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    clear_store_cache()
    try:
        assert get_store(url)._client.meta.region_name == "eu-west-3"  # type: ignore[attr-defined]
        assert get_store(url + "&region=ap-south-1")._client.meta.region_name == "ap-south-1"  # type: ignore[attr-defined]
        monkeypatch.delenv("AWS_REGION")
        clear_store_cache()
        assert get_store(url)._client.meta.region_name == "us-east-1"  # type: ignore[attr-defined]
    finally:
        clear_store_cache()


# --- Fragment content ---


@pytest.mark.parametrize("codec", list(Codec))
async def test_persist_list_and_read(store_url: str, codec: Codec) -> None:
    data = os.urandom(3000) + b"line\n" * 300_000
    frag = fragment_of("a/journal", 1000, data, codec)
    persisted = await persist(frag, reader_of(data), store_url, "2024/01")
    assert persisted.backing_store == store_url and persisted.path_postfix == "2024/01"
    assert persisted.mod_time > 1_600_000_000
    assert persisted.content_path == f"a/journal/2024/01/{frag.content_name}"
    assert dataclasses.replace(persisted, backing_store="", mod_time=0, path_postfix="") == frag

    listed = await list_fragments(store_url, "a/journal")
    assert listed == [persisted]

    assert b"".join(open_fragment(persisted)) == data
    assert b"".join(open_fragment(persisted, 1000 + 2500)) == data[2500:]
    assert b"".join(open_fragment(persisted, persisted.end)) == b""
    with pytest.raises(ValidationError, match="outside fragment"):
        open_fragment(persisted, 999)


async def test_persist_short_circuits_when_object_exists(
    file_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"hello world\n"
    frag = fragment_of("j", 0, data, Codec.GZIP)
    first = await persist(frag, reader_of(data), file_store_url, "")

    def must_not_read() -> Iterator[bytes]:
        raise AssertionError("finding the object should have short-circuited the upload")

    # One lookup answers both "is it there" and "since when" (one HEAD on S3, not two).
    store = get_store(file_store_url)
    lookups: list[str] = []
    mod_time = store.mod_time

    def counted_mod_time(path: str) -> int:
        lookups.append(path)
        return mod_time(path)

    def no_exists(path: str) -> bool:
        raise AssertionError("exists() is a second lookup")

    monkeypatch.setattr(store, "mod_time", counted_mod_time)
    monkeypatch.setattr(store, "exists", no_exists)
    again = await persist(frag, must_not_read, file_store_url, "")
    assert again == first
    assert lookups == [first.content_path]


async def test_persist_refuses_local_content_that_does_not_match(file_store_url: str) -> None:
    frag = fragment_of("j", 0, b"expected content")
    with pytest.raises(CorruptFragmentError, match="SHA1"):
        await persist(frag, reader_of(b"EXPECTED CONTENT"), file_store_url, "")
    with pytest.raises(CorruptFragmentError, match="16"):
        await persist(frag, reader_of(b"short"), file_store_url, "")
    assert await list_fragments(file_store_url, "j") == []


async def test_listing_skips_foreign_objects_with_a_warning(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = get_store(store_url)
    data = b"payload"
    frag = fragment_of("logs/x", 0, data)
    await persist(frag, reader_of(data), store_url, "")
    store.put("logs/x/README.txt", b"not a fragment")
    store.put("logs/x/pfx/0000000000000000-0000000000000001-" + "0" * 40 + ".bogus", b"?")
    store.put("logs/xy/" + frag.content_name, data)  # a sibling journal's prefix is not listed
    with caplog.at_level(logging.WARNING, logger="gazette.fragment.content"):
        listed = await list_fragments(store_url, "logs/x")
    assert [f.content_name for f in listed] == [frag.content_name]
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "README.txt" in warnings
    assert ".bogus" in warnings


async def test_corrupt_object_raises_naming_it(store_url: str) -> None:
    store = get_store(store_url)
    data = os.urandom(50_000)
    frag = fragment_of("c/j", 0, data)
    persisted = await persist(frag, reader_of(data), store_url, "")
    key = persisted.content_path

    flipped = bytearray(data)
    flipped[12_345] ^= 0x01
    store.put(key, bytes(flipped))
    with pytest.raises(CorruptFragmentError, match="SHA1") as err:
        b"".join(open_fragment(persisted))
    assert key in str(err.value)

    store.put(key, data[:-10])
    with pytest.raises(CorruptFragmentError, match="49990 bytes") as err:
        b"".join(open_fragment(persisted))
    assert key in str(err.value)

    # Too long is known before the end: it raises before yielding past `end`.
    store.put(key, data + b"extra")
    seen = 0
    with pytest.raises(CorruptFragmentError, match="more than"):
        for chunk in open_fragment(persisted):
            seen += len(chunk)
    assert seen <= len(data)


async def test_truncated_compressed_object_is_corrupt(file_store_url: str) -> None:
    store = get_store(file_store_url)
    data = b"some text\n" * 10_000
    frag = fragment_of("c/z", 0, data, Codec.ZSTANDARD)
    persisted = await persist(frag, reader_of(data), file_store_url, "")
    store.put(persisted.content_path, compress(Codec.ZSTANDARD, data)[:-4])
    with pytest.raises(CorruptFragmentError, match=f"{persisted.content_path}.*ZSTANDARD"):
        b"".join(open_fragment(persisted))
