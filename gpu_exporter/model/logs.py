"""Logging set-up (logfmt or JSON lines on stderr) and log-once helpers."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

_once_lock = threading.Lock()


def _level(record: logging.LogRecord) -> str:
    """The level as --log.level spells it: `warn`, not Python's `warning`."""
    return "warn" if record.levelno == logging.WARNING else record.levelname.lower()
_once_seen: set[tuple[str, str]] = set()


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={_level(record)}",
            f"logger={record.name}",
            f"msg={_logfmt_value(record.getMessage())}",
        ]
        if record.exc_info:
            parts.append(f"err={_logfmt_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": _level(record),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["err"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure(level: str = "info", fmt: str = "logfmt") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_once(logger: logging.Logger, key: str, level: int, msg: str, *args: object) -> None:
    """Log a message the first time `key` is seen for this logger (not every scrape)."""
    with _once_lock:
        k = (logger.name, key)
        if k in _once_seen:
            return
        _once_seen.add(k)
    logger.log(level, msg, *args)


def forget(logger: logging.Logger, key: str) -> None:
    """Let `key` be logged again (after the condition cleared)."""
    with _once_lock:
        _once_seen.discard((logger.name, key))
