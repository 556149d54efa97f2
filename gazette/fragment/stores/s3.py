"""S3Store: fragments in an S3 (or S3-compatible) bucket, via boto3.

URL `s3://bucket/prefix/?endpoint=&region=&profile=&ACL=&storageClass=&SSE=&SSEKMSKeyId=&find=&replace=`
(docs/semantics.md#fragment-stores; names match case-insensitively, as Gazette's). A custom endpoint implies
path-style addressing; without `region=` the region is AWS_REGION's (as for Gazette's AWS SDK), else
botocore's own default. boto3 clients are thread-safe and one is shared by all calls; every botocore failure
is re-raised as a StoreError naming URL and path.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from gazette.fragment.stores.base import (
    ObjectNotFoundError,
    ParsedStoreURL,
    Store,
    StoreEntry,
    StoreError,
    check_list_prefix,
    check_object_path,
)
from gazette.protocol.errors import ValidationError

DEFAULT_ACL = "bucket-owner-full-control"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
MAX_ATTEMPTS = 3
_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}


class S3Store(Store):
    def __init__(self, url: str, parsed: ParsedStoreURL) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError:  # pragma: no cover - boto3 is the `s3` extra
            raise ValidationError(f"store URL {url} needs boto3 (pip install gazette-py[s3])") from None
        self.url = url
        self.bucket = parsed.bucket
        self.prefix = parsed.path
        self._rewrite = parsed.rewrite
        self._botocore_error = botocore.exceptions.BotoCoreError
        self._client_error = botocore.exceptions.ClientError
        args = parsed.args
        endpoint = args.get("endpoint")
        config = botocore.config.Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path"} if endpoint else None,
        )
        try:
            session = boto3.session.Session(profile_name=args.get("profile"))
            self._client: Any = session.client(
                "s3", endpoint_url=endpoint, region_name=args.get("region") or _env_region(), config=config
            )
        except botocore.exceptions.BotoCoreError as e:
            raise ValidationError(f"store URL {url}: {e}") from e
        self._put_args: dict[str, str] = {"ACL": args.get("ACL", DEFAULT_ACL)}
        for url_arg, s3_arg in (
            ("storageClass", "StorageClass"),
            ("SSE", "ServerSideEncryption"),
            ("SSEKMSKeyId", "SSEKMSKeyId"),
        ):
            if url_arg in args:
                self._put_args[s3_arg] = args[url_arg]

    def _key(self, path: str) -> str:
        return self.prefix + self._rewrite(check_object_path(self.url, path))

    @contextmanager
    def _errors(self, verb: str, path: str) -> Iterator[None]:
        try:
            yield
        except self._client_error as e:
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            if code in _NOT_FOUND_CODES:
                raise ObjectNotFoundError(f'object "{path}" does not exist in store {self.url}') from None
            raise StoreError(
                f'{verb} "{path}" in store {self.url}: {code} {err.get("Message", "")}'.rstrip()
            ) from e
        except self._botocore_error as e:
            raise StoreError(f'{verb} "{path}" in store {self.url}: {e}') from e

    def list(self, prefix: str) -> list[StoreEntry]:
        full = self.prefix + self._rewrite(check_list_prefix(self.url, prefix))
        entries: list[StoreEntry] = []
        with self._errors("listing", prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            for page in pages:
                for obj in page.get("Contents", ()):
                    key: str = obj["Key"]
                    if key.endswith("/"):
                        continue  # "directory" placeholder objects made by some tools
                    entries.append(
                        StoreEntry(key[len(full) :], int(obj["LastModified"].timestamp()), obj["Size"])
                    )
        return entries

    def _head(self, path: str) -> dict[str, Any]:
        with self._errors("checking", path):
            head: dict[str, Any] = self._client.head_object(Bucket=self.bucket, Key=self._key(path))
            return head

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except ObjectNotFoundError:
            return False
        return True

    def open(self, path: str) -> BinaryIO:
        with self._errors("reading", path):
            resp = self._client.get_object(Bucket=self.bucket, Key=self._key(path))
        return io.BufferedReader(_BodyReader(resp["Body"], self, path), buffer_size=1 << 20)  # type: ignore[return-value]

    def put(self, path: str, data: bytes | BinaryIO, content_encoding: str | None = None) -> None:
        key = self._key(path)
        extra = dict(self._put_args)
        if content_encoding:
            extra["ContentEncoding"] = content_encoding
        with self._errors("writing", path):
            if isinstance(data, bytes | bytearray | memoryview):
                self._client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data), **extra)
            else:
                # Managed transfer: multipart for large objects; S3 exposes the object only when complete.
                self._client.upload_fileobj(data, self.bucket, key, ExtraArgs=extra)

    def copy(self, src: str, dst: str) -> None:
        """Server-side CopyObject (objects up to 5 GB) with the store's put arguments (ACL, storage
        class, encryption); S3 exposes the copy only once it is complete."""
        source = {"Bucket": self.bucket, "Key": self._key(src)}
        with self._errors("copying", src):
            self._client.copy_object(
                Bucket=self.bucket, Key=self._key(dst), CopySource=source, **self._put_args
            )

    def remove(self, path: str) -> None:
        with self._errors("removing", path):
            self._client.delete_object(Bucket=self.bucket, Key=self._key(path))

    def sign_get(self, path: str, ttl_s: float) -> str:
        with self._errors("signing", path):
            url: str = self._client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._key(path)},
                ExpiresIn=max(1, int(ttl_s)),
            )
            return url

    def mod_time(self, path: str) -> int:
        return int(self._head(path)["LastModified"].timestamp())


def _env_region() -> str | None:
    """A URL without `region=` uses AWS_REGION, as Gazette's AWS SDK does (botocore reads only
    AWS_DEFAULT_REGION, which is still its fallback when AWS_REGION is unset)."""
    return os.environ.get("AWS_REGION") or None


class _BodyReader(io.RawIOBase):
    """Adapts botocore's StreamingBody to a raw binary stream, translating its errors."""

    def __init__(self, body: Any, store: S3Store, path: str) -> None:
        self._body = body
        self._store = store
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with self._store._errors("reading", self._path):
            data = self._body.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()
