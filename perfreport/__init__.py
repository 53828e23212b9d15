"""perfreport: where does the GPU time go, and did this change make it worse?

Reads PyTorch profiler (Kineto) traces, one JSON or JSON.gz file per rank.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import BaselineError, ConfigError, PerfreportError, TraceError  # noqa: E402
from .load import load  # noqa: E402

_LATER = {"RankTrace": "model", "TraceSet": "model", "Config": "config"}
"""Names imported on first use. ``RankTrace`` and ``TraceSet``: importing the package loads no
numpy, so that the command line can set up the process before numpy starts
(:mod:`perfreport.__main__`). ``Config``: its module's dataclasses took 12 of the 29 ms the
package's import took before ``analyze`` forks its head start (:mod:`perfreport.load.head_start`);
the gate reads it later."""


def __getattr__(name: str):
    if name in _LATER:
        from importlib import import_module

        return getattr(import_module(f".{_LATER[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LATER})  # tab completion lists them before first use


def analyze(source, **kwargs):
    """Load ``source`` and run every analysis (see :func:`perfreport.pipeline.analyze`)."""
    from .pipeline import analyze as _analyze

    return _analyze(source, **kwargs)


def compare(baseline, candidate, **kwargs):
    """Gate ``candidate`` against ``baseline`` (see :func:`perfreport.pipeline.compare`)."""
    from .pipeline import compare as _compare

    return _compare(baseline, candidate, **kwargs)


__all__ = ["load", "analyze", "compare", "Config", "PerfreportError", "TraceError", "ConfigError",
           "BaselineError", "RankTrace", "TraceSet", "__version__"]
