"""The one exception family of gazette-py: `GazetteError`, carrying a protocol `Status`."""

from __future__ import annotations

from typing import Any

from gazette.protocol.status import Status


class GazetteError(Exception):
    """An operation failed with a protocol status (or a local validation error).

    `status` is a `Status` (OK for errors that are not protocol statuses, such as bad input caught
    before any RPC). Extra context, for example the current `registers` on REGISTER_MISMATCH, rides
    in attributes.
    """

    def __init__(self, status: Status | int, message: str = "", **context: Any) -> None:
        self.status = Status(status)
        self.message = message or self.status.name
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)
        text = self.message if self.status == Status.OK else f"{self.status.name}: {self.message}"
        super().__init__(text)


class ValidationError(GazetteError, ValueError):
    """Bad input: a name, spec or argument that breaks a rule. The message names the thing and the rule."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)
