"""Log output of gazette processes, as Gazette's --log.format and --log.level (standard library only).

`configure(level, fmt)` installs one handler on the root logger writing to stderr:
* "text" (the default): `<time> <logger> <LEVEL> <message>` and then the record's structured fields
  (what a call passed as `extra={...}`) as ` key=value`;
* "color": the same, with the level coloured (Gazette's forced-colour text);
* "json": one JSON object per line with Gazette's (logrus') keys, "level" (debug, info, warning,
  error, fatal), "msg" and "time" (RFC 3339), then "logger", the structured fields, and "error"
  (the traceback) when an exception is logged.
Calling it again replaces its own handler, never anyone else's (pytest's, a notebook's).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOG_FORMATS = ("text", "json", "color")
# Gazette's level names (logrus) and Python's, to logging's levels.
LOG_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
    "critical": logging.CRITICAL,
}
_LOGRUS_LEVEL = {"CRITICAL": "fatal"}  # logrus' names for Python's levels where they differ
_COLORS = {"DEBUG": "37", "INFO": "36", "WARNING": "33", "ERROR": "31", "CRITICAL": "31"}  # ANSI, as logrus'
# Attributes every LogRecord has: what is left in a record's __dict__ are the call's structured fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def parse_level(level: str) -> int:
    """`level` (Gazette's names, or Python's, any case) as a logging level; ValueError names the choices."""
    try:
        return LOG_LEVELS[level.strip().lower()]
    except KeyError:
        raise ValueError(f'log level "{level}" is not one of {", ".join(LOG_LEVELS)}') from None


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of `record`: what the logging call passed in `extra=`."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JSONFormatter(logging.Formatter):
    """One JSON object per record, with logrus' keys (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "level": _LOGRUS_LEVEL.get(record.levelname, record.levelname.lower()),
            "msg": record.getMessage(),
            "time": _rfc3339(record.created),
            "logger": record.name,
        }
        for key, value in fields(record).items():
            doc.setdefault(key, value)
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["error"] = record.exc_text
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`<time> <logger> <LEVEL> <message>` and ` key=value` for each structured field."""

    def __init__(self, color: bool = False) -> None:
        super().__init__("%(asctime)s %(name)s %(levelname)s %(message)s")
        self.color = color

    def format(self, record: logging.LogRecord) -> str:
        extra = "".join(f" {k}={_text_value(v)}" for k, v in fields(record).items())
        if not self.color:
            return _insert_fields(super().format(record), extra)
        original = record.levelname
        record.levelname = f"\x1b[{_COLORS.get(original, '0')}m{original}\x1b[0m"
        try:
            return _insert_fields(super().format(record), extra)
        finally:
            record.levelname = original


def _insert_fields(text: str, extra: str) -> str:
    """The fields at the end of the message's first line (a traceback, if any, stays below)."""
    first, sep, rest = text.partition("\n")
    return first + extra + sep + rest


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=\n') else text


def _rfc3339(created: float) -> str:
    local = time.localtime(created)
    offset = time.strftime("%z", local)
    return time.strftime("%Y-%m-%dT%H:%M:%S", local) + f"{offset[:3]}:{offset[3:]}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at each record (it may be swapped, e.g. by a test runner)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_settings = {"level": "warning", "format": "text"}  # the last configure's (None keeps them)


def current_format() -> str:
    """The format the last `configure` chose ("text" before any)."""
    return _settings["format"]


def line(level: int, msg: str, logger: str, **structured: Any) -> str:
    """`msg` as one line of the current format, for output written outside logging (such as a
    process's last words to its supervisor), so a JSON log stays one object per line."""
    record = logging.LogRecord(logger, level, "", 0, msg, None, None)
    record.__dict__.update(structured)
    if current_format() == "json":
        return JSONFormatter().format(record)
    return msg


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Sends the root logger's records at `level` and above to stderr in format `fmt` (LOG_FORMATS);
    None keeps what the last call chose (at first: warning, text)."""
    level = level or _settings["level"]
    fmt = fmt or _settings["format"]
    if fmt not in LOG_FORMATS:
        raise ValueError(f'log format "{fmt}" is not one of {", ".join(LOG_FORMATS)}')
    numeric = parse_level(level)
    formatter: logging.Formatter = JSONFormatter() if fmt == "json" else TextFormatter(color=fmt == "color")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(numeric)
    _settings.update(level=level, format=fmt)
