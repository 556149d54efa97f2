"""The fragment Store interface (docs/semantics.md#fragment-stores), store URL parsing and the per-URL store
cache.

Store methods block (callers run them in threads) and take paths relative to the store URL's path.
A `put` is atomic: a partially written object is never visible to `list`, `exists` or `get`.
Imports gazette.protocol only; the file and s3 implementations are imported on first use.
"""

from __future__ import annotations

import abc
import dataclasses
import posixpath
import threading
from typing import BinaryIO
from urllib.parse import parse_qsl, unquote, urlsplit

from gazette.protocol.errors import StoreError, ValidationError

# Gazette's RewriterConfig, taken by every store: the first `find` in an object's journal-relative
# path is replaced by `replace` (Gazette's broker/stores/common/rewriter.go).
REWRITE_QUERY_ARGS = ("find", "replace")
_S3_OWN_QUERY_ARGS = ("endpoint", "region", "profile", "ACL", "storageClass", "SSE", "SSEKMSKeyId")
S3_QUERY_ARGS = _S3_OWN_QUERY_ARGS + REWRITE_QUERY_ARGS
# Gazette decodes query arguments into struct fields matched case-insensitively (gorilla/schema).
_CANONICAL_QUERY_ARG = {name.lower(): name for name in S3_QUERY_ARGS}


# StoreError (a store operation failed; the message names the store URL and the object path) is
# defined with the other named errors in gazette.protocol.errors, and importable from here.


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """The object does not exist in the store."""


@dataclasses.dataclass(frozen=True, slots=True)
class StoreEntry:
    path: str  # relative to the listed prefix
    mod_time: int  # unix seconds
    size: int


