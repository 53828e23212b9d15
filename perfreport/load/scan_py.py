"""Pure-Python scanner: the reference implementation of the contract in :mod:`.fields`.

It is used when the C extension ``_scan`` is not built, and by the tests as an independent
check of the C scanner. It decodes each event into a dict of raw JSON values with msgspec and
converts field by field in Python, so it is simple and exact but about ten times slower.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

import msgspec
import numpy as np

from .fields import ARG_FIELDS, INT_MISSING, TOP_FIELDS, ScanResult, SparseColumn

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_WS = b" \t\r\n"


_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_args_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _event(raw: msgspec.Raw) -> dict[str, msgspec.Raw]:
    """An element's keys; a non-object element is an event with every field missing."""
    return _object(raw) if bytes(raw).lstrip()[:1] == b"{" else {}


def _object(raw: msgspec.Raw) -> dict[str, msgspec.Raw]:
    """An object's members as raw values; keys that are not UTF-8 are decoded with replacement."""
    try:
        return _args_decoder.decode(raw)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not not_utf8(exc):
            raise
        return _args_decoder.decode(_replace_invalid_utf8(raw))


def _replace_invalid_utf8(raw: bytes) -> bytes:
    """The text with every invalid UTF-8 sequence replaced by U+FFFD (as ``bytes.decode(errors=
    "replace")`` does). Escapes only ever produce whole characters, so replacing before or after
    unescaping gives the same text: this matches the C scanner, which unescapes first."""
    return bytes(raw).decode("utf-8", "replace").encode("utf-8")


def decode_lenient(raw: bytes):
    """``msgspec.json.decode`` where invalid UTF-8 in strings is replaced instead of fatal."""
    try:
        return msgspec.json.decode(raw)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not not_utf8(exc):
            raise
        return msgspec.json.decode(_replace_invalid_utf8(raw))


def not_utf8(exc: Exception) -> bool:
    """Whether msgspec refused a text for invalid UTF-8: up to 0.19 it raised Python's
    ``UnicodeDecodeError``, from 0.20 a ``DecodeError`` saying so (0.23 on a clean install)."""
    return isinstance(exc, UnicodeDecodeError) or "UTF-8" in str(exc)


def minify(raw: bytes) -> str:
    """JSON text with whitespace outside strings removed (the text interned for non-strings)."""
    if b'"' not in raw:  # no strings in it (most: numbers): every whitespace byte goes
        return raw.translate(None, _WS).decode("utf-8", "replace")
    out = bytearray()
    in_str = escaped = False
    for b in raw:
        if in_str:
            out.append(b)
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
            out.append(b)
        elif b not in _WS:
            out.append(b)
    return out.decode("utf-8", "replace")


def _is_number_text(raw: bytes) -> bool:
    return bool(raw) and (raw[:1].isdigit() or raw[:1] == b"-")


def _parse_int_text(text: str) -> int | None:
    """An integer from a numeric string: hex with 0x, else decimal, else a truncated float."""
    s = text.strip()
    try:
        if s[:2].lower() in ("0x",) or s[:3].lower() in ("-0x", "+0x"):
            return int(s, 16)
        return int(s, 10)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return None
    return int(f) if math.isfinite(f) else None


def to_int(raw: bytes) -> int:
    """Kind ``i`` of one raw JSON value."""
    raw = bytes(raw).strip()
    try:  # most are plain JSON integers (a valid JSON number has no '_' for int() to accept)
        value = int(raw)
    except ValueError:
        return _to_int_other(raw)
    return value if _INT64_MIN < value <= _INT64_MAX else int(INT_MISSING)


def _to_int_other(raw: bytes) -> int:
    """Kind ``i`` of a value that is not a plain integer: a float, a numeric string, or none."""
    value: int | None
    if _is_number_text(raw):
        text = raw.decode()
        if any(c in text for c in ".eE"):
            f = float(text)
            value = int(f) if math.isfinite(f) else None
        else:
            value = int(text)
    elif raw[:1] == b'"':
        value = _parse_int_text(decode_lenient(raw))
    else:
        value = None
    if value is None or not _INT64_MIN < value <= _INT64_MAX:
        return int(INT_MISSING)
    return value


