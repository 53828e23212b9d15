"""One Kineto trace file -> one :class:`RankTrace`.

The file is decompressed once (a plain ``.json`` is memory-mapped, not copied) and read in one
pass by the C scanner, which scans ``traceEvents`` in place and gives the byte spans of the other
top-level members (metadata, decoded with msgspec). Without the extension, or when that pass
rejects the file, the top level is split with msgspec into raw values and ``traceEvents`` handed
to the scanner as raw JSON text (so errors are worded the same either way). The scanner's
columns are then turned into the model's (:mod:`.columns`).
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..load.files import read_trace_bytes, reused_texts
from ..errors import TraceError
from ..limits import Limits
from ..limits import current as current_limits
from ..running.heap import hugepage_switch, keep_freed_pages
from ..timing import phase
from ..model import RankTrace, TraceMeta
from .columns import build_rank_trace, ts_origin_us
from .discover import RankFile
from .fields import ScanResult
from .memory import check_memory
from .sanitize import check_sizes, drop_absurd
from .scan_py import decode_lenient, not_utf8
from .scanner import scan, scan_document
from .streamed import StreamedText

UTF8_BOM = b"\xef\xbb\xbf"
_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


def load_rank_file(rank_file: RankFile, limits: Limits | None = None) -> RankTrace:
    """Load one rank file. Raises TraceError naming the file for anything unusable.

    ``limits`` (default: :func:`perfreport.limits.current`) bound the memory, decompression,
    event count and string length; events with absurd times are dropped (see :mod:`.sanitize`).
    """
    return load_rank_file_hashed(rank_file, limits, checksum=False)[0]


def load_rank_file_hashed(rank_file: RankFile, limits: Limits | None = None,
                          checksum: bool = True) -> tuple[RankTrace, str | None]:
    """:func:`load_rank_file`, and with ``checksum`` the file's checksum (:mod:`.checksums`)
    where the scan computed it as it read the file, in the same pass: a plain JSON file, which
    is mapped, not copied (a compressed file's checksum is of its compressed bytes, which the
    scan never sees). None where it did not (the caller hashes the file itself)."""
    path = rank_file.path
    limits = limits or current_limits()
    check_memory(path, limits)
    data = read_trace_bytes(path, allow_mmap=True, limits=limits, reuse=reused_texts(), stream=True)
    if isinstance(data, StreamedText):
        streamed = _scan_streamed(data)
        json_bytes = data.size
        data.close()
        if streamed is not None:
            return _build(rank_file, path, limits, *streamed, json_bytes)
        data = read_trace_bytes(path, allow_mmap=True, limits=limits, reuse=reused_texts())  # whole, as before
    if data[:3] == UTF8_BOM:
        text = _without_bom(data)  # a copy (rare): the map can go
        _release(data)
        data = text
    json_bytes = len(data)
    try:
        with phase("scan"):  # of a mapped file, this includes reading it (page faults)
            result, metadata, hashed = _scan_trace(path, data, limits, checksum and isinstance(data, mmap.mmap))
    except BaseException:
        _release(data, strict=False)
        raise
    _release(data)  # the raw text is no longer needed: free it before building
    del data
    return _build(rank_file, path, limits, result, metadata, hashed, json_bytes)


def _build(rank_file: RankFile, path: Path, limits: Limits, result: ScanResult, metadata: dict[str, Any],
           hashed: str | None, json_bytes: int) -> tuple[RankTrace, str | None]:
    """The rank's trace from its scanned columns and top-level metadata (the decode)."""
    with phase("decode"), _plain_pages():
        keep_freed_pages(result.n_events)  # the decode's temporaries reused, and left for the analyses
        check_sizes(path, result, limits)
        result, dropped = drop_absurd(result, limits)
        meta = _make_meta(rank_file, metadata, json_bytes, ts_origin_us=ts_origin_us(result))
        if dropped:
            meta = replace(meta, dropped=dropped)
        return build_rank_trace(result, meta), hashed


@contextmanager
def _plain_pages() -> Iterator[None]:
    """Build the columns on ordinary 4 KB pages: numpy asks for transparent huge pages under
    every array of 4 MB or more, and where memory is fragmented the kernel then compacts it on
    first touch to find 2 MB pages. On the 2-core test VM that made the decode of a 1 GB trace
    spend 0.4-0.6 s in the kernel instead of 0.2 s (measured both ways, same run). The decode
    writes each column once, so it gains nothing from huge pages. numpy's setting is restored
    afterwards; without the (private) switch, nothing changes."""
    switch = hugepage_switch()
    if switch is None:
        yield
        return
    previous = switch(False)
    try:
        yield
    finally:
        switch(previous)


