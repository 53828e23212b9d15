"""Which Kineto event fields the loader extracts, and how: the contract shared by both scanners.

A scanner (the C extension ``_scan`` or the pure-Python ``scan_py``) walks the ``traceEvents``
array once and returns a :class:`ScanResult`:

* one dense array per *top-level* field (one entry per event, in file order);
* one sparse column per *args* field: the rows (event positions, int32) that carry the key and the
  values, because most args appear on a small share of events (kernel launch parameters,
  collective sizes, memory instants) and dense storage would cost ~8 bytes × events each;
* one string table: every string value (category, name, string args) is interned to an int32
  code, so the model never holds a Python object per event.

Kinds (one letter, so the C side can switch on it):

``f``  float64. Numbers as they are; a numeric string (``"2560"``, ``"0x10"``) is parsed;
       anything else is NaN. Missing top-level fields are NaN.
``i``  int64. Integer literals exactly (ids can exceed 2**53); floats truncated toward zero;
       numeric strings parsed (base 0, so ROCm's ``"0x0"`` stream is 0); anything else is
       ``INT_MISSING``. Missing top-level fields are ``INT_MISSING``.
``n``  int64 nanoseconds, parsed exactly from the decimal text of a µs value (float64 cannot
       hold a unix-epoch µs timestamp to the ns: its resolution there is 0.25 µs). Digits beyond
       the ns are truncated toward zero; exponents are honoured; numeric strings are parsed the
       same way (hex as an integer number of µs); anything else is ``INT_MISSING``.
``s``  int32 string code. A JSON string is interned as its decoded text; any other value
       (number, array, object, true/false/null) is interned as its JSON text with insignificant
       whitespace removed, so ``[50, 1, 1]`` and ``[50,1,1]`` share a code. Missing is -1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import SparseColumn

INT_MISSING = np.iinfo(np.int64).min
"""Sentinel of kind ``i`` for a missing or non-numeric value."""

TOP_FIELDS: tuple[tuple[str, str], ...] = (
    ("ph", "s"),
    ("cat", "s"),
    ("name", "s"),
    ("pid", "s"),  # usually an int, but "Spans" / "Traces" occur; resolved through the table
    ("tid", "s"),  # 2021 traces write "stream 7" or "25738"
    ("ts", "n"),
    ("dur", "f"),
    ("id", "i"),  # flow-event id (ac2g / fwdbwd)
)

ARG_FIELDS: tuple[tuple[str, str], ...] = (
    # CPU <-> GPU linkage and placement
    ("stream", "i"),
    ("correlation", "i"),
    ("External id", "i"),
    ("external id", "i"),  # June-2021 Kineto spelling
    ("device", "i"),
    ("Device", "i"),  # 2021 CPU ops carry the pid here; kept for completeness
    ("queued", "i"),
    # memcpy / memset
    ("bytes", "i"),
    ("memory bandwidth (GB/s)", "f"),
    # kernel launch parameters
    ("grid", "s"),
    ("block", "s"),
    ("registers per thread", "i"),
    ("shared memory", "i"),
    ("blocks per SM", "f"),
    ("warps per SM", "f"),
    ("est. achieved occupancy %", "f"),
    # collectives (NCCL / RCCL / gloo)
    ("Collective name", "s"),
    ("In msg nelems", "i"),
    ("Out msg nelems", "i"),
    ("dtype", "s"),
    ("Group size", "i"),
    ("Process Group Name", "s"),
    ("Process Group Description", "s"),
    ("Process Group Ranks", "s"),
    ("Rank", "i"),
    ("Seq", "i"),  # NCCL sequence number of the collective in its process group (HTA 0.6: seq_num)
    ("In split size", "s"),
    ("Out split size", "s"),
    # operators
    ("Input Dims", "s"),
    ("Input type", "s"),
    ("Concrete Inputs", "s"),  # scalar arguments as text (stride, is_causal): the performance model
    ("Sequence number", "i"),
    ("Fwd thread id", "i"),
    ("Python id", "i"),
    ("Python parent id", "i"),
    # synchronisation
    ("wait_on_stream", "i"),
    ("wait_on_cuda_event_record_corr_id", "i"),
    # memory instants ("[memory]", profile_memory=True)
    ("Bytes", "i"),
    ("Total Allocated", "i"),
    ("Total Reserved", "i"),
    ("Addr", "i"),
    ("Device Type", "i"),
    ("Device Id", "i"),
    # metadata events (process_name / thread_name) and counters
    ("name", "s"),
    ("labels", "s"),
    ("sort_index", "i"),
)


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scanner returns for one ``traceEvents`` array (see module docstring)."""

    n_events: int
    top: dict[str, np.ndarray]
    args: dict[str, SparseColumn]
    strings: list[str]
