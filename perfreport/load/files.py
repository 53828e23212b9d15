"""Reading a trace file's bytes within limits: a plain ``.json`` memory-mapped, a ``.json.gz``
decompressed (ISA-L when installed) with a bound against gzip bombs, in a worker a small one into
a buffer kept for its next rank; its uncompressed size without reading it (checksums:
:mod:`perfreport.load.checksums`)."""

from __future__ import annotations

import gzip
import mmap
import os
import struct
import threading
import zlib
from pathlib import Path

from ..errors import TraceError
from ..timing import phase
from ..limits import GiB, Limits, how_to_raise
from ..limits import current as current_limits

try:  # ISA-L decompresses gzip about twice as fast as zlib; zlib is the fallback.
    from isal import igzip as _gzip
    from isal import igzip_lib as _igzip
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip, _zlib, _igzip = gzip, zlib, None  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


REUSED_TEXT_MAX = 64 << 20
"""The largest decompressed text :func:`read_trace_bytes` puts in a reused buffer (``reuse``):
a larger rank's text is handed back to the kernel page by page as it is scanned (its peak
would otherwise grow by the whole text), and its decompression is a smaller share of its load."""
STREAM_FROM = REUSED_TEXT_MAX
"""A gzipped text of more than this many bytes is scanned as it is decompressed (``stream``:
:mod:`perfreport.load.streamed`), not decompressed whole first."""
_texts = threading.local()  # .buffer: this thread's reused text buffer (a bytearray)
_reusing = False


def reuse_texts() -> None:
    """Let the loader decompress small gzipped ranks into a buffer each thread keeps
    (:func:`read_trace_bytes`'s ``reuse``): for a process that loads rank after rank (a local
    worker; never undone there)."""
    global _reusing
    _reusing = True


def reused_texts() -> bool:
    """Whether this process reuses its text buffers (:func:`reuse_texts`)."""
    return _reusing


def read_trace_bytes(path: Path, *, allow_mmap: bool = False, limits: Limits | None = None,
                     reuse: bool = False, stream: bool = False):
    """The uncompressed bytes of a ``.json`` or ``.json.gz`` file (detected by content).

    With ``allow_mmap``, a plain (not gzipped) file comes back as a read-only ``mmap.mmap`` of
    it instead of a copy in memory (both are buffers: msgspec and the scanner read either); the
    caller closes it (``close()`` fails while a view into it, e.g. a ``msgspec.Raw``, is alive).
    Files that cannot be mapped (pipes, /proc) are read as usual.

    Gzip data is decompressed with a bound (``limits``, default :func:`perfreport.limits.current`):
    a gzip bomb stops at the limit instead of filling memory. With ``reuse``, a text of up to
    :data:`REUSED_TEXT_MAX` comes back as a ``memoryview`` of a buffer this thread keeps, valid
    until its next such read: for a worker that loads rank after rank and keeps nothing of a
    text after its scan. Each 50 MB rank's text otherwise lands on 12,200 fresh pages: one
    decompressed six times took 31.6-34.2 ms each, against 15.6-17.6 ms through the streaming
    decoder into the kept buffer (3 runs). 16 gzipped ranks of 50 MB, two batches of 4-6 alternating pairs: `analyze`
    1.89-1.98 -> 1.78-1.90 s and 1.99-2.17 -> 1.89-2.10 s, `compare` of two such jobs 5.22-5.57 ->
    5.00-5.22 s and 5.40-6.07 -> 5.16-5.85 s; each worker's peak 154 -> 196 MB (its text is not
    handed back page by page during the scan, and the buffer stays).

    With ``stream``, a larger gzipped text comes back as a
    :class:`~perfreport.load.streamed.StreamedText` being decompressed on a thread, for a scan
    that follows it (the caller falls back to this function without ``stream`` where that scan
    gives nothing).

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
    if stream:
        from . import streamed

        size = text_size(len(data), _trailer_size(data))
        reused = reuse and size <= REUSED_TEXT_MAX  # (into the kept buffer below)
        if streamed.available() and STREAM_FROM < size <= limit and not reused:
            return streamed.StreamedText(data, size, limit)
    try:  # (the ISIZE trailer cannot tell early: in a truncated file it is arbitrary bytes)
        with phase("decompress"):
            if reuse and _trailer_size(data) <= min(limit, REUSED_TEXT_MAX):
                reused = _gunzip_reusing(data, limit)
                if reused is not None:
                    return reused
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
REUSE_CHUNK = 1 << 16
"""Bytes per call of :func:`_gunzip_reusing`'s decoder (each copied into the reused buffer)."""


def _trailer_size(data: bytes) -> int:
    """The gzip ISIZE trailer: the last member's uncompressed size mod 4 GiB (a hint only)."""
    return int.from_bytes(data[-4:], "little") if len(data) >= 18 else 0


def _gunzip_reusing(data: bytes, limit: int) -> memoryview | None:
    """:func:`gunzip` of a one-member stream into this thread's reused buffer: a view of the
    text, valid until this thread decompresses the next one. None where the stream is not one
    whole member whose text fits the buffer's bound, or without ISA-L's streaming decoder (the
    caller decompresses it as usual). The decoder keeps the input (no copy of what is left of
    it per call) and hands the text back in pieces of :data:`REUSE_CHUNK` bytes, below glibc's
    mmap threshold: they come from the heap, and the buffer's pages are the previous rank's."""
    if _igzip is None:
        return None
    size = _trailer_size(data)
    buffer = getattr(_texts, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _texts.buffer = bytearray(max(size, 1))  # (a view of the old one may still be alive)
    view, bound = memoryview(buffer), min(len(buffer), limit)
    d = _igzip.IgzipDecompressor(flag=_igzip.DECOMP_GZIP)
    n, chunk = 0, d.decompress(data, REUSE_CHUNK)
    while True:
        if n + len(chunk) > bound:
            return None
        view[n:n + len(chunk)] = chunk
        n += len(chunk)
        if d.eof:
            break
        chunk = d.decompress(b"", REUSE_CHUNK)
        if not chunk and d.needs_input:  # the stream ends early
            raise EOFError("truncated gzip file")
    if d.unused_data.strip(b"\0"):
        return None  # several members: the streaming reader takes them
    return view[:n]


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
    return text_size(size, isize)


def text_size(compressed: int, isize: int) -> int:
    """The text size of a ``compressed``-byte gzip file whose trailer says ``isize``.

    ISIZE wraps at 4 GiB. Past that, the text is >= 4 GiB while deflate shrinks it at most
    ~1,032:1, so the file is >= 4 MB; a small file may be larger than its text (the gzip
    header, the stored file name and the trailer: a 30-byte gzip of '{"foo": 1}' holds 10
    bytes), which is no wrap. Only a file clearly larger than its ISIZE has wrapped."""
    while isize + (isize >> 10) + _GZIP_SLACK < compressed:
        isize += 1 << 32
    return isize


_GZIP_SLACK = 1 << 16
"""Bytes a gzip file may hold beyond its deflated text: header (with a file name and extra
field), trailer and the blocks' own overhead (~5 bytes per 64 KB is in ``isize >> 10``)."""