def _without_bom(data):
    """The text without a leading UTF-8 byte-order mark (written by some Windows tools; JSON
    parsers reject it), as bytes: a copy when there is one."""
    return data[3:] if data[:3] == UTF8_BOM else data


def _release(data: bytes | mmap.mmap, strict: bool = True) -> None:
    """Unmap a memory-mapped trace. Nothing loaded refers to its memory (the scanners copy what
    they keep), so closing cannot fail, except (``strict=False``) while an error is propagating
    whose traceback still holds a view: the map then goes with the error."""
    if isinstance(data, mmap.mmap):
        try:
            data.close()
        except BufferError:
            if strict:
                raise


def _scan_trace(path: Path, data, limits: Limits,
                checksum: bool = False) -> tuple[ScanResult, dict[str, Any], str | None]:
    """The columns of the trace's events, its decoded top-level metadata and, with ``checksum``,
    the checksum of ``data`` where the one-pass scan computed it (else None)."""
    if _is_array_form(data):
        result = _scan_array_form(path, data)
        _require_events(path, result)
        return result, {}, None
    one_pass = _scan_one_pass(data, checksum)
    if one_pass is not None:
        return one_pass
    if not isinstance(data, mmap.mmap):  # the scan may have zeroed pages of the events: read again
        data = _without_bom(read_trace_bytes(path, limits=limits))
    # No C extension, or it rejected the file: split with msgspec, then scan traceEvents. For a
    # bad file this raises the same TraceError as before there was a one-pass scanner.
    top = _split_top_level(path, data)
    raw_events = top.pop("traceEvents")
    metadata, error = _decode_values(top)
    if error is None:
        try:
            result = scan(raw_events)
        except ValueError as exc:
            error = f"invalid JSON in traceEvents ({exc})"
    del top, raw_events  # views into ``data``: none may outlive this call (see _release)
    if error is not None:
        raise TraceError(path, error)
    return result, metadata, None


def _scan_streamed(text: StreamedText) -> tuple[ScanResult, dict[str, Any], None] | None:
    """:func:`_scan_one_pass` of a gzipped text as it is decompressed (:mod:`.streamed`); None
    where that cannot be trusted (the caller then decompresses it whole and scans it again)."""
    def one_pass(buffer, feed):
        return scan_document(buffer, release=True, feed=feed)

    with phase("scan"):
        done = text.scan(one_pass)
    if done is None:
        return None
    result, members, _ = done
    try:
        return result, _members_metadata(text.buffer, members), None
    except ValueError:
        return None


def _scan_one_pass(data, checksum: bool = False) -> tuple[ScanResult, dict[str, Any], str | None] | None:
    """One pass of the C scanner over the whole text, then msgspec on the metadata values only;
    None when the extension is absent or anything is wrong (then the two-pass path decides).

    The scanner hands the events' pages back as it goes (``release``), so the text is never
    resident whole beside the columns: a mapped file's pages come back from the page cache, and
    decompressed text is this load's own, its events array read by nothing after the scan (the
    caller reads the file again before the two-pass path re-parses it). A text in a worker's
    reused buffer (a ``memoryview``: :func:`perfreport.load.files.read_trace_bytes`) keeps its
    pages for the next rank. ``checksum``: the scan hashes the text as it reads it (the third
    item; None without)."""
    try:
        done = scan_document(data, release=not isinstance(data, memoryview), checksum=checksum)
        if done is None:
            return None
        result, members, hashed = done
        return result, _members_metadata(data, members), hashed
    except ValueError:  # includes msgspec.DecodeError and UnicodeDecodeError
        return None


def _members_metadata(data, members: list) -> dict[str, Any]:
    """The top-level members' values, decoded from their spans in ``data`` (never handed back by
    the scan). Duplicate keys: the last wins, in the first one's place (as msgspec). Slicing
    copies (bytes or mmap alike): the decoded values hold no view into ``data``."""
    return {key: decode_lenient(data[start:end]) for key, (start, end) in dict(members).items()}


def _require_events(path: Path, result: ScanResult) -> None:
    """A bare JSON list is a trace only when some entry is an event (an object with a phase,
    ``"ph"``): ``[1, 2, 3]`` or ``[]`` is some other JSON file, refused with one line instead of
    an empty analysis."""
    ph = np.asarray(result.top["ph"])
    if not (ph != -1).any():
        what = "an empty JSON array" if len(ph) == 0 else \
            f"a JSON array of {len(ph):,} value(s), none of them a trace event (an object with \"ph\")"
        raise TraceError(path, f"{what}: not a profiler trace (no trace events)")


def _is_array_form(data) -> bool:
    """The Trace Event Format's array form: the file is a bare JSON list of events."""
    return bytes(data[:4096]).lstrip(b" \t\r\n")[:1] == b"["


