"""How the services log: ``--log-format text`` (the default) or ``json`` (one JSON object per line).

Text keeps the command line's plain format (``time LEVEL logger: message``). JSON lines are
rendered by structlog from the standard library's records, with ``timestamp`` (UTC, ISO
8601), ``level``, ``logger`` and ``event`` (the message), every ``extra`` field of the
record (a refused or failed call's ``rpc``, ``code``, ``detail``, ``peer``, ``duration_ms``,
``outcome``: serving.rpc_observer) and, for an error, the ``exception`` as text. Logs go to
stderr; stdout carries only the "listening on" line.
"""

from __future__ import annotations

import logging
import sys

import structlog

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_format: str, level: int) -> None:
    """Send every log record to stderr in ``log_format`` ("text" or "json") at ``level`` and above."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[
                    structlog.stdlib.add_log_level,
                    structlog.stdlib.add_logger_name,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.stdlib.ExtraAdder(),
                ],
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(sort_keys=False),
                ],
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
