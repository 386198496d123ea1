"""Logging: plain text or JSON lines, each carrying the id of the request it belongs to.

The ids live in context variables, set per HTTP request (`X-Request-Id`), per WebSocket
connection and per response on it, so every log call made while serving one carries
them without passing them around; with traces on, the request's trace id too (the same
context: gateway/core/tracing.py), to find its spans from a log line and back. Records are formatted where they are emitted (a
StreamHandler), in the context of the request that logged them.
"""

from __future__ import annotations

import logging
import logging.config
import os
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.core import tracing

__all__ = ["FORMATS", "configure_logging", "connection_id", "request_id"]

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
connection_id: ContextVar[str | None] = ContextVar("connection_id", default=None)

FORMATS = ("text", "json")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, the ids in scope, and
    the structured `fields` a record carries (`log.info(..., extra={"fields": {...}})`)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if (rid := request_id.get()) is not None:
            line["request_id"] = rid
        if (cid := connection_id.get()) is not None:
            line["connection_id"] = cid
        if tracing.tracer is not None and (ids := tracing.log_ids()) is not None:
            line["trace_id"], line["span_id"] = ids
        if fields := getattr(record, "fields", None):
            line.update(fields)
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """`time LEVEL logger [connection id] [request id] [trace=trace id]: message`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.ids = "".join(f" [{value}]" for value in (connection_id.get(), request_id.get()) if value)
        if tracing.tracer is not None and (ids := tracing.log_ids()) is not None:
            record.ids += f" [trace={ids[0]}]"
        return super().format(record)


def logging_config(log_format: str, level: str) -> dict[str, Any]:
    """A dictConfig for the whole process: the root handler on stderr in `log_format`, and
    uvicorn's loggers (startup, errors, access lines) sent through it rather than their own."""
    formatter = JSONFormatter if log_format == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"gateway": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "gateway",
                                "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {name: {"handlers": [], "propagate": True}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }


def configure_logging(log_format: str, level: str) -> None:
    # transformers logs through a stderr handler of its own; route it through ours instead. Its
    # import-time advice ("PyTorch was not found") does not apply: the gateway only tokenizes.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()
    logging.config.dictConfig(logging_config(log_format, level))
