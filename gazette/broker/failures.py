"""How an append fails, shared by the primary's append FSM (append.py) and a replica's Replicate
stream (replicate.py), which both write a journal's spool. Imports only the broker's context type.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from gazette.broker.context import BrokerContext


class AppendFailed(Exception):
    """The append did not commit: the client broke the protocol (`code` ABORTED) or the pipeline
    failed (UNAVAILABLE, so clients retry). Any partial content was rolled back."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


def spool_write_failure(broker: BrokerContext, journal: str, exc: OSError) -> AppendFailed:
    """The error for a spool write of `journal` that raised `exc` at `broker` (as primary or replica),
    naming the broker and the spool directory: RESOURCE_EXHAUSTED for a full disk or quota (clients
    do not retry it: space must be freed first), INTERNAL otherwise."""
    where = broker.spool_dir or "the temporary directory"
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return AppendFailed(
        f"append rolled back: broker {broker.id[1]} could not spool content of {journal} in {where}: "
        f"{exc.strerror or exc}",
        grpc.StatusCode.RESOURCE_EXHAUSTED if full else grpc.StatusCode.INTERNAL,
    )
