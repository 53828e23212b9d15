"""Reading a trace file's bytes within limits: a plain ``.json`` memory-mapped, a ``.json.gz``
decompressed (ISA-L when installed) with a bound against gzip bombs; its uncompressed size
without reading it (checksums: :mod:`perfreport.load.checksums`)."""

from __future__ import annotations

import gzip
import mmap
import os
import struct
import zlib
from pathlib import Path

from ..errors import TraceError
from ..timing import phase
from ..limits import GiB, Limits, how_to_raise
from ..limits import current as current_limits

try:  # ISA-L decompresses gzip about twice as fast as zlib; zlib is the fallback.
    from isal import igzip as _gzip
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip, _zlib = gzip, zlib  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def read_trace_bytes(path: Path, *, allow_mmap: bool = False, limits: Limits | None = None) -> bytes | mmap.mmap:
    """The uncompressed bytes of a ``.json`` or ``.json.gz`` file (detected by content).

    With ``allow_mmap``, a plain (not gzipped) file comes back as a read-only ``mmap.mmap`` of
    it instead of a copy in memory (both are buffers: msgspec and the scanner read either); the
    caller closes it (``close()`` fails while a view into it, e.g. a ``msgspec.Raw``, is alive).
    Files that cannot be mapped (pipes, /proc) are read as usual.

    Gzip data is decompressed with a bound (``limits``, default :func:`perfreport.limits.current`):
    a gzip bomb stops at the limit instead of filling memory.

    Raises TraceError naming the file for unreadable, empty, truncated/corrupt or too large input.
    """
    limits = limits or current_limits()
    with phase("read"):
        data = _read_or_map(path, allow_mmap)
    if isinstance(data, mmap.mmap):
        return data
    if data[:2] != GZIP_MAGIC:
        return data
    limit = limits.decompressed_limit(len(data))
    try:  # (the ISIZE trailer cannot tell early: in a truncated file it is arbitrary bytes)
        with phase("decompress"):
            return gunzip(data, limit)
    except DecompressionLimit:
        raise TraceError(path, _too_large(len(data), limit, limits)) from None
    except EOFError:
        raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
    except Exception as exc:  # zlib.error, isal's IsalError, OSError: all mean a corrupt stream
        if "truncated" in str(exc) or "incomplete" in str(exc):
            raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
        raise TraceError(path, f"corrupt gzip file ({exc})") from None


def _read_or_map(path: Path, allow_mmap: bool) -> bytes | mmap.mmap:
    """The file's bytes: a read-only map of a plain file (``allow_mmap``), else read whole.
    Raises TraceError naming the file when it cannot be read or is empty."""
    try:
        with open(path, "rb") as f:
            if allow_mmap:
                mapped = _mapped(f)
                if mapped is not None:
                    if mapped[:2] != GZIP_MAGIC:
                        return mapped
                    mapped.close()
            data = f.read()
    except FileNotFoundError:
        raise TraceError(path, "file not found") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read file ({exc.strerror or exc})") from None
    if not data:
        raise TraceError(path, "file is empty")
    return data


def _mapped(f) -> mmap.mmap | None:
    """A read-only map of the open file ``f``; None where it cannot be mapped (an empty file, a
    pipe, /proc): the caller reads it instead."""
    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # empty (ValueError), or not a regular file
        return None


class DecompressionLimit(Exception):
    """Gzip data decompresses to more than the limit it was given."""


def _too_large(compressed: int, limit: int, limits: Limits) -> str:
    which = ("gzip_max_gb", limits.gzip_max_gb * 2) if limit >= limits.gzip_max_gb * GiB else \
        ("gzip_ratio", limits.gzip_ratio * 10)
    return (f"gzip data expands to more than {limit:,} bytes, the limit for a {compressed:,}-byte file "
            f"({limits.gzip_ratio:g}x its size, at most {limits.gzip_max_gb:g} GiB): a gzip bomb? If the file "
            f"is genuine, {how_to_raise(which[0], f'{which[1]:g}')}")


def gunzip(data: bytes, limit: int | None = None) -> bytes:
    """Decompress gzip data (every member), at most ``limit`` bytes of output.

    The first member is decoded in one call asked for at most ``limit + 1`` bytes, so the
    output never grows past the limit (DecompressionLimit) and it runs as fast as the one-shot
    decoder. Several members (``cat a.gz b.gz``) are read by the streaming reader, in chunks,
    under the same limit. Raises EOFError for a truncated stream, ValueError for data after the
    last member; zero padding there is ignored.
    """
    limit = (1 << 62) if limit is None else limit
    d = _zlib.decompressobj(wbits=31)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise DecompressionLimit
    if not d.eof:
        raise EOFError("truncated gzip file")
    rest = d.unused_data
    if not rest.strip(b"\0"):
        return out
    if rest[:2] != GZIP_MAGIC:
        raise ValueError("data after the end of the gzip stream")
    del out, rest
    import io

    chunks, total = [], 0
    with _gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
        while chunk := f.read(CHUNK):
            total += len(chunk)
            if total > limit:
                raise DecompressionLimit
            chunks.append(chunk)
    return b"".join(chunks)


CHUNK = 1 << 24
"""Bytes per read of the multi-member gzip reader."""


def uncompressed_size(path: Path) -> int:
    """Size of the JSON text: the gzip ISIZE trailer (mod 4 GiB, so at least the file size).
    An estimate for planning (workers, memory): 0 for a file that cannot be read (reading it
    then reports why)."""
    try:
        size = path.stat().st_size
        if size < 18 or not is_gzip(path):
            return size
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            isize = struct.unpack("<I", f.read(4))[0]
    except OSError:
        return 0
    # ISIZE wraps at 4 GiB. Past that, the text is >= 4 GiB while deflate shrinks it at most
    # ~1,032:1, so the file is >= 4 MB; a small file may be larger than its text (the gzip
    # header, the stored file name and the trailer: a 30-byte gzip of '{"foo": 1}' holds 10
    # bytes), which is no wrap. Only a file clearly larger than its ISIZE has wrapped.
    while isize + (isize >> 10) + _GZIP_SLACK < size:
        isize += 1 << 32
    return isize


_GZIP_SLACK = 1 << 16
"""Bytes a gzip file may hold beyond its deflated text: header (with a file name and extra
field), trailer and the blocks' own overhead (~5 bytes per 64 KB is in ``isize >> 10``)."""
