"""HTA's ``hta.common`` module paths (``trace``, ``trace_parser``) over perfreport's loader, so
code written as ``from hta.common.trace import Trace`` runs with ``perfreport.hta.common``."""

from . import constants, trace, trace_parser

__all__ = ["constants", "trace", "trace_parser"]