def _scan_array_form(path: Path, data) -> ScanResult:
    """Scan a bare event list. As chrome://tracing and Perfetto do, a missing closing ``]`` is
    allowed (a producer that was killed, or one that streams events, never writes it)."""
    try:
        return scan(data)
    except ValueError as first_error:
        text = bytes(data).rstrip(b" \t\r\n")
        if text.endswith(b"]"):
            raise TraceError(path, f"invalid JSON in the event list ({first_error}){_literal_hint(data, first_error)}") \
                from None
    try:
        return scan(text.rstrip(b", \t\r\n") + b"]")
    except ValueError as exc:
        raise TraceError(path, f"invalid JSON in the event list ({exc}){_literal_hint(text, exc)}") from None


def _split_top_level(path: Path, data) -> dict[str, msgspec.Raw]:
    try:
        top = _top_decoder.decode(data)
    except msgspec.ValidationError:
        raise TraceError(path, "not a Kineto trace: the top level is not a JSON object") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if not_utf8(exc):  # only the keys are decoded here (one wording whichever msgspec says it)
            raise TraceError(path, "invalid JSON (a top-level key is not UTF-8 text)") from None
        raise TraceError(path, f"invalid JSON ({_short(exc)}){_literal_hint(data, exc)}") from None
    except RecursionError:
        raise TraceError(path, "invalid JSON (nested too deep)") from None
    error = None
    if "traceEvents" not in top:
        error = 'not a Kineto trace: no "traceEvents" key at the top level'
    else:
        first = bytes(memoryview(top["traceEvents"])[:1])
        if first != b"[":
            kind = {b"{": "an object", b'"': "a string", b"n": "null"}.get(first, "not a list")
            error = f'not a Kineto trace: "traceEvents" is {kind}, expected a list'
    if error is not None:
        del top  # its Raw values are views into ``data``: not kept alive by the traceback
        raise TraceError(path, error)
    return top


def _literal_hint(data, exc: Exception) -> str:
    """A hint when the JSON error is at a NaN or Infinity literal: Python's json.dumps writes
    them by default, but they are not JSON (and a trace with them has no usable number there)."""
    m = re.search(r"byte (\d+)", str(exc))
    if m and bytes(data[int(m.group(1)):int(m.group(1)) + 9]).lstrip(b"-").startswith((b"NaN", b"Infinity")):
        return "; NaN and Infinity are not valid JSON: write null (or a number) instead"
    return ""


def _short(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _decode_values(top: dict[str, msgspec.Raw]) -> tuple[dict[str, Any], str | None]:
    """The decoded metadata values, and the error message of the first that does not decode."""
    metadata: dict[str, Any] = {}
    for key, raw in top.items():
        try:
            metadata[key] = decode_lenient(raw)
        except msgspec.DecodeError as exc:  # e.g. "Number out of range": the split only skims values
            return metadata, f"invalid JSON in {key!r} ({_short(exc)})"
    return metadata, None


def _make_meta(rank_file: RankFile, metadata: dict[str, Any], json_bytes: int, ts_origin_us: int) -> TraceMeta:
    dist = metadata.pop("distributedInfo", None)
    dist = dist if isinstance(dist, dict) else {}
    rank, source = resolve_rank(rank_file, dist)
    devices = metadata.pop("deviceProperties", None)
    base = metadata.pop("baseTimeNanoseconds", None)
    return TraceMeta(
        path=str(rank_file.path),
        rank=rank,
        rank_source=source,
        json_bytes=json_bytes,
        ts_origin_us=ts_origin_us,
        schema_version=metadata.pop("schemaVersion", None),
        distributed_info=dist,
        device_properties=devices if isinstance(devices, list) else [],
        base_time_ns=int(base) if isinstance(base, (int, float)) else None,
        display_time_unit=metadata.pop("displayTimeUnit", None),
        trace_name=metadata.pop("traceName", None),
        other=metadata,
    )


MAX_RANK = 2**31 - 1
"""Largest rank a trace may claim (world sizes are int32 in torch.distributed)."""


def resolve_rank(rank_file: RankFile, distributed_info: dict) -> tuple[int, str]:
    """Rank of a file: an explicit mapping, else ``distributedInfo.rank``, else the file name, else 0."""
    if rank_file.hint_source == "mapping":
        return int(rank_file.rank_hint), "mapping"
    rank = distributed_info.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        if rank > MAX_RANK:
            raise TraceError(rank_file.path, f"distributedInfo.rank {rank:.3g} is beyond any job (at most {MAX_RANK:,})")
        return rank, "distributedInfo"
    if rank_file.rank_hint is not None:
        return rank_file.rank_hint, "file name"
    return 0, "default"
