"""The column cache of a stored baseline: one rank's model columns in one compressed file.

A ``.cols`` file holds exactly the columns of :class:`perfreport.model.RankTrace` (numpy arrays,
the string table, the sparse args), each compressed with zlib level 3 (ISA-L when present):
loading a stored baseline decompresses arrays instead of parsing JSON. Split from
:mod:`perfreport.gate.baselines`, which decides when a cache is usable.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np

from ..errors import BaselineError
from ..model import NARROW_COLUMNS, RankTrace, SparseColumn, TraceMeta, narrow

try:  # ISA-L (a declared dependency) decompresses about twice as fast as zlib
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover
    import zlib as _zlib  # type: ignore[no-redef]

CACHE_FORMAT = 3
"""Version of the .cols container. 2: ``stream``, ``correlation`` and ``device`` are args
(sparse), not columns (:data:`~perfreport.model.SPARSE_COLUMNS`). 3: pid and tid are codes into
the distinct ids (``pid_code``, ``tid_code``, ``ids``). A store's cache of another version is not
read: its rank files are (:func:`perfreport.gate.baselines.cache_usable`)."""
CACHE_MAGIC = b"PRFCOLS1"
CACHE_LEVEL = 3
"""zlib level of the cache: as small as the gzip trace, and decompression speed hardly depends on it."""
_NOT_COLUMNS = {"meta", "strings", "args", "_codes", "_memo"}
COLUMNS = tuple(f.name for f in dataclasses.fields(RankTrace) if f.name not in _NOT_COLUMNS)
"""The numpy columns of RankTrace (per event, but ``ids``: per distinct pid/tid), as the cache
stores them."""


def encode_columns(trace: RankTrace) -> bytes:
    """One rank's model columns as a .cols container: magic, header length (u32 little-endian),
    a JSON header naming each array's dtype, shape and compressed size, then the arrays."""
    arrays: list[tuple[str, np.ndarray]] = [(c, getattr(trace, c)) for c in COLUMNS]
    strings = json.dumps(list(trace.strings), ensure_ascii=False).encode("utf-8")
    arrays.append(("strings", np.frombuffer(strings, dtype=np.uint8)))
    keys = list(trace.args)
    for i, key in enumerate(keys):  # rows stored as int64 (read back as int32): zlib packs their
        # zero high bytes to almost nothing, where int32 rows made the demo's cache 841 -> 1,008 kB
        rows = trace.args[key].rows.astype(np.int64, copy=False)
        arrays += [(f"args.{i}.rows", rows), (f"args.{i}.values", trace.args[key].values)]
    blobs, entries = [], []
    for name, array in arrays:
        blob = _zlib.compress(np.ascontiguousarray(array).tobytes(), CACHE_LEVEL)
        entries.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "bytes": len(blob)})
        blobs.append(blob)
    header = json.dumps({"format": CACHE_FORMAT, "arrays": entries, "args": keys}).encode("utf-8")
    return CACHE_MAGIC + struct.pack("<I", len(header)) + header + b"".join(blobs)


def decode_columns(data: bytes, meta: TraceMeta, where: Path) -> RankTrace:
    """The RankTrace of a .cols container (arrays read-only, as the loader makes them)."""
    try:
        if data[:8] != CACHE_MAGIC:
            raise ValueError("not a perfreport column cache")
        (size,) = struct.unpack("<I", data[8:12])
        header = json.loads(data[12:12 + size])
        offset = 12 + size
        arrays = {}
        for e in header["arrays"]:
            raw = _zlib.decompress(data[offset:offset + e["bytes"]])
            arrays[e["name"]] = np.frombuffer(raw, dtype=np.dtype(e["dtype"])).reshape(e["shape"])
            offset += e["bytes"]
        strings_list = json.loads(bytes(arrays.pop("strings")).decode("utf-8"))
        args = {key: SparseColumn(narrow(arrays[f"args.{i}.rows"]), arrays[f"args.{i}.values"])
                for i, key in enumerate(header["args"])}
        # a decoded trace has the loader's widths whatever the writer's trace had (a no-op for
        # this encoder's own caches, but for the args' rows, stored as int64)
        columns = {c: narrow(arrays[c]) if c in NARROW_COLUMNS else arrays[c] for c in COLUMNS}
    except (ValueError, KeyError, struct.error, _zlib.error) as exc:
        raise BaselineError(f"{where}: unreadable column cache ({exc})") from None
    strings = np.array(strings_list, dtype=object)
    return RankTrace(meta=meta, strings=strings, args=args, _codes={s: i for i, s in enumerate(strings_list)},
                     **columns)


__all__ = ["encode_columns", "decode_columns", "COLUMNS", "CACHE_FORMAT", "CACHE_MAGIC", "CACHE_LEVEL"]
