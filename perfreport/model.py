"""The columnar trace model and the one definition of each trace concept.

A :class:`RankTrace` holds every event of one rank's ``traceEvents`` array as read-only numpy
columns (row ``i`` is the ``i``-th event of the file, so the row number is a stable event id),
category and name as int32 codes into one string table, and the less common ``args`` as sparse
columns. A :class:`TraceSet` is the ranks of one job.

Concepts that analyses share are defined here once: which categories are GPU activity, kernels,
memcpy, memset, runtime launches; what a profiler step is; how kernels are classified into
computation, communication and memory. HTA's differing variants live only in ``perfreport.hta``.

Times are microseconds (µs) as in Kineto. ``ts`` is relative to the rank's integer origin
``meta.ts_origin_us`` (the floor of its first timestamp), parsed exactly from the text, so
ns-resolution traces keep every digit even when written as unix-epoch µs; nothing is rounded.
Across ranks use :meth:`TraceSet.aligned_ts`. Missing ``ts``/``dur`` is NaN.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .timing import phase

try:
    from . import _sorted  # type: ignore[attr-defined]
except ImportError:  # the extension is optional (no compiler at install): numpy searches
    _sorted = None


@dataclass(frozen=True, slots=True)
class SparseColumn:
    """Values of one args key: ``values[k]`` belongs to event ``rows[k]`` (rows ascending).

    Most args appear on a small share of events (kernel launch parameters, collective sizes,
    memory instants), so storing them densely would cost 8 bytes × every event each.
    """

    rows: np.ndarray  # int32 in a loaded trace (see narrow); read them without assuming it
    values: np.ndarray  # float64 | int64 | int32 (string codes)

DENSE_ARGS = {"External id": "external_id", "external id": "external_id"}
"""Args keys the loader turns into dense columns (key -> column; -1 where absent). They are kept
once, as the column: as sparse args too they cost ~16 bytes per event again (the launch and
kernel ids are on most events)."""
SPARSE_COLUMNS = ("stream", "correlation", "device")
"""Args keys read as columns (``trace.stream``, ``trace.correlation``, ``trace.device``) but held
sparse, as args: they are on the GPU events and the launches only (a tenth to a third of the
events), so the sparse pair costs 1.3-5 bytes per event where a dense column costs 8. The dense
column is made on first use (the HTA frames, a step's cut); the analyses read these args at
their rows (``trace.arg(key, -1, rows)``)."""

NARROW_COLUMNS = ("external_id", "flow_id", "linked", "iteration")
"""Integer columns held as int32 when every value fits (:func:`narrow`): row numbers (a trace
has far fewer than 2**31 events), step numbers and the profiler's id counters. 4 bytes per
event each instead of 8: 16 MB less per million events, for as long as the trace is loaded."""


def fits_int32(values: np.ndarray) -> bool:
    """Every value of ``values`` (integers) fits int32 (an empty array does)."""
    info = np.iinfo(np.int32)
    return not len(values) or (values.min() >= info.min and values.max() <= info.max)


def narrow(column: np.ndarray) -> np.ndarray:
    """``column`` (:data:`NARROW_COLUMNS`, the args' rows) as int32, read-only like every loaded
    column, when all its values fit; else ``column`` itself (a step number or an id past
    2**31 - 1 keeps its int64)."""
    if column.dtype == np.int32 or not fits_int32(column):
        return column
    out = column.astype(np.int32)
    out.flags.writeable = False
    return out


# --- categories ---------------------------------------------------------------------------
# Modern Kineto spells categories in snake case; June-2021 Kineto capitalised them.
KERNEL_CATEGORIES = ("kernel", "Kernel")
MEMCPY_CATEGORIES = ("gpu_memcpy", "Memcpy")
MEMSET_CATEGORIES = ("gpu_memset", "Memset")
GPU_ACTIVITY_CATEGORIES = KERNEL_CATEGORIES + MEMCPY_CATEGORIES + MEMSET_CATEGORIES + ("mtia_ccp_events",)
"""Work that occupies a GPU engine: what 'GPU busy' is made of."""
SYNC_CATEGORIES = ("cuda_sync",)
"""GPU-side synchronisation records (Stream Sync, Event Sync, Context Sync, Stream Wait Event)."""
GPU_SIDE_CATEGORIES = GPU_ACTIVITY_CATEGORIES + SYNC_CATEGORIES + ("gpu_user_annotation", "cuda_profiler_range")
"""Everything recorded on a GPU timeline rather than by a CPU thread."""
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime")
CPU_OP_CATEGORIES = ("cpu_op", "Operator")
USER_ANNOTATION_CATEGORIES = ("user_annotation",)

LAUNCH_NAMES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipModuleLaunchKernel",
    "hipGraphLaunch",
    "hipMemcpyAsync",
    "hipMemsetAsync",
    "hipMemcpyWithStream",
)
"""Runtime/driver calls that enqueue GPU work (CUDA, CUDA driver for Triton, CUDA graphs, HIP)."""

TEXT_ID_BASE = -(1 << 62)
"""pid/tid written as non-numeric text ("Spans", "stream 7") become ``TEXT_ID_BASE - code``:
far below any real (possibly negative) id, and decodable back to the text."""

STEP_NAME = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
"""A profiler step: the ``ProfilerStep#N`` span that ``torch.profiler`` records per ``step()``."""
STEP_NUMBER_CAP = 2**63 - 1
"""A step number past int64 is held as this in :func:`step_name_table` (the loader refuses it)."""


STEP_NAMES_SKIPPED_FROM = 4096
"""Strings in a trace's table from which :meth:`RankTrace.codes_where` leaves out the step names
when it may (fewer: the loop over them all is as quick)."""


def step_name_table(strings: Iterable[str]) -> np.ndarray:
    """Per string code, the N of a ``ProfilerStep#N`` name (:data:`STEP_NAME`), -1 for any
    other text; one more slot, last, for code -1 (no name). Every step has a name of its own,
    so a job of 170,000 steps has as many: the regular expression runs once per text, here,
    and the events' step numbers are a gather (``table[name]``)."""
    strings = list(strings)
    out = np.full(len(strings) + 1, -1, dtype=np.int64)
    for code, text in enumerate(strings):
        if text.startswith("ProfilerStep") and (m := STEP_NAME.match(text)):  # the prefix first: 2.4 x cheaper
            out[code] = min(int(m.group(1)), STEP_NUMBER_CAP)
    return out


class StringCodes(Mapping):
    """Text -> code of a rank's string table, without a dict entry per ``ProfilerStep#N`` name
    until one is asked for. Every step has a name of its own: the triton example grown to 1 GB
    has 345,319, and a dict of every string took 0.08 s of its decode, while the analyses ask
    for a few other names (``"X"``, a category, ``record_param_comms``) and step names almost
    never (a restarted numbering: :mod:`perfreport.load.restarts`). ``step_numbers`` is the
    table's :func:`step_name_table`; a name it marks as a step is looked up among the step
    names, made into a dict on the first such question. Codes added later (``codes[text] =
    code``) join the other names."""

    __slots__ = ("_plain", "_step_codes", "_steps", "_strings")

    def __init__(self, strings: np.ndarray, step_numbers: np.ndarray) -> None:
        strings = np.asarray(strings, dtype=object)
        is_step = np.asarray(step_numbers[:len(strings)]) >= 0
        plain = np.flatnonzero(~is_step) if is_step.any() else np.arange(len(strings))
        self._plain: dict[str, int] = dict(zip(strings[plain].tolist(), plain.tolist()))
        self._step_codes = np.flatnonzero(is_step)
        self._strings = strings
        self._steps: dict[str, int] | None = None if len(self._step_codes) else {}

    def _step_names(self) -> dict[str, int]:
        if self._steps is None:
            self._steps = dict(zip(self._strings[self._step_codes].tolist(), self._step_codes.tolist()))
        return self._steps

    def get(self, text, default=None):
        code = self._plain.get(text)
        if code is None and isinstance(text, str) and text.startswith("ProfilerStep"):
            code = self._step_names().get(text)
        return default if code is None else code

    def __getitem__(self, text) -> int:
        code = self.get(text)
        if code is None:
            raise KeyError(text)
        return code

    def __contains__(self, text) -> bool:
        return self.get(text) is not None

    def __setitem__(self, text: str, code: int) -> None:
        self._plain[text] = code

    def __len__(self) -> int:
        return len(self._plain) + len(self._step_codes)

    def __iter__(self) -> Iterator[str]:
        yield from self._plain
        yield from self._step_names()


# --- kernel classes -----------------------------------------------------------------------
COMPUTATION, COMMUNICATION, MEMORY, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
KERNEL_CLASS_NAMES = np.array([COMPUTATION, COMMUNICATION, MEMORY, OTHER], dtype=object)
CLASS_INDEX = {name: i for i, name in enumerate(KERNEL_CLASS_NAMES)}
"""Kernel class name -> its index in KERNEL_CLASS_NAMES (the values of ``RankTrace.gpu_class``)."""
COLLECTIVE = "COLLECTIVE"
"""Not a kernel class: the class of a whole collective call (which may run several kernels) in
:mod:`perfreport.analyses.invocations`."""
_COMM_NAME = re.compile(r"^(nccl|rccl|hccl)|ncclKernel|ncclDevKernel|^c10d::|^gloo", re.IGNORECASE)
_MEM_NAME = re.compile(r"^(Memcpy|Memset|dma)")
CPU_COLLECTIVE = re.compile(r"^(nccl|rccl|gloo):|^c10d::|^record_param_comms$")
"""CPU-side events of a collective: the ``nccl:*`` / ``rccl:*`` / ``gloo:*`` annotations, the
``c10d::*`` ops and ``record_param_comms``. With the NCCL backend they enqueue GPU kernels (the
communication runs there, COMMUNICATION kernels); with gloo they *are* the communication (it runs
on host threads). With the COMMUNICATION kernel class, the package's one definition of
communication (:meth:`RankTrace.cpu_collectives`)."""
HOST_COLLECTIVE_PREFIX = "gloo:"
"""CPU collectives that *run* the communication on the host (the gloo backend's work, on its own
threads); the ``c10d::*`` ops and ``record_param_comms`` above them only enqueue it
(:meth:`RankTrace.host_collectives`)."""


_COMM_HINTS = ("nccl", "rccl", "hccl", "c10d", "gloo")
"""Lower-case text every _COMM_NAME match contains: a cheap test before the regex scan."""


@functools.lru_cache(maxsize=65536)  # kernel names repeat across ranks: classify each once
def kernel_class(name: str, category: str) -> str:
    """COMPUTATION / COMMUNICATION / MEMORY / OTHER for one GPU event (name and category).

    Memory is decided by category first (memcpy/memset events), so ROCm's ``hipMemcpy…``
    names are not mistaken for communication as in HTA; collectives are NCCL/RCCL/HCCL kernels.
    Sync records are OTHER: they are waits, not work.
    """
    if category in MEMCPY_CATEGORIES or category in MEMSET_CATEGORIES or _MEM_NAME.match(name):
        return MEMORY
    if category in SYNC_CATEGORIES:
        return OTHER
    lower = name.lower()
    if any(hint in lower for hint in _COMM_HINTS) and _COMM_NAME.search(name):
        return COMMUNICATION
    if category in KERNEL_CATEGORIES or category == "mtia_ccp_events":
        return COMPUTATION
    return OTHER


# --- codes ------------------------------------------------------------------------------------
def sorted_unique(values) -> np.ndarray:
    """``np.unique(values)``, for integers and booleans by a sort. numpy 2.3+ finds the distinct
    values of an integer array (without ``return_*``) in a hash table: 0.10-0.14 s for 204,580
    distinct step numbers, which a sort orders in 1 ms. Other kinds go to ``np.unique``.

    >>> sorted_unique(np.array([3, 1, 3, 2]))
    array([1, 2, 3])
    """
    a = np.asarray(values)
    if a.dtype.kind not in "iub":
        return np.unique(a)
    a = np.sort(a, axis=None)
    if len(a) < 2:
        return a
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    np.not_equal(a[1:], a[:-1], out=new[1:])
    return a[new]


def sorted_union(a, b) -> np.ndarray:
    """``np.union1d(a, b)`` through :func:`sorted_unique`: numpy 2.3+'s ``union1d`` of integers
    goes through the same hash table (0.24 s for 345,319 step numbers; a sort: 3 ms)."""
    return sorted_unique(np.concatenate([np.ravel(a), np.ravel(b)]))


def sorted_intersection(a, b) -> np.ndarray:
    """``np.intersect1d(a, b)``: each side made distinct by :func:`sorted_unique` first
    (numpy 2.3+'s own ``intersect1d`` of integers: 0.44 s for two sets of 345,319 step numbers;
    this: 8 ms).

    >>> sorted_intersection(np.array([3, 1, 3, 2]), np.array([2, 3, 4]))
    array([2, 3])
    """
    return np.intersect1d(sorted_unique(a), sorted_unique(b), assume_unique=True)


SEARCH_IN_C_FROM = 64
"""Keys from which :func:`search_sorted` calls the C search (fewer: numpy's call costs less)."""


def code_mask(column: np.ndarray, codes, n_codes: int) -> np.ndarray:
    """Where the string-code ``column`` (codes below ``n_codes``, -1 for no string) holds one of
    ``codes``: ``np.isin(column, codes)``. One code is one comparison; more, one lookup per
    event in a table of a bool per code (:func:`take_codes`). On the 4.49 M events of the triton
    example grown to 1 GB: one comparison 0.4 ms, where the comparisons of 2-4 codes took 3.3-4.8
    ms and the lookup takes 2.4."""
    codes = np.asarray(codes, dtype=np.intp)
    if len(codes) == 1:
        return column == codes[0]
    table = np.zeros(n_codes + 1, dtype=bool)  # the last entry stands for -1, no string
    table[codes] = True
    return take_codes(table, column)


def take_codes(table: np.ndarray, codes: np.ndarray, use_c: bool | None = None, reuse: bool = False) -> np.ndarray:
    """``table.take(codes)`` for a table of a bool or an int32 per string code (a code -1 reads
    its last entry) and int32 codes: one pass of the C extension ``_sorted``, where numpy first
    copies the codes into a column of intp indices (a bool per code for 4.49 M events: 5.0-5.5 ms
    warm against 2.4; int32 for 1 M events: 4.5-5.6 ms against 2.0-2.1); numpy, the reference,
    otherwise. ``reuse``: an int32 result may be written over ``codes`` (when they are writable),
    which are not read again. ``use_c`` forces one path (tests)."""
    c_ok = _sorted is not None and hasattr(_sorted, "take_codes")
    if (use_c if use_c is not None else c_ok) and codes.dtype == np.int32 and table.dtype in (np.bool_, np.int32):
        codes = np.ascontiguousarray(codes)
        in_place = reuse and table.dtype == np.int32 and codes.flags.writeable
        out = codes if in_place else np.empty(len(codes), dtype=table.dtype)
        _sorted.take_codes(np.ascontiguousarray(table), codes, out)
        return out
    return table.take(codes)


def search_sorted(a: np.ndarray, v, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side)``, the same answers (int64), for keys that come nearly in
    order: the C extension ``_sorted`` starts each search at the previous key's answer and
    gallops from there, where numpy bisects the whole array for every key. Millions of
    interval starts searched among 173,000 step windows: 0.013 s against numpy's 0.08-0.17 s;
    keys in random order cost both about the same. numpy answers where the extension is not
    built, for other dtypes (both sides float64, or int32 / int64 each, go to C), non-contiguous
    or multi-dimensional arrays and a few keys."""
    if _sorted is None or not isinstance(v, np.ndarray) or v.ndim != 1 or len(v) < SEARCH_IN_C_FROM \
            or not isinstance(a, np.ndarray) or a.ndim != 1 or not _searchable(a.dtype, v.dtype) \
            or not (a.flags.c_contiguous and v.flags.c_contiguous):
        return np.searchsorted(a, v, side)
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    out = np.empty(len(v), dtype=np.int64)
    _sorted.search(a, v, side == "right", out)
    return out


def rows_among(values: np.ndarray, few, use_c: bool | None = None) -> np.ndarray:
    """``np.flatnonzero(np.isin(values, few))`` (int64 positions, ascending) for a ``few`` much
    shorter than ``values``: the C extension ``_sorted`` tests each value against a bitmap of
    the few's hashes and searches only those that pass (a pass over a 1 GB rank's 5 M starts
    for a thousand of them: ~5 ms). NaN matches nothing, -0.0 matches 0.0, as in np.isin.
    Where the extension is not built and for other dtypes (float64 values, or int32 / int64, go
    to C), numpy searches each value among the few, sorted: np.isin sorts the values with them
    once they pass a few dozen (the V100-grown rank's 211 orphan kernels against 221k flow
    ends: 4.2 ms against 1.1). ``use_c`` forces one path (tests)."""
    values = np.asarray(values)
    few = np.asarray(few)
    floats = values.dtype == np.float64
    c_ok = _sorted is not None and hasattr(_sorted, "among") and values.ndim == 1 \
        and (floats or values.dtype in _SEARCH_INTS) and (few.dtype.kind == "f") == floats \
        and few.dtype.kind in "fi"  # (uint64 few past int64: numpy compares them exactly)
    if not (use_c if use_c is not None else c_ok):
        if not len(few):
            return np.empty(0, dtype=np.int64)
        few = np.sort(few, axis=None)
        at = search_sorted(few, values)  # values mostly come in file order: each search starts at the last
        np.minimum(at, len(few) - 1, out=at)
        return np.flatnonzero(few[at] == values)
    few = np.sort(few.astype(np.float64 if floats else np.int64), axis=None)  # (np.unique imports numpy.ma)
    few = few[np.r_[True, few[1:] != few[:-1]] & (few == few)] if len(few) else few  # distinct, no NaN
    out = np.empty(len(values), dtype=np.int64)  # pages never written are never resident
    count = _sorted.among(np.ascontiguousarray(values), np.ascontiguousarray(few), out)
    return out[:count].copy()


def _searchable(a: np.dtype, v: np.dtype) -> bool:
    """Whether the C search takes these dtypes: both float64, or both int32 / int64 (native)."""
    if a == np.float64:
        return v == np.float64
    return a in _SEARCH_INTS and v in _SEARCH_INTS


_SEARCH_INTS = (np.dtype(np.int32), np.dtype(np.int64))


def fits_a_presence_table(span: int, count: int) -> bool:
    """Whether ``count`` integers over a range of ``span`` values are better told apart through
    a presence table over the range (a pass over each, one byte a value of the range) than by a
    sort or a hash: the range is not much wider than they are many. The one rule of every such
    table (:func:`distinct_codes`, :func:`tuples_in`, the groupings' distinct rows and codes,
    report.json's step bounds)."""
    return span <= 4 * count + 4096


def distinct_codes(codes: np.ndarray, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True)`` for integer codes in [-1, n_codes) (string
    codes, -1 for none): a presence table over the code range instead of a sort, linear in
    ``len(codes) + n_codes``. Falls back to ``np.unique`` when the range dwarfs the codes.

    >>> distinct_codes(np.array([3, -1, 3, 0]), 5)
    (array([-1,  0,  3]), array([2, 0, 2, 1]))
    """
    codes = np.asarray(codes)
    if len(codes) == 0 or not fits_a_presence_table(n_codes, len(codes)):
        uniq, inverse = np.unique(codes, return_inverse=True)
        return uniq, inverse.ravel()
    if _sorted is not None and hasattr(_sorted, "rank_codes") and codes.dtype in _SEARCH_INTS and codes.ndim == 1:
        # the C extension marks, numbers and looks up in three passes: no intp copy of int32
        # codes, no numpy scatter and gather (a digest of HTA's trace_compare tiny grown to 1 GB:
        # 0.27-0.28 -> 0.16-0.20 s in 70 calls; the A100-grown 1 GB rank 0.07-0.11 -> 0.04-0.05 s)
        rank, uniq = np.zeros(n_codes + 1, dtype=np.int64), np.empty(n_codes + 1, dtype=np.int64)
        inverse = np.empty(len(codes), dtype=np.int64)
        count = _sorted.rank_codes(np.ascontiguousarray(codes), rank, uniq, inverse)
        return uniq[:count].astype(codes.dtype), inverse
    # -1 (none) reads the tables' last slot (a negative index), so the codes index them as they
    # are, not through a shifted copy; narrower integers are cast once for both lookups. One
    # digest of a rank of 173,000 steps: 0.164 -> 0.099 s in 71 calls.
    at = codes if codes.dtype == np.intp else codes.astype(np.intp)
    present = np.zeros(n_codes + 1, dtype=bool)
    present[at] = True
    none = bool(present[n_codes])
    seen = present[:n_codes]
    position = np.empty(n_codes + 1, dtype=np.int64)  # of each code among the distinct ones
    np.cumsum(seen, out=position[:n_codes])
    position[:n_codes] -= 0 if none else 1
    position[n_codes] = 0
    uniq = np.flatnonzero(seen)
    if none:
        uniq = np.r_[-1, uniq]
    return uniq.astype(codes.dtype), position[at]


def tuples_in(rows: Sequence[np.ndarray], among: Sequence[np.ndarray]) -> np.ndarray:
    """Whether each row's tuple of integers (``rows``: a column per member) is one of the tuples
    ``among`` holds (its columns alike), as ``MultiIndex.isin`` says: the tuples as one integer
    each (mixed radix over the members' joint ranges) and ``np.isin``, not a hash of every
    row's levels (the (run, rank, step) of a million (op, step) rows: 18 ms a table that way).
    Members whose joint range would overflow the integer are first ranked densely. A member
    holding one value on both sides (the run and rank of a one-rank side) cannot tell tuples
    apart and is left out; the codes are then looked up in a presence table over their range
    where it is not much wider than they are many (the 1.4 M (op, step) rows of a side of the
    triton-grown 1 GB rank among its 345,000 steps: 6.9 ms by ``np.isin``, 1.7 ms so)."""
    n = len(rows[0]) if len(rows) else 0
    if not n or not len(among) or not len(among[0]):
        return np.zeros(n, dtype=bool)
    code = None  # the rows', then among's
    for x, y in zip(rows, among):
        values = np.concatenate([np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)])
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:  # one value everywhere: every tuple agrees on it
            continue
        width = int(code.max()) + 1 if code is not None else 1
        if width * (hi - lo + 1) >= 1 << 62:  # ranked densely: the product fits
            if code is not None:
                code = np.unique(code, return_inverse=True)[1].ravel()
            values = np.unique(values, return_inverse=True)[1].ravel()
            lo, hi = 0, int(values.max())
        if code is None:
            code = values - lo
        else:
            code *= hi - lo + 1
            code += values - lo
    if code is None:  # every member one value on both sides: every row is among them
        return np.ones(n, dtype=bool)
    span = int(code.max()) + 1
    if not fits_a_presence_table(span, len(code)):
        return np.isin(code[:n], code[n:])
    present = np.zeros(span, dtype=bool)
    present[code[n:]] = True
    return present[code[:n]]


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """Per-rank metadata from the top-level keys of the trace file."""

    path: str
    rank: int
    rank_source: str  # "distributedInfo", "file name", "mapping" or "default"
    json_bytes: int
    ts_origin_us: int = 0
    """Integer µs subtracted from every trace ``ts``: ``RankTrace.ts`` is µs since this origin,
    which keeps ns precision in float64 (unix-epoch µs near 1.7e15 would not)."""
    schema_version: Any = None
    distributed_info: dict = field(default_factory=dict)
    device_properties: list = field(default_factory=list)
    base_time_ns: int | None = None
    display_time_unit: str | None = None
    trace_name: str | None = None
    other: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)
    """Events dropped at load for absurd values: {reason: count} (see load/sanitize.py)."""
    step_restarts: str | None = None
    """Where the trace's ProfilerStep numbers start again, the sentence saying how its steps were
    numbered on (see load/restarts.py); None otherwise."""

    @property
    def dropped_note(self) -> str | None:
        """One sentence on the dropped events, None when none were dropped."""
        if not self.dropped:
            return None
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in self.dropped.items())
        return f"dropped {sum(self.dropped.values()):,} event(s) with unusable times ({reasons}); figures exclude them"

    @property
    def world_size(self) -> int | None:
        ws = self.distributed_info.get("world_size")
        return int(ws) if isinstance(ws, int) else None

    def gpu_name(self, device: int | None = None) -> str | None:
        """Name of ``device`` (or of the first listed device) from ``deviceProperties``."""
        props = [p for p in self.device_properties if isinstance(p, dict)]
        if device is not None:
            props = [p for p in props if p.get("id") == device] or props
        return str(props[0].get("name")) if props and props[0].get("name") else None


@dataclass(frozen=True, slots=True, eq=False)
class RankTrace:
    """All events of one rank as columns. Row ``i`` = event ``i`` of ``traceEvents``.

    Columns: ``ph``/``cat``/``name`` (int32 codes into ``strings``), ``pid_code``/``tid_code``
    (int32 codes into ``ids``, one per distinct id: ``pid``/``tid``, :meth:`pid_at` and
    :meth:`tid_at` read the ids, int64, non-numeric ones such as "Spans" or "stream 7" as
    ``TEXT_ID_BASE - code``; equal codes are equal ids, so threads group by code), ``ts``/``dur``
    (float64 µs, NaN when absent), ``external_id``/``flow_id`` (-1 when absent), ``linked``
    (row of the CPU launch for a GPU event and of the first GPU event for a launch, -1 if none)
    and ``iteration`` (profiler step number, -1 outside any step); those four are int32 where
    their values fit (:func:`narrow`), else int64, so read them without assuming either. Other
    args are sparse (their rows int32), read with :meth:`arg`; ``stream``, ``correlation`` and
    ``device`` (:data:`SPARSE_COLUMNS`) are among them, and read as dense columns too.
    """

    meta: TraceMeta
    strings: np.ndarray  # object array of str; codes index into it
    ph: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid_code: np.ndarray
    tid_code: np.ndarray
    ids: np.ndarray  # int64, sorted: the pid/tid of each code (per distinct id, not per event)
    ts: np.ndarray
    dur: np.ndarray
    external_id: np.ndarray
    flow_id: np.ndarray
    linked: np.ndarray
    iteration: np.ndarray
    args: Mapping[str, SparseColumn]
    _codes: Mapping[str, int] = field(repr=False)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)
    """Derived data computed once per trace (masks, classes, call stack): see :meth:`memo`."""

    @property
    def rank(self) -> int:
        return self.meta.rank

    @property
    def n_events(self) -> int:
        return len(self.ts)

    @property
    def pid(self) -> np.ndarray:
        """The pid of every event (int64), made on first use: the analyses read the ids at
        their rows (:meth:`pid_at`) or group by ``pid_code``."""
        return self.memo(("column", "pid"), lambda: self.ids[self.pid_code])

    @property
    def tid(self) -> np.ndarray:
        """The tid of every event (int64), made on first use (see :attr:`pid`)."""
        return self.memo(("column", "tid"), lambda: self.ids[self.tid_code])

    def pid_at(self, rows: np.ndarray) -> np.ndarray:
        """The pids (int64) of the events at ``rows``."""
        return self.ids[self.pid_code[rows]]

    def tid_at(self, rows: np.ndarray) -> np.ndarray:
        """The tids (int64) of the events at ``rows``."""
        return self.ids[self.tid_code[rows]]

    @property
    def stream(self) -> np.ndarray:
        """args.stream per event (int64, -1 when absent), made on first use."""
        return self._sparse_column("stream")

    @property
    def correlation(self) -> np.ndarray:
        """args.correlation per event (int64, -1 when absent), made on first use."""
        return self._sparse_column("correlation")

    @property
    def device(self) -> np.ndarray:
        """args.device per event (int64, -1 when absent), made on first use."""
        return self._sparse_column("device")

    def _sparse_column(self, key: str) -> np.ndarray:
        return self.memo(("column", key), lambda: self.arg(key, -1).astype(np.int64, copy=False))

    # --- strings ---------------------------------------------------------------------------
    def code(self, text: str) -> int:
        """Code of ``text`` in the string table, -1 if the trace never uses it."""
        return self._codes.get(text, -1)

    def codes(self, texts: Iterable[str]) -> np.ndarray:
        return np.array([c for t in texts if (c := self.code(t)) >= 0], dtype=np.int32)

    def codes_where(self, predicate, *, no_step_names: bool = False) -> np.ndarray:
        """Codes of the strings for which ``predicate(str)`` holds (a loop over the table only).
        ``no_step_names``: the predicate holds for no ``ProfilerStep#N`` name (a prefix other
        than theirs), so those are not asked: a trace of 345,319 steps has as many names, and
        the collectives' regular expression over all of them took 0.058 s a call (a prefix test
        0.032 s), 0.2 ms without them."""
        strings = self.strings
        if no_step_names and len(strings) > STEP_NAMES_SKIPPED_FROM:
            others = np.flatnonzero(self.step_name_numbers()[:-1] < 0).tolist()
            return np.array([i for i in others if predicate(strings[i])], dtype=np.int32)
        return np.array([i for i, s in enumerate(strings) if predicate(s)], dtype=np.int32)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Strings for ``codes`` (object array); -1 decodes to ""."""
        table = np.append(self.strings, "")
        return table[np.where(codes < 0, len(self.strings), codes)]

    # --- derived data ----------------------------------------------------------------------
    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per trace and key, then the same (read-only) result.

        The columns never change, so anything derived from them can be shared by every
        analysis that needs it (the call stack, a category mask) instead of recomputed.
        """
        return _memoised(self._memo, key, compute)

    # --- masks: the one definition of each event set -----------------------------------------
    def is_cat(self, categories: Iterable[str]) -> np.ndarray:
        categories = tuple(categories)
        return self.memo(("cat", categories), lambda: self._code_mask(self.cat, self.codes(categories)))

    def is_name(self, names: Iterable[str]) -> np.ndarray:
        names = tuple(names)
        return self.memo(("name", names), lambda: self._code_mask(self.name, self.codes(names)))

    def name_in(self, codes: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per event (or per row of ``rows``): its name code is one of ``codes``
        (``np.isin(self.name, codes)`` as one table lookup)."""
        return self._code_mask(self.name if rows is None else self.name[rows], codes)

    def _code_mask(self, column: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return code_mask(column, codes, len(self.strings))

    @property
    def complete(self) -> np.ndarray:
        """Complete ("X") events: the ones with a duration."""
        return self.memo("complete", lambda: self.ph == self.code("X"))

    def _complete_and(self, key: str, mask: Callable[[], np.ndarray]) -> np.ndarray:
        return self.memo(key, lambda: self.complete & mask())

    def gpu_activity(self) -> np.ndarray:
        """Kernels, memcpy and memset: the work that makes a GPU busy."""
        return self._complete_and("gpu_activity", lambda: self.is_cat(GPU_ACTIVITY_CATEGORIES))

    def gpu_work_rows(self) -> np.ndarray:
        """Rows of :meth:`gpu_activity` with a finite start and duration, ascending: where every
        GPU-time analysis starts (memoised, read-only)."""
        return self.memo("gpu_work_rows", lambda: np.flatnonzero(
            self.gpu_activity() & np.isfinite(self.dur) & np.isfinite(self.ts)))

    def gpu_side(self) -> np.ndarray:
        return self._complete_and("gpu_side", lambda: self.is_cat(GPU_SIDE_CATEGORIES))

    def kernels(self) -> np.ndarray:
        return self._complete_and("kernels", lambda: self.is_cat(KERNEL_CATEGORIES))

    def memcpys(self) -> np.ndarray:
        return self._complete_and("memcpys", lambda: self.is_cat(MEMCPY_CATEGORIES))

    def memsets(self) -> np.ndarray:
        return self._complete_and("memsets", lambda: self.is_cat(MEMSET_CATEGORIES))

    def launches(self) -> np.ndarray:
        """Runtime/driver calls that enqueue GPU work (see LAUNCH_NAMES)."""
        return self._complete_and("launches", lambda: self.is_cat(RUNTIME_CATEGORIES) & self.is_name(LAUNCH_NAMES))

    def cpu_collectives(self) -> np.ndarray:
        """Complete CPU-side events named as collectives (:data:`CPU_COLLECTIVE`)."""
        return self._complete_and("cpu_collectives", lambda: ~self.is_cat(GPU_SIDE_CATEGORIES) & self._code_mask(
            self.name, self.codes_where(lambda s: CPU_COLLECTIVE.search(s) is not None, no_step_names=True)))

    def host_collectives(self) -> np.ndarray:
        """CPU collectives that run on the host (:data:`HOST_COLLECTIVE_PREFIX`), with a finite
        start and duration: communication as much as a collective kernel is."""
        return self.memo("host_collectives", lambda: self.cpu_collectives() & np.isfinite(self.ts)
                         & np.isfinite(self.dur) & self._code_mask(
                             self.name, self.codes_where(lambda s: s.startswith(HOST_COLLECTIVE_PREFIX), no_step_names=True)))

    def steps(self) -> np.ndarray:
        """ProfilerStep#N spans."""
        return self._complete_and("steps", lambda: self._code_mask(
            self.name, np.flatnonzero(self.step_name_numbers()[:-1] >= 0).astype(np.int32)))

    def step_name_numbers(self) -> np.ndarray:
        """:func:`step_name_table` of the trace's strings (the loader's, when it made one):
        ``step_name_numbers()[name]`` is the step number of events named ``ProfilerStep#N``."""
        return self.memo("step_name_numbers", lambda: step_name_table(self.strings))

    def step_numbers(self) -> np.ndarray:
        """Sorted distinct profiler step numbers in the trace (memoised: a per-rank summary)."""
        return self.memo("step_numbers", lambda: sorted_unique(self.step_name_numbers()[self.name[self.steps()]]))

    def kernel_classes(self, rows: np.ndarray) -> np.ndarray:
        """kernel_class() of each row in ``rows`` (object array of the class names)."""
        return KERNEL_CLASS_NAMES[self.gpu_class()[rows]]

    def gpu_class(self) -> np.ndarray:
        """Per event: index into ``KERNEL_CLASS_NAMES`` (OTHER for CPU events).

        Classified once per distinct (name, category) pair of GPU-side events, so the cost is
        one pass over the events plus a loop over distinct kernel names.
        """
        def compute() -> np.ndarray:
            out = np.full(self.n_events, CLASS_INDEX[OTHER], dtype=np.int8)
            rows = np.flatnonzero(self.gpu_side())
            if len(rows):
                cat_ids, cat_of_row = distinct_codes(self.cat[rows], len(self.strings))  # a few categories
                name_codes = self.name[rows].astype(np.int64) + 1  # -1 (no name) -> 0
                key = name_codes * len(cat_ids) + cat_of_row
                uniq, inverse = distinct_codes(key, (len(self.strings) + 1) * len(cat_ids))
                names, cats = np.divmod(uniq, len(cat_ids))
                classes = np.array([CLASS_INDEX[kernel_class(self.strings[n - 1] if n > 0 else "",
                                                             self.strings[cat_ids[c]] if cat_ids[c] >= 0 else "")]
                                    for n, c in zip(names.tolist(), cats.tolist())], dtype=np.int8)
                out[rows] = classes[inverse]
            return out

        return self.memo("gpu_class", compute)

    # --- args ------------------------------------------------------------------------------
    def arg(self, key: str, default: Any, rows: np.ndarray | None = None) -> np.ndarray:
        """Values of args ``key``, ``default`` where absent: one per event, or with ``rows`` (an
        integer array of any shape) one per entry of ``rows``, looked up in the sparse column
        without building the dense one. The keys held as columns (:data:`DENSE_ARGS`) are read
        from their column."""
        if key in DENSE_ARGS and key not in self.args:
            return self._dense_arg(getattr(self, DENSE_ARGS[key]), default, rows)
        col = self.args.get(key)
        if col is not None and len(col.rows) == 0:
            col = None
        dtype = np.asarray(default).dtype if col is None else np.result_type(col.values.dtype, np.asarray(default).dtype)
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            out = np.full(rows.shape, default, dtype=dtype)
            if col is not None:
                pos = np.minimum(search_sorted(col.rows, rows), len(col.rows) - 1)  # rows ascend
                hit = col.rows[pos] == rows
                out[hit] = col.values[pos[hit]]
            return out
        out = np.full(self.n_events, default, dtype=dtype)
        if col is not None:
            out[col.rows] = col.values
        return out

    @staticmethod
    def _dense_arg(column: np.ndarray, default: Any, rows: np.ndarray | None) -> np.ndarray:
        values = column if rows is None else column[np.asarray(rows, dtype=np.int64)]
        dtype = np.result_type(column.dtype, np.asarray(default).dtype)
        return np.where(values == -1, np.asarray(default, dtype=dtype), values.astype(dtype, copy=False))

    def arg_text(self, key: str) -> np.ndarray:
        """Decoded strings of a string-valued arg (object array, "" where absent)."""
        return self.decode(self.arg(key, -1).astype(np.int64))

    def absolute_ts_us(self) -> np.ndarray:
        """Trace timestamps as written in the file (float64: sub-µs digits may round off)."""
        return self.ts + self.meta.ts_origin_us

    def span_us(self) -> tuple[float, float]:
        """(first start, last end) over complete events, in trace µs; (nan, nan) if none.

        Memoised: the summary, the queue analyses and the step metrics all ask for it.
        """
        def compute() -> tuple[float, float]:
            firsts, lasts = [], []
            for lo in range(0, self.n_events, _CHUNK):  # cache-sized pieces: no temporary over every event
                ts, dur = self.ts[lo:lo + _CHUNK], self.dur[lo:lo + _CHUNK]
                x = self.complete[lo:lo + _CHUNK] & np.isfinite(dur)
                if x.any():  # SIMD passes (a boolean-indexed copy, or a where= reduction, is slower)
                    firsts.append(np.where(x, ts, np.inf).min())
                    lasts.append(np.where(x, ts + dur, -np.inf).max())
            if not firsts:
                return (float("nan"), float("nan"))
            return (float(np.min(firsts)), float(np.max(lasts)))

        return self.memo("span_us", compute)


_CHUNK = 1 << 16
"""Events per piece of a pass done piece by piece (:meth:`RankTrace.span_us`): its
temporaries stay in the cache and need no fresh memory."""


def _memoised(store: dict, key: Hashable, compute: Callable[[], Any]) -> Any:
    """``store[key]``, computed by ``compute()`` the first time (a returned array is made
    read-only: it is shared)."""
    try:
        return store[key]
    except KeyError:
        with phase(f"memo:{key[0] if isinstance(key, tuple) else key}"):
            value = compute()
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        store[key] = value
        return value


@dataclass(frozen=True, slots=True)
class TraceSet:
    """The ranks of one job, keyed and iterated in rank order."""

    ranks: Mapping[int, RankTrace]
    source: str
    _memo: dict = field(default_factory=dict, repr=False, compare=False)
    """Derived data over all ranks, computed once per trace set: see :meth:`memo`."""

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per trace set and key, then the same (read-only) result: for
        cross-rank data several analyses share (the step table, per-step straggler offsets).
        Per-rank data belongs on :meth:`RankTrace.memo`."""
        return _memoised(self._memo, key, compute)

    def __iter__(self) -> Iterator[RankTrace]:
        return iter(self.ranks[r] for r in sorted(self.ranks))

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, rank: int) -> RankTrace:
        return self.ranks[rank]

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    @property
    def origin_us(self) -> int:
        """The earliest rank origin: the common zero of :meth:`aligned_ts`."""
        return min((t.meta.ts_origin_us for t in self.ranks.values()), default=0)

    def aligned_ts(self, rank: int) -> np.ndarray:
        """``ts`` of ``rank`` on the job's common clock (µs since ``origin_us``), exact."""
        trace = self.ranks[rank]
        return trace.ts + float(trace.meta.ts_origin_us - self.origin_us)
