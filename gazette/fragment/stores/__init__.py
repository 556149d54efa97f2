"""Fragment stores: the Store interface, `file://` and `s3://` implementations, `get_store(url)`.

Stores are cached per URL and their methods block; callers run them in threads.
"""

from gazette.fragment.stores.base import (
    ObjectNotFoundError,
    Store,
    StoreEntry,
    StoreError,
    clear_store_cache,
    get_store,
    parse_store_url,
)

__all__ = [
    "ObjectNotFoundError",
    "Store",
    "StoreEntry",
    "StoreError",
    "clear_store_cache",
    "get_store",
    "parse_store_url",
]