class Store(abc.ABC):
    """A fragment store rooted at `url`. All paths are relative to the URL's path."""

    url: str

    @abc.abstractmethod
    def list(self, prefix: str) -> list[StoreEntry]:
        """Every object whose path starts with `prefix`, recursively; entry paths drop the prefix."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    def get(self, path: str) -> bytes:
        """The raw stored bytes (never decoded). Raises ObjectNotFoundError if absent.

        Reads through `open`, whose stream raises StoreError for failures while reading."""
        with self.open(path) as f:
            return f.read()

    @abc.abstractmethod
    def open(self, path: str) -> BinaryIO:
        """A streaming reader of the raw stored bytes; the caller closes it."""

    @abc.abstractmethod
    def put(self, path: str, data: bytes | BinaryIO, content_encoding: str | None = None) -> None:
        """Writes the whole object atomically, replacing any object at `path`."""

    def copy(self, src: str, dst: str) -> None:
        """Writes a copy of object `src` at `dst` (atomically, as `put`), replacing any object there.
        Raises ObjectNotFoundError if `src` is absent. This default streams through `open` and `put`;
        stores that can copy without reading (S3's CopyObject) override it."""
        with self.open(src) as f:
            self.put(dst, f)

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Deletes the object; removing an absent object is not an error."""

    @abc.abstractmethod
    def sign_get(self, path: str, ttl_s: float) -> str:
        """A URL from which the object can be fetched without credentials for `ttl_s` seconds."""

    @abc.abstractmethod
    def mod_time(self, path: str) -> int:
        """Unix seconds of the object's last write. Raises ObjectNotFoundError if absent."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def check_object_path(url: str, path: str) -> str:
    """Validates a store-relative object path: not absolute, no empty, '.' or '..' segments."""
    if not path or path.startswith("/") or path.endswith("/"):
        raise ValidationError(f'object path "{path}" in store {url} must be relative and name an object')
    if any(seg in ("", ".", "..") for seg in path.split("/")):
        raise ValidationError(
            f'object path "{path}" in store {url} is not clean (no empty, "." or ".." parts)'
        )
    return path


def check_list_prefix(url: str, prefix: str) -> str:
    """Validates a listing prefix: "" or a relative path whose complete segments are clean."""
    if prefix.startswith("/"):
        raise ValidationError(f'list prefix "{prefix}" in store {url} must be relative')
    if any(seg in (".", "..") for seg in prefix.split("/")[:-1]) or "//" in prefix:
        raise ValidationError(f'list prefix "{prefix}" in store {url} is not clean')
    return prefix


@dataclasses.dataclass(frozen=True, slots=True)
class ParsedStoreURL:
    scheme: str  # "file" or "s3"
    bucket: str  # "" for file
    path: str  # file: absolute dir ending in "/"; s3: key prefix, "" or ending in "/"
    args: dict[str, str]

    def rewrite(self, path: str) -> str:
        """`path` (relative to the store URL's path) with the first `find` replaced by `replace`."""
        find = self.args.get("find", "")
        return path.replace(find, self.args.get("replace", ""), 1) if find else path


def parse_store_url(url: str) -> ParsedStoreURL:
    """Parses and validates `file:///abs/dir/` or `s3://bucket/prefix/?endpoint=&region=&profile=`; either
    may take Gazette's path rewrite `find=&replace=`. Argument names match case-insensitively."""
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise ValidationError(f'store URL "{url}" does not parse: {e}') from None
    if parts.fragment:
        raise ValidationError(f'store URL "{url}" must not have a fragment (#...)')
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as e:
        raise ValidationError(f'store URL "{url}" has a malformed query: {e}') from None
    args: dict[str, str] = {}
    for key, value in pairs:
        key = _CANONICAL_QUERY_ARG.get(key.lower(), key)
        if key in args:
            raise ValidationError(f'store URL "{url}" repeats query argument "{key}"')
        args[key] = value

    if parts.scheme == "file":
        if parts.netloc:
            raise ValidationError(
                f'store URL "{url}" has host "{parts.netloc}" (expected file:///absolute/dir/ with no host)'
            )
        unknown = sorted(set(args) - set(REWRITE_QUERY_ARGS))
        if unknown:
            raise ValidationError(
                f'store URL "{url}" has query arguments {unknown} (file stores take only {list(REWRITE_QUERY_ARGS)})'
            )
        path = parts.path
        if not path.startswith("/") or not path.endswith("/"):
            raise ValidationError(f'store URL "{url}" must name an absolute directory ending in "/"')
        if posixpath.normpath(path) + "/" != path and path != "/":
            raise ValidationError(
                f'store URL "{url}" path is not clean (expected "{posixpath.normpath(path)}/")'
            )
        return ParsedStoreURL("file", "", path, {k: v for k, v in args.items() if v})

    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValidationError(f'store URL "{url}" has no bucket (expected s3://bucket/prefix/)')
        if parts.username or parts.password or parts.port is not None:
            raise ValidationError(f'store URL "{url}" bucket "{parts.netloc}" must be a bare bucket name')
        unknown = sorted(set(args) - set(S3_QUERY_ARGS))
        if unknown:
            raise ValidationError(
                f'store URL "{url}" has unknown query arguments {unknown} (expected some of {list(S3_QUERY_ARGS)})'
            )
        prefix = unquote(parts.path).lstrip("/")  # Gazette keys by the decoded path, as file stores do
        if prefix and not prefix.endswith("/"):
            raise ValidationError(f'store URL "{url}" path "{parts.path}" must end in "/"')
        if prefix and any(seg in ("", ".", "..") for seg in prefix[:-1].split("/")):
            raise ValidationError(f'store URL "{url}" path "{parts.path}" is not clean')
        endpoint = args.get("endpoint", "")
        if endpoint:
            ep = urlsplit(endpoint)
            if ep.scheme not in ("http", "https") or not ep.netloc:
                raise ValidationError(
                    f'store URL "{url}" endpoint "{endpoint}" must be an http(s)://host[:port] URL'
                )
        return ParsedStoreURL("s3", parts.netloc, prefix, {k: v for k, v in args.items() if v})

    raise ValidationError(
        f'store URL "{url}" has unsupported scheme "{parts.scheme}" (expected file:// or s3://)'
    )


_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def get_store(url: str) -> Store:
    """The Store for `url`, built once per URL and cached. Raises ValidationError for a bad URL."""
    with _STORES_LOCK:
        store = _STORES.get(url)
        if store is not None:
            return store
    parsed = parse_store_url(url)
    if parsed.scheme == "file":
        from gazette.fragment.stores.file import FileStore

        store = FileStore(url, parsed)
    else:
        from gazette.fragment.stores.s3 import S3Store

        store = S3Store(url, parsed)
    with _STORES_LOCK:
        return _STORES.setdefault(url, store)


def clear_store_cache() -> None:
    """Forgets every cached Store (tests, and after credentials change)."""
    with _STORES_LOCK:
        _STORES.clear()
