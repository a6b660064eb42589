"""JSON-lines logging to stderr; `extra={...}` fields become JSON keys."""

from __future__ import annotations

import logging
import sys
import time

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("celpy").setLevel(max(logging.WARNING, root.level))


def gunicorn_logconfig(level: str = "info") -> dict:
    """A logging dictConfig that sends gunicorn's own messages through the same JSON
    formatter to stderr, so every line the server prints is a JSON object."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json_stderr": handler},
        "root": {"level": level.upper(), "handlers": ["json_stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }
