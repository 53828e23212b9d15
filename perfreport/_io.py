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

try:  # ISA-L decompresses gzip about twice as fast as zlib; zlib is the fallback.
    from isal import igzip as _gzip
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a declared dependency
    _gzip, _zlib = gzip, zlib  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def read_trace_bytes(path: Path, *, allow_mmap: bool = False) -> bytes | mmap.mmap:
    """The uncompressed bytes of a ``.json`` or ``.json.gz`` file (detected by content).

    With ``allow_mmap``, a plain (not gzipped) file comes back as a read-only ``mmap.mmap`` of
    it instead of a copy in memory (both are buffers: msgspec and the scanner read either); the
    caller closes it (``close()`` fails while a view into it, e.g. a ``msgspec.Raw``, is alive).
    Files that cannot be mapped (pipes, /proc) are read as usual.

    Raises TraceError naming the file for unreadable, empty or truncated/corrupt gzip input.
    """
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
        raise TraceError(path, f"cannot read file ({exc.strerror})") from None
    if not data:
        raise TraceError(path, "file is empty")
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return gunzip(data)
    except EOFError:
        raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
    except Exception as exc:  # zlib.error, isal's IsalError, OSError: all mean a corrupt stream
        if "truncated" in str(exc) or "incomplete" in str(exc):
            raise TraceError(path, "truncated gzip file (unexpected end of data)") from None
        raise TraceError(path, f"corrupt gzip file ({exc})") from None


def gunzip(data: bytes) -> bytes:
    """Decompress gzip data. The one-shot decoder is the fastest but reads only the first
    member; the gzip trailer tells whether that was all, else the multi-member reader runs."""
    out = _zlib.decompress(data, wbits=31)
    last_member_size = struct.unpack("<I", data[-4:])[0]
    if len(out) % (1 << 32) == last_member_size:
        return out
    return _gzip.decompress(data)


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


def _numpy_hook(value):
    """msgspec encoder hook: numpy scalars and arrays as plain Python values."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    raise NotImplementedError(type(value).__name__)


def json_text(value) -> str:
    """Stable, readable JSON (sorted keys off: the order of sections is meaningful).

    Encoded by msgspec in C (NaN and inf become null there too): the standard library's
    indenting encoder is pure Python and took ~0.1 s per 10 MB report, twice per command.
    Values it cannot take directly (numpy keys) go through :func:`_plain` first."""
    import msgspec

    try:
        raw = msgspec.json.encode(value, enc_hook=_numpy_hook)
    except (TypeError, NotImplementedError):
        raw = msgspec.json.encode(_plain(value))
    return msgspec.json.format(raw, indent=2).decode() + "\n"
