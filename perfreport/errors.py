"""The one error tree of perfreport. The CLI catches :class:`PerfreportError` once, prints its
message as a single line and exits with code 2; anything else is a bug.

    PerfreportError
    ├── TraceError      a trace file or folder cannot be used (missing, truncated, not Kineto …)
    ├── ConfigError     a configuration file or option is invalid
    └── BaselineError   a stored baseline is missing, corrupt or incompatible
"""

from __future__ import annotations


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
