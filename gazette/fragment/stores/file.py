"""FileStore: fragments under an absolute local directory named by a `file:///abs/dir/` URL.

Writes go to a hidden temp file in the target directory, are fsynced, then renamed into place, so a
partial object is never visible; listings skip those temp files. "Signed" URLs are plain file:// URLs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, unquote

from gazette.fragment.stores.base import (
    ObjectNotFoundError,
    ParsedStoreURL,
    Store,
    StoreEntry,
    StoreError,
    check_list_prefix,
    check_object_path,
)

_TMP_SUFFIX = ".gazette-partial"
_COPY_CHUNK_BYTES = 1 << 20


class FileStore(Store):
    def __init__(self, url: str, parsed: ParsedStoreURL) -> None:
        self.url = url
        self.root = Path(unquote(parsed.path))
        self._rewrite = parsed.rewrite

    def _abs(self, path: str) -> Path:
        return self.root / check_object_path(self.url, self._rewrite(check_object_path(self.url, path)))

    def list(self, prefix: str) -> list[StoreEntry]:
        prefix = check_list_prefix(self.url, self._rewrite(check_list_prefix(self.url, prefix)))
        # Walk the deepest directory fully named by the prefix, then filter on the remainder.
        dir_part, _, _ = prefix.rpartition("/")
        top = self.root / dir_part if dir_part else self.root
        entries: list[StoreEntry] = []
        if not top.is_dir():
            return entries
        root_len = len(str(self.root).rstrip("/")) + 1
        for dirpath, _dirs, files in os.walk(top, onerror=self._walk_error):
            for name in files:
                if name.startswith(".") and name.endswith(_TMP_SUFFIX):
                    continue
                full = os.path.join(dirpath, name)
                rel = full[root_len:].replace(os.sep, "/")
                if not rel.startswith(prefix):
                    continue
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # removed while listing
                entries.append(StoreEntry(rel[len(prefix) :], int(st.st_mtime), st.st_size))
        entries.sort(key=lambda e: e.path)
        return entries

    def _walk_error(self, err: OSError) -> None:
        if not isinstance(err, FileNotFoundError):
            raise StoreError(f"listing store {self.url}: {err}") from err

    def exists(self, path: str) -> bool:
        return self._abs(path).is_file()

    def open(self, path: str) -> BinaryIO:
        target = self._abs(path)
        try:
            return open(target, "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f'object "{path}" does not exist in store {self.url}') from None
        except OSError as e:
            raise StoreError(f'reading object "{path}" of store {self.url}: {e}') from e

    def put(self, path: str, data: bytes | BinaryIO, content_encoding: str | None = None) -> None:
        # content_encoding has nowhere to live on a plain file; readers decode by the codec instead.
        target = self._abs(path)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                if isinstance(data, bytes | bytearray | memoryview):
                    f.write(data)
                else:
                    shutil.copyfileobj(data, f, _COPY_CHUNK_BYTES)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            self._fsync_dir(target.parent)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f'writing object "{path}" to store {self.url}: {e}') from e

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        try:
            self._abs(path).unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StoreError(f'removing object "{path}" from store {self.url}: {e}') from e

    def sign_get(self, path: str, ttl_s: float) -> str:
        return "file://" + quote(str(self._abs(path)))

    def mod_time(self, path: str) -> int:
        # Answers for exactly the objects `exists` sees (regular files): persist uses it as the check.
        try:
            st = self._abs(path).stat()
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as e:
            raise StoreError(f'checking object "{path}" of store {self.url}: {e}') from e
        if st is None or not stat.S_ISREG(st.st_mode):
            raise ObjectNotFoundError(f'object "{path}" does not exist in store {self.url}')
        return int(st.st_mtime)
