"""The one error tree of perfreport. The CLI catches :class:`PerfreportError` once, prints its
message as a single line and exits with code 2; anything else is a bug.

    PerfreportError
    ├── TraceError      a trace file or folder cannot be used (missing, truncated, not Kineto …)
    ├── ConfigError     a configuration file or option is invalid
    ├── BaselineError   a stored baseline is missing, corrupt or incompatible
    ├── GitHubError     the GitHub API or the CI environment refused what was asked
    └── ArchiveError    a release archive cannot be read or updated
"""

from __future__ import annotations

import logging


class PerfreportError(Exception):
    """Base of every error perfreport raises on purpose; its message is shown to the user."""


class TraceError(PerfreportError):
    """A trace input cannot be loaded. The message names the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # picklable: a worker process or Dask task raises it to the parent
        return (type(self), (self.path, self.problem))


class ConfigError(PerfreportError):
    """A configuration value is unknown or invalid."""


class BaselineError(PerfreportError):
    """A stored baseline cannot be used."""


class GitHubError(PerfreportError):
    """The GitHub API refused or failed a request, or the CI environment lacks what is needed.
    ``status`` is the HTTP status (0 when no response came back)."""

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


class ArchiveError(PerfreportError):
    """A release archive (site folder) cannot be read or updated."""


_UNPRINTABLE = None


def printable(text: object) -> str:
    """``text`` safe to print on one terminal line: line breaks, ANSI escapes and every other
    control or invisible formatting character shown escaped (``\\n``, ``\\x1b``, ``\\u202e``), and a name
    that is not UTF-8 (surrogates) too, so a file name cannot forge a second ``perfreport: error:`` line or repaint the terminal."""
    global _UNPRINTABLE
    if _UNPRINTABLE is None:
        import re

        _UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")
    text = str(text)
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class OneLineFormatter(logging.Formatter):
    """Log lines (warnings, notes) through :func:`printable`: one line each, whatever the
    file names in them hold."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