def to_float(raw: bytes) -> float:
    """Kind ``f`` of one raw JSON value."""
    raw = bytes(raw).strip()
    if _is_number_text(raw):
        return float(raw)
    if raw[:1] == b'"':
        s = decode_lenient(raw).strip()
        if s[:2].lower() == "0x" or s[:3].lower() in ("-0x", "+0x"):
            try:
                return float(int(s, 16))
            except ValueError:
                return math.nan
            except OverflowError:
                return math.inf if not s.startswith("-") else -math.inf
        try:
            return float(s)
        except ValueError:
            return math.nan
    return math.nan


def to_ns(raw: bytes) -> int:
    """Kind ``n`` of one raw JSON value: exact integer nanoseconds of a µs number."""
    raw = bytes(raw).strip()
    if _is_number_text(raw):
        text = raw.decode()
    elif raw[:1] == b'"':
        text = decode_lenient(raw).strip()
        if text[:2].lower() == "0x" or text[:3].lower() in ("-0x", "+0x"):
            try:
                ns = int(text, 16) * 1000
            except ValueError:
                return int(INT_MISSING)
            return ns if _INT64_MIN < ns <= _INT64_MAX else int(INT_MISSING)
    else:
        return int(INT_MISSING)
    try:
        value = Decimal(text)
        if not value.is_finite():
            return int(INT_MISSING)
        ns = int(value * 1000)  # int() truncates toward zero
    except (InvalidOperation, ArithmeticError, ValueError):  # decimal.Overflow, huge exponents
        return int(INT_MISSING)
    return ns if _INT64_MIN < ns <= _INT64_MAX else int(INT_MISSING)


def to_text(raw: bytes) -> str:
    """Kind ``s`` of one raw JSON value: a string's text, else the minified JSON text."""
    raw = bytes(raw).strip()
    if raw[:1] == b'"':
        return decode_lenient(raw)
    return minify(raw)


class _Interner:
    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.codes.setdefault(text, len(self.codes))


def scan(events_json: bytes | memoryview) -> ScanResult:
    """Scan the JSON text of a ``traceEvents`` array (``[...]``) into columns."""
    events = [_event(raw) for raw in _list_decoder.decode(events_json)]
    n = len(events)
    intern = _Interner()
    top: dict[str, np.ndarray] = {}
    for key, kind in TOP_FIELDS:
        raws = [ev.get(key) for ev in events]
        top[key] = _convert(raws, kind, intern)
    arg_rows: dict[str, list[int]] = {key: [] for key, _ in ARG_FIELDS}
    arg_raws: dict[str, list[bytes]] = {key: [] for key, _ in ARG_FIELDS}
    for row, ev in enumerate(events):
        raw_args = ev.get("args")
        if raw_args is None or bytes(raw_args).lstrip()[:1] != b"{":
            continue
        for key, value in _object(raw_args).items():
            if key in arg_rows:
                arg_rows[key].append(row)
                arg_raws[key].append(value)
    args = {
        key: SparseColumn(
            rows=np.asarray(arg_rows[key], dtype=np.int32),
            values=_convert(arg_raws[key], kind, intern),
        )
        for key, kind in ARG_FIELDS
    }
    strings = list(intern.codes)
    return ScanResult(n_events=n, top=top, args=args, strings=strings)


def _convert(raws: list, kind: str, intern: _Interner) -> np.ndarray:
    """Convert raw values (None = missing) to the column of ``kind``."""
    if kind == "f":
        return np.array([math.nan if r is None else to_float(r) for r in raws], dtype=np.float64)
    if kind == "i":
        return np.array([INT_MISSING if r is None else to_int(r) for r in raws], dtype=np.int64)
    if kind == "n":
        return np.array([INT_MISSING if r is None else to_ns(r) for r in raws], dtype=np.int64)
    return _text_codes(raws, intern)


def _text_codes(raws: list, intern: _Interner) -> np.ndarray:
    """Kind ``s``: each raw value's code, converting each distinct raw text once (a trace repeats
    its names, categories and ids thousands of times)."""
    seen: dict[bytes | None, int] = {None: -1}
    out = []
    for r in raws:
        b = None if r is None else bytes(r)
        c = seen.get(b)
        if c is None:
            c = seen[b] = intern(to_text(b))
        out.append(c)
    return np.array(out, dtype=np.int32)
