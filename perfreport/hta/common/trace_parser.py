"""``hta.common.trace_parser``'s backend switches.

HTA 0.5.0 can parse with the standard ``json`` module or with ``ijson`` variants; perfreport
has one loader (a streaming scanner, the same result whatever the switch), so the backend is
recorded and reported but changes nothing. ``_auto_detect_parser_backend`` answers ``JSON``,
the backend HTA 0.5.0 uses by default, so code that branches on it takes the default path.
"""

from __future__ import annotations

from enum import Enum


class ParserBackend(str, Enum):
    """HTA's parser backends (names and values as in HTA 0.5.0)."""

    JSON = "json"
    IJSON = "ijson"
    IJSON_BATCHED = "ijson_batched"
    IJSON_BATCH_AND_COMPRESS = "ijson_batch_and_compress"


_backend = ParserBackend.JSON


def _auto_detect_parser_backend() -> ParserBackend:
    return ParserBackend.JSON


def set_default_trace_parsing_backend(parser_backend: ParserBackend) -> None:
    global _backend
    _backend = ParserBackend(parser_backend)


def get_default_trace_parsing_backend() -> ParserBackend:
    return _backend


__all__ = ["ParserBackend", "get_default_trace_parsing_backend", "set_default_trace_parsing_backend"]
