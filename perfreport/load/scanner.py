"""Choose the scanner: the C extension when it was built, else the pure-Python reference."""

from __future__ import annotations

import mmap

import numpy as np

from ..model import SparseColumn
from ..timing import nested
from .checksums import CHECKSUM
from .fields import ARG_FIELDS, TOP_FIELDS, ScanResult

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # the extension is optional: no compiler at install time
    _scan = None
if _scan is not None and not set("fins") <= set(getattr(_scan, "KINDS", "")):
    _scan = None  # a stale build from before the current contract: use the reference scanner

_DTYPES = {"f": np.float64, "i": np.int64, "s": np.int32, "n": np.int64}
_ROWS = np.dtype(f"=i{getattr(_scan, 'ROWS_BYTES', 8)}")
"""The args' rows: int32 (an older build wrote int64; the decode narrows those)."""


def scan_c(events_json) -> ScanResult:
    """Run the C scanner and wrap its byte buffers as numpy columns (writable: see build_rank_trace)."""
    return _columns(*_scan.scan(events_json, TOP_FIELDS, ARG_FIELDS))


def scan_document(document, release: bool = False, checksum: bool = False, feed=None):
    """One pass of the C scanner over a whole trace file (the JSON text of its top-level object).

    Returns the columns of its ``traceEvents``, for every other top-level member in file order
    (duplicate keys included) ``(key, (start, end))``: where its value's JSON text is in
    ``document``, and its checksum (below). None when the C extension (or a build of it with
    ``scan_document``) is absent. Raises ValueError for malformed JSON, a top level that is not an
    object, or a missing or non-array ``traceEvents``. Nothing returned refers to ``document``'s
    memory. ``release``: the scanner hands the pages of the ``traceEvents`` array back to the
    kernel as it goes, so the whole text is never resident beside the columns. In a read-only
    ``mmap`` of the file they read from the page cache again if touched later; in the caller's own
    memory (the text of a decompressed file) they read as zeros, so pass it there only for text
    whose events array is not read again. The other members' spans are never handed back.

    The third item, with ``checksum``: ``ALGORITHM:HEX`` of all of ``document``'s bytes
    (:mod:`.checksums`), hashed by the scanner as it reads them (for a mapped file, its checksum
    without reading the file a second time); None without it, or from a build that cannot. The
    hashing's time is a phase of its own inside the scan's ("checksum (in the scan)").

    ``feed``: ``document`` is being written while it is scanned (:mod:`.streamed`); the scan waits
    for its text (without a checksum).
    """
    if _scan is None or not hasattr(_scan, "scan_document"):
        return None
    if release and not isinstance(document, mmap.mmap) and not getattr(_scan, "RELEASE_IN_EVENTS", 0):
        release = False  # a stale build releases from the text's start: only safe in a file mapping
    hashing = checksum and getattr(_scan, "CHECKSUM", None) == CHECKSUM
    if hashing:
        (n, top, rows, values, strings, members), digest, hash_s = _scan.scan_document(
            document, TOP_FIELDS, ARG_FIELDS, release, True)
        nested("checksum (in the scan)", hash_s)
    else:  # (a feed only where there is one: a build from before it takes four arguments)
        more = (release,) if feed is None else (release, False, feed)
        n, top, rows, values, strings, members = _scan.scan_document(document, TOP_FIELDS, ARG_FIELDS, *more)
    result = unique_strings(_columns(n, top, rows, values, strings))
    return result, members, f"{CHECKSUM}:{digest.hex()}" if hashing else None


def _columns(n, top, rows, values, strings) -> ScanResult:
    """The C scanner's column buffers as numpy arrays (no copy: they own them; writable, see
    :func:`~perfreport.load.columns.build_rank_trace`)."""
    return ScanResult(
        n_events=n,
        top={key: np.frombuffer(buf, _DTYPES[kind]) for (key, kind), buf in zip(TOP_FIELDS, top)},
        args={
            key: SparseColumn(rows=np.frombuffer(r, _ROWS), values=np.frombuffer(v, _DTYPES[kind]))
            for (key, kind), r, v in zip(ARG_FIELDS, rows, values)
        },
        strings=strings,
    )


def scan(events_json) -> ScanResult:
    """Columns of a ``traceEvents`` JSON array, by the fastest scanner available."""
    if _scan is not None:
        return unique_strings(scan_c(events_json))
    from .scan_py import scan as scan_py

    return unique_strings(scan_py(events_json))


def unique_strings(result: ScanResult) -> ScanResult:
    """The result with one code per distinct text.

    Scanners intern the *bytes* of a string; text that is not valid UTF-8 is decoded with
    replacement, so two different byte strings (``"k\\xff"``, ``"k\\xfe"``) can become one text
    (``"k\\ufffd"``). The model maps text -> code, so such codes are merged here (rare: only
    traces with invalid UTF-8 pay the remapping).

    Valid UTF-8 decodes one to one, so two texts can only coincide where a replacement character
    U+FFFD is in them: without one in any text (one search of them joined) they are distinct,
    and no set of them is built. A trace of 345,394 strings (a step name each, grown from the
    triton example): 5 ms instead of the set's 37, which hashed every step name for nothing."""
    strings = result.strings
    if "\ufffd" not in "".join(strings) or len(set(strings)) == len(strings):
        return result
    first: dict[str, int] = {}
    remap = np.array([first.setdefault(s, len(first)) for s in strings] + [-1], dtype=np.int32)  # [-1]: missing

    def fix(codes: np.ndarray) -> np.ndarray:
        return remap[codes]  # code -1 (missing) reads the last slot, -1

    s_top = {key for key, kind in TOP_FIELDS if kind == "s"}
    s_args = {key for key, kind in ARG_FIELDS if kind == "s"}
    return ScanResult(
        n_events=result.n_events,
        top={k: fix(v) if k in s_top else v for k, v in result.top.items()},
        args={k: SparseColumn(v.rows, fix(v.values)) if k in s_args else v for k, v in result.args.items()},
        strings=list(first),
    )


def scanner_name() -> str:
    return "c" if _scan is not None else "python"
