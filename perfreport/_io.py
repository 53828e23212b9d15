"""Reading (possibly gzipped) trace files and writing outputs atomically."""

from __future__ import annotations

import gzip
import json
import math
import mmap
import os
import struct
import zlib
from pathlib import Path

from .errors import TraceError
from .limits import GiB, Limits, how_to_raise
from .limits import current as current_limits

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
    try:
        with open(path, "rb") as f:
            if allow_mmap:
                try:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # empty (ValueError), or not a regular file
                    mapped = None
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
    if data[:2] != GZIP_MAGIC:
        return data
    limit = limits.decompressed_limit(len(data))
    try:  # (the ISIZE trailer cannot tell early: in a truncated file it is arbitrary bytes)
        return gunzip(data, limit)
    except DecompressionLimit:
        raise TraceError(path, _too_large(len(data), limit, limits)) from None
    except EOFError:
        raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
    except Exception as exc:  # zlib.error, isal's IsalError, OSError: all mean a corrupt stream
        if "truncated" in str(exc) or "incomplete" in str(exc):
            raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
        raise TraceError(path, f"corrupt gzip file ({exc})") from None


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

    One streaming decoder per member, asked for at most the bytes left under the limit: the
    output never grows past the limit (DecompressionLimit), and as fast as the one-shot decoder.
    Raises EOFError for a truncated stream; zero padding after the last member is ignored.
    """
    limit = (1 << 62) if limit is None else limit
    parts, total, rest = [], 0, data
    while rest:
        d = _zlib.decompressobj(wbits=31)
        chunk = d.decompress(rest, limit - total + 1)
        total += len(chunk)
        if total > limit:
            raise DecompressionLimit
        if not d.eof:
            raise EOFError("truncated gzip file")
        parts.append(chunk)
        rest = d.unused_data
        if rest[:2] != GZIP_MAGIC and not rest.strip(b"\0"):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def uncompressed_size(path: Path) -> int:
    """Size of the JSON text: the gzip ISIZE trailer (mod 4 GiB, so at least the file size)."""
    size = path.stat().st_size
    if size >= 18 and is_gzip(path):
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            isize = struct.unpack("<I", f.read(4))[0]
        # ISIZE wraps at 4 GiB; a compressed file is never larger than ~its text.
        while isize < size:
            isize += 1 << 32
        return isize
    return size


def sha256_file(path: Path) -> str:
    import hashlib  # OpenSSL: a few MB of RSS, only paid by the commands that need checksums

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``: never half-written."""
    import tempfile  # imported here: loading traces never writes, and this keeps it lean

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _plain(value):
    """JSON-ready Python value: numpy scalars/arrays unwrapped, NaN/inf -> None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar / array
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(value) -> str:
    """Stable, readable JSON (sorted keys off: the order of sections is meaningful)."""
    return json.dumps(_plain(value), indent=2, ensure_ascii=False) + "\n"
