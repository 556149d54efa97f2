"""Etcd key roots for tests: a fresh root per test, and its removal afterwards.

Tests share one etcd (starting one takes a while); each works under its own root, so clusters of
different tests never see each other, and the root's keys are deleted when the test is done.
Deletion goes through etcd's JSON gateway: no event loop is needed, so sync and async tests alike
clean up. Standard library only.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid

from gazette.protocol.errors import ValidationError

TEST_ROOT_PREFIX = "/gazette-test"
DELETE_TIMEOUT_S = 10.0

# The gateway is our own loopback etcd: an http_proxy in the environment must not apply.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def unique_root(prefix: str = TEST_ROOT_PREFIX) -> str:
    """A root no other test uses, like "/gazette-test/<32 hex digits>"."""
    return f"{prefix}/{uuid.uuid4().hex}"


def delete_prefix(endpoint: str, prefix: str) -> None:
    """Deletes every key starting with `prefix` (which must not be empty) from the etcd at `endpoint`
    ("http://host:port"); pass a root with a trailing "/" so "/a" does not also delete "/ab"."""
    raw = prefix.encode()
    if not raw:
        raise ValidationError("delete_prefix needs a non-empty prefix (an empty one would delete everything)")
    end = raw[:-1] + bytes([raw[-1] + 1])  # UTF-8 text never holds 0xff: the last byte increments
    body = json.dumps(
        {"key": base64.b64encode(raw).decode(), "range_end": base64.b64encode(end).decode()}
    ).encode()
    request = urllib.request.Request(f"{endpoint}/v3/kv/deleterange", data=body, method="POST")
    with _NO_PROXY.open(request, timeout=DELETE_TIMEOUT_S) as resp:
        resp.read()
