"""A stored baseline's analyses, kept next to its column cache: re-analysing it is a file read.

``baseline save`` writes ``cache/rank-N.digest`` per rank (computed by the worker that loaded
the rank, :func:`perfreport.running.rank_task.save_job`): that rank's
:class:`~perfreport.running.digest.RankDigest` (its analysis tables and per-rank summaries) for the default
gate settings. A later ``compare``/``analyze`` of the baseline with the same settings and the
same perfreport code reads it instead of decoding the columns and running the analyses again.
Derived data: a digest missing, from other code (a fingerprint of the package's sources, so an
edited analysis never reads stale results) or for other settings is simply not used.

The format is MessagePack (msgspec) with a closed set of value kinds: numbers, strings, lists,
dicts, tuples, numeric numpy arrays (dtype letter + raw bytes), object arrays of plain values,
DataFrames of such columns, and the two small records a digest holds. Nothing is ever imported
or called by name while decoding (unlike pickle), so a baseline from a fork's pull request
cannot run code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .. import __version__
from .digest import AnalysisOptions, RankDigest
from ..model import TraceMeta

FORMAT = 2
NUMERIC_KINDS = "biuf"
_PLAIN = (str, int, float, bool)
_FINGERPRINT: list[str] = []


def code_fingerprint() -> str:
    """sha256 of the package's Python sources (~2 ms): digests are valid for this exact code."""
    if not _FINGERPRINT:
        import hashlib

        root = Path(__file__).resolve().parents[1]  # the package: perfreport/
        h = hashlib.sha256(__version__.encode())
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def options_key(options: AnalysisOptions) -> list:
    """The settings a digest was computed with, as stored (the analyses' defaults filled in)."""
    from ..analyses.launch import LAUNCH_DELAY_CUTOFF_US, RUNTIME_CUTOFF_US

    return [float(LAUNCH_DELAY_CUTOFF_US if options.launch_delay_cutoff_us is None else options.launch_delay_cutoff_us),
            float(RUNTIME_CUTOFF_US if options.runtime_cutoff_us is None else options.runtime_cutoff_us),
            bool(options.exact_kernel_names), int(options.invocation_steps)]


def encode(d: RankDigest, options: AnalysisOptions) -> bytes:
    """A digest (computed with ``options``, attribution parts included) as bytes."""
    return msgspec.msgpack.encode({
        "format": FORMAT, "code": code_fingerprint(), "options": options_key(options),
        "meta": {f.name: getattr(d.meta, f.name) for f in dataclasses.fields(TraceMeta)},
        "tables": {k: _value(v) for k, v in d.tables.items()},
        "memo": [[_value(k), _value(v)] for k, v in d.memo.items()],
        "checksum": d.checksum, "n_events": d.n_events,
    })


def decode(data: bytes, options: AnalysisOptions, path: str) -> RankDigest | None:
    """The digest in ``data`` when it is of this version and for ``options``, else None."""
    try:
        doc = msgspec.msgpack.decode(data)
        if doc.get("format") != FORMAT or doc.get("code") != code_fingerprint() or \
                doc.get("options") != options_key(options):
            return None
        meta = TraceMeta(**{**doc["meta"], "path": path})
        return RankDigest(meta=meta, tables={k: _restore(v) for k, v in doc["tables"].items()},
                          memo={_restore(k): _restore(v) for k, v in doc["memo"]}, checksum=doc["checksum"],
                          n_events=int(doc["n_events"]), load_s=0.0, analyze_s=0.0)
    except (msgspec.DecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None  # derived data: anything unexpected means "recompute"


def read(path: Path, options: AnalysisOptions, trace_path: str) -> RankDigest | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return decode(data, options, trace_path)


def path_for(cache_file: str | Path) -> Path:
    """Where the digest of the rank whose column cache is ``cache_file`` lives."""
    return Path(cache_file).with_suffix(".digest")


# --- values --------------------------------------------------------------------------------------
def _value(v: Any) -> Any:
    from ..analyses.diff import _Pairs
    from .digest import FrozenFrame

    if isinstance(v, FrozenFrame):  # a digest's summaries travel frozen (digest.digest)
        v = v.thaw()
    if isinstance(v, pd.DataFrame):
        return {"~": "frame", "columns": [[str(c), _value(v[c].to_numpy())] for c in v.columns]}
    if isinstance(v, np.ndarray):
        if v.dtype.kind in NUMERIC_KINDS:
            return {"~": "array", "dtype": v.dtype.str, "shape": list(v.shape), "data": np.ascontiguousarray(v).tobytes()}
        items = v.tolist()
        if v.ndim == 1 and all(x is None or type(x) in _PLAIN for x in items):
            return {"~": "plain", "items": items}  # strings and numbers: no per-item walk to decode
        return {"~": "objects", "items": [_value(x) for x in items]}
    if isinstance(v, _Pairs):
        return {"~": "pairs", "fields": {f.name: _value(getattr(v, f.name)) for f in dataclasses.fields(_Pairs)}}
    if isinstance(v, tuple):
        return {"~": "tuple", "items": [_value(x) for x in v]}
    if isinstance(v, list):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {"~": "dict", "items": [[_value(k), _value(x)] for k, x in v.items()]}
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"digest cache: cannot store a {type(v).__name__}")


def _restore(v: Any) -> Any:
    if isinstance(v, list):
        return [_restore(x) for x in v]
    if not isinstance(v, dict):
        return v
    kind = v["~"]
    if kind == "array":
        dtype = np.dtype(v["dtype"])
        if dtype.kind not in NUMERIC_KINDS:
            raise ValueError("not a numeric array")
        out = np.frombuffer(v["data"], dtype=dtype).reshape(v["shape"]).copy()
        out.flags.writeable = False
        return out
    if kind == "plain":
        out = np.empty(len(v["items"]), dtype=object)
        out[:] = v["items"]
        return out
    if kind == "objects":
        return np.array([_restore(x) for x in v["items"]] + [None], dtype=object)[:-1]
    if kind == "frame":
        return pd.DataFrame({name: _restore(col) for name, col in v["columns"]}, columns=[n for n, _ in v["columns"]])
    if kind == "pairs":
        from ..analyses.diff import _Pairs

        return _Pairs(**{k: _restore(x) for k, x in v["fields"].items()})
    if kind == "tuple":
        return tuple(_restore(x) for x in v["items"])
    if kind == "dict":
        return {_restore(k): _restore(x) for k, x in v["items"]}
    raise ValueError(f"unknown value kind {kind!r}")
