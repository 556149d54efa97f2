"""Message framings, keyed by a journal's `content-type` label (docs/semantics.md#framings).

framing_for(content_type, **options) builds the Framing that encodes messages with their UUIDs and
decodes journal bytes into Envelopes; a journal whose content type has no registered framing can't
be read as messages. register_framing adds one. Imports only gazette.message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gazette.message.framing.base import Decoder, Framing, FramingError, split_uuid_text
from gazette.message.framing.csv_lines import CSVDecoder, CSVFraming
from gazette.message.framing.fixed import MAGIC, MAX_FRAME_BYTES, FixedDecoder, FixedFraming, frame
from gazette.message.framing.json_lines import DEFAULT_UUID_POINTER, JSONDecoder, JSONFraming

JSON_CONTENT_TYPE = JSONFraming.content_type
FIXED_CONTENT_TYPE = FixedFraming.content_type
CSV_CONTENT_TYPE = CSVFraming.content_type

FramingFactory = Callable[..., Framing]

_registry: dict[str, FramingFactory] = {
    JSON_CONTENT_TYPE: JSONFraming,
    FIXED_CONTENT_TYPE: FixedFraming,
    CSV_CONTENT_TYPE: CSVFraming,
}


def register_framing(content_type: str, factory: FramingFactory) -> None:
    """Registers `factory(**options) -> Framing` for `content_type`; refuses to replace another one."""
    if not isinstance(content_type, str) or not content_type:
        raise FramingError(f"content type {content_type!r} is not a non-empty string")
    existing = _registry.get(content_type)
    if existing is not None and existing is not factory:
        raise FramingError(f"content type {content_type!r} already has a framing ({existing!r})")
    _registry[content_type] = factory


def framing_for(content_type: str, **options: Any) -> Framing:
    """The Framing of `content_type`, built with `options` (e.g. uuid_pointer, message_type, columns)."""
    factory = _registry.get(content_type)
    if factory is None:
        raise FramingError(
            f"no framing is registered for content type {content_type!r} "
            f"(known: {', '.join(sorted(_registry))})"
        )
    return factory(**options)


def content_types() -> list[str]:
    """The registered content types, sorted."""
    return sorted(_registry)


__all__ = [
    "CSV_CONTENT_TYPE",
    "DEFAULT_UUID_POINTER",
    "FIXED_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "MAGIC",
    "MAX_FRAME_BYTES",
    "CSVDecoder",
    "CSVFraming",
    "Decoder",
    "FixedDecoder",
    "FixedFraming",
    "Framing",
    "FramingError",
    "FramingFactory",
    "JSONDecoder",
    "JSONFraming",
    "content_types",
    "frame",
    "framing_for",
    "register_framing",
    "split_uuid_text",
]
