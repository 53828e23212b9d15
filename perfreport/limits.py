"""Resource limits: how much a trace may make perfreport decompress, allocate and keep.

A CI gate reads traces nobody checked. These limits turn a crafted or broken file (a gzip bomb,
a 10 MB kernel name, a billion events) into one clear error line instead of an out-of-memory
kill, and each error says which limit was hit and how to raise it. Defaults are generous: real
traces of 1–5 GB per rank stay far below every one of them.

Limits are set with ``--limit NAME=VALUE`` on the command line (repeatable) or the environment
variable ``PERFREPORT_LIMITS="NAME=VALUE,NAME=VALUE"``. The CLI writes its ``--limit`` values into
that variable (see :func:`override`), so every loading process inherits them: local workers and
Dask workers alike, without passing them through each call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace

from .errors import ConfigError

ENV = "PERFREPORT_LIMITS"
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits in force (see README "Errors" for the user's view)."""

    gzip_ratio: float = 100.0
    """A ``.json.gz`` may decompress to at most this many times its own size (JSON traces
    compress 10–30×; a gzip bomb 1000×)."""
    gzip_max_gb: float = 64.0
    """…and to at most this many GiB, whatever its size."""
    max_events: int = 500_000_000
    """Events per rank file (a 5 GB trace holds ~30 million)."""
    max_name_kb: float = 1024.0
    """Longest string value (event name, category, string arg) in KiB; C++ template kernel
    names reach ~30 KiB."""
    max_span_s: float = 86_400.0
    """An event lasting longer than this, or whose start a gap this long separates from the rest
    of the rank, is absurd (1e308 µs, a negative or garbage timestamp): it is dropped and counted
    in a note. A trace that runs for longer without such a gap keeps its events."""
    memory_check: bool = True
    """Refuse to load a rank whose estimated peak memory exceeds the free memory."""

    def decompressed_limit(self, compressed_bytes: int) -> int:
        """Most bytes a gzip file of ``compressed_bytes`` may decompress to."""
        return int(min(self.gzip_ratio * max(compressed_bytes, 1), self.gzip_max_gb * GiB, 2.0 ** 62))

    @property
    def max_name_chars(self) -> int:
        return int(self.max_name_kb * 1024)

    @property
    def max_span_us(self) -> float:
        return self.max_span_s * 1e6


def how_to_raise(name: str, example: object) -> str:
    """The hint every limit error ends with."""
    return f"raise it with --limit {name}={example} (or {ENV}={name}={example})"


def parse(text: str, base: Limits | None = None) -> Limits:
    """``"gzip_ratio=200,max_events=1e9"`` -> Limits (unknown names and bad values: ConfigError)."""
    limits = base or Limits()
    known = {f.name: f for f in fields(Limits)}
    for item in filter(None, (part.strip() for part in text.replace(";", ",").split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in known:
            raise ConfigError(f"limit {item!r}: expected NAME=VALUE with NAME one of {', '.join(known)}")
        limits = replace(limits, **{name: _value(name, value, known[name].type)})
    return limits


def _value(name: str, text: str, kind: object) -> float | int | bool:
    if kind in (bool, "bool"):
        if text.lower() in ("1", "true", "on", "yes"):
            return True
        if text.lower() in ("0", "false", "off", "no"):
            return False
        raise ConfigError(f"limit {name}={text!r}: expected on or off")
    try:
        number = float(text)
    except ValueError:
        raise ConfigError(f"limit {name}={text!r}: expected a number") from None
    if not 0 < number <= MAX_VALUE:
        raise ConfigError(f"limit {name}={text!r}: expected a positive number up to {MAX_VALUE:g}")
    if kind in (int, "int"):
        if number < 1 or number != int(number):
            raise ConfigError(f"limit {name}={text!r}: expected a whole number, at least 1")
        return int(number)
    return number


MAX_VALUE = 1e15
"""Largest value of a limit: past it a limit means nothing, and sizes computed from it must stay
inside int64."""


_cache: tuple[str, Limits] | None = None


def current() -> Limits:
    """The limits in force in this process: the defaults overridden by ``$PERFREPORT_LIMITS``."""
    global _cache
    text = os.environ.get(ENV, "")
    if _cache is None or _cache[0] != text:
        try:
            _cache = (text, parse(text))
        except ConfigError as exc:
            raise ConfigError(f"{ENV}: {exc}") from None
    return _cache[1]


@contextmanager
def override(items: list[str]) -> Iterator[Limits]:
    """Apply ``NAME=VALUE`` items on top of the current limits for the duration of the block.

    They are exported in ``$PERFREPORT_LIMITS`` (restored afterwards), so worker processes
    started inside the block inherit them."""
    limits = parse(",".join(items), current()) if items else current()
    saved = os.environ.get(ENV)
    if items:
        os.environ[ENV] = ",".join(f"{f.name}={getattr(limits, f.name)}" for f in fields(Limits))
    try:
        yield limits
    finally:
        if items:
            if saved is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = saved
