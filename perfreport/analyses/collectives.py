"""Communication overhead: every collective call, its size, bandwidth and exposed time, and which
rank makes the others wait.

A *collective call* is the GPU work of one NCCL/RCCL collective: the COMMUNICATION kernels
(:func:`perfreport.model.kernel_class`) launched under one CPU-side collective op (``nccl:*`` /
``rccl:*`` / ``gloo:*`` annotations, ``c10d::*`` ops, ``record_param_comms``); a kernel with no
such op above its launch is a call of its own. Kernels hang under their launch in the call
stack (:func:`perfreport.analyses.callstack.call_stack`, built from ``RankTrace.linked``), so the
op is found by walking up at most ``ANCESTOR_LEVELS`` parents.

Collectives that run on the host are calls too (communication wherever it runs): each ``gloo:*``
span on a CPU thread (:meth:`perfreport.model.RankTrace.host_collectives`; gloo moves even CUDA
tensors through the host) is one call, ``kernel`` its op name and ``kernels`` 0; its size, group
and algorithm are unknown (gloo records no args) and ``exposed_us`` is its time not overlapped by
a COMPUTATION kernel. Collectives the profiler recorded with neither (kernels it missed) are not
calls.

What each call reports, and where it comes from (nearest source first: the kernel's own args,
then the collective ops above it):

* ``kind``: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv, reduce,
  barrier or other, normalised (:func:`collective_kind`) from the ``Collective name`` arg, else
  the op name (``nccl:_all_gather_base``, ``c10d::alltoall_base_``), else the kernel name. Old
  NCCL names every kernel ``SendRecv``, so the op name wins over the kernel's.
* ``msg_bytes``: max(``In msg nelems``, ``Out msg nelems``) × the size of ``dtype`` (NCCL-tests'
  message size: the output of an all_gather, the input of a reduce_scatter). Traces without
  those args (PyTorch < 2.1) fall back to the largest tensor in the ops' ``Input Dims`` /
  ``Input type``. NaN when neither tells.
* ``process_group`` (``Process Group Name``, "" when unknown) and ``group_size`` (``Group size``,
  else the length of ``Process Group Ranks``, else the group's ``pg_size`` in ``distributedInfo``,
  else the world size, an assumption that is wrong for sub-groups in old traces).
* ``ts_us`` (first kernel start, on the job's common clock, :meth:`TraceSet.aligned_ts`),
  ``dur_us`` (first start to last end) and ``exposed_us``: the call's kernel time not overlapped
  by any COMPUTATION kernel of the rank (communication hidden under compute costs nothing).
* ``algbw_gbps`` = msg_bytes / dur (decimal GB/s) and ``busbw_gbps`` = algbw × the NCCL-tests
  factor for n = group_size (:func:`busbw_factor`): 2(n−1)/n for all_reduce, (n−1)/n for
  all_gather, reduce_scatter and all_to_all, 1 for broadcast, reduce and send_recv.
* ``algorithm`` / ``protocol``: RING/TREE/NVLS/COLLNET_*/PAT and LL/LL128/SIMPLE from the
  kernel name when it says ("" otherwise, as in ``ncclDevKernel_SendRecv``).

* ``seq``: NCCL's sequence number of the call in its process group (the ``Seq`` arg PyTorch
  writes on the collective op, HTA 0.6's ``seq_num``), -1 when the trace has none.

The text columns (``kind``, ``process_group``, ``algorithm``, ``protocol``, ``kernel``) are
categorical: a rank makes millions of calls (a gloo rank a dozen a step) with a handful of
distinct texts, so each call holds a small code, made from the events' string codes, and the
summaries group on those codes (:func:`rank_collectives`).

Across ranks, :mod:`perfreport.analyses.matching` pairs the calls that are one collective, measures
how far apart the ranks start them and names the straggler.

Edge cases: no GPU or no collectives gives empty frames with the columns; no profiler steps
gives step -1 everywhere.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from ..model import CLASS_INDEX, COMMUNICATION, COMPUTATION, CPU_COLLECTIVE, RankTrace, TraceSet, distinct_codes
from ..units import BYTES_PER_GB, US_PER_S, pct
from .callstack import call_stack
from .intervals import union
from .grouping import Grouped, coded_texts, concat_columns, texts_of_codes
from .kernels import gpu_work

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv", "reduce",
         "barrier", "other")
ANCESTOR_LEVELS = 8
"""How far above a kernel the collective op is looked for (kernel → launch → nccl:* annotation →
record_param_comms → c10d op is 4 levels)."""
COLLECTIVE_OP = CPU_COLLECTIVE
"""CPU-side events that describe a collective call (one definition, in perfreport.model)."""

_ALGO = re.compile(r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)_(LL128|LL|SIMPLE)"
                   r"(?![A-Za-z0-9])")
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "double": 8, "float64": 8, "f64": 8, "half": 2, "float16": 2, "f16": 2,
    "bfloat16": 2, "bf16": 2, "int": 4, "int32": 4, "i32": 4, "uint32": 4, "long": 8, "int64": 8, "i64": 8,
    "uint64": 8, "short": 2, "int16": 2, "uint16": 2, "byte": 1, "uint8": 1, "u8": 1, "unsignedchar": 1, "char": 1,
    "int8": 1, "i8": 1, "signedchar": 1, "bool": 1, "complexhalf": 4, "complexfloat": 8, "complex64": 8,
    "complexdouble": 16, "complex128": 16,
}
"""Bytes per element by dtype name, as the profiler writes it ("Float", "c10::BFloat16",
"unsigned char", "float"), normalised by :func:`dtype_bytes`."""

CALL_COLUMNS = ("rank", "step", "kind", "process_group", "group_size", "ts_us", "dur_us", "exposed_us",
                "msg_bytes", "algbw_gbps", "busbw_gbps", "algorithm", "protocol", "kernel", "kernels", "seq")
SUMMARY_COLUMNS = ("rank", "kind", "process_group", "count", "total_us", "exposed_us", "exposed_pct",
                   "msg_bytes_mean", "msg_bytes_total", "algbw_gbps_mean", "busbw_gbps_mean")
STEP_COLUMNS = ("rank", "step", "kind", "process_group", "count", "dur_us", "exposed_us", "msg_bytes")

_TEXT = {"kind", "process_group", "algorithm", "protocol", "kernel", "matched_by"}
CODED = ("kind", "process_group", "algorithm", "protocol", "kernel")
"""The call table's text columns, held as categories (a code per call into the few distinct
texts; see :func:`rank_collectives`)."""
_INTS = {"rank", "step", "kernels", "seq", "count", "call_index", "ranks", "earliest_rank", "latest_rank",
         "calls_compared", "latest_calls", "late_steps"}


_BOOLS = {"overlapping", "hta_is_straggler", "is_straggler"}


def typed_empty(columns: tuple[str, ...]) -> pd.DataFrame:
    """A frame of no row with ``columns``, each of the dtype its name says (texts, counts, flags,
    else floats)."""
    def dtype(c: str) -> type:
        return object if c in _TEXT else np.int64 if c in _INTS else bool if c in _BOOLS else np.float64
    return pd.DataFrame({c: np.empty(0, dtype(c)) for c in columns})  # arrays: no index alignment


def _empty_calls() -> pd.DataFrame:
    """The call table with no call: its text columns categorical, as a table with calls has them."""
    return typed_empty(CALL_COLUMNS).assign(**{c: coded_texts([], np.empty(0, np.intp)) for c in CODED})


def _coded_texts(trace: RankTrace, codes: np.ndarray, fn, missing: str) -> pd.Categorical:
    """``fn(string)`` for each code (``missing`` for -1) as a categorical text column
    (:func:`~.grouping.texts_of_codes`)."""
    return texts_of_codes(codes, len(trace.strings), lambda c: fn(trace.strings[c]) if c >= 0 else missing)


def _concat_calls(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Call tables one after the other, their text columns' categories united
    (:func:`~.grouping.concat_columns`): one copy of the calls (the frame is made on the joined
    columns, not from a copy of them: ``pd.DataFrame`` of a dict copies every column)."""
    if len(frames) == 1:
        return frames[0]
    return pd.DataFrame({c: concat_columns([f[c] for f in frames]) for c in frames[0].columns}, copy=False)

# --- names -------------------------------------------------------------------------------------
def dtype_bytes(name: str) -> float:
    """Bytes per element of a profiler dtype name; NaN when unknown ("Scalar", "TensorList", "")."""
    key = re.sub(r"[\s_]", "", name.lower().removeprefix("c10::"))
    if key.startswith("float8"):
        return 1.0
    return float(_DTYPE_BYTES.get(key, math.nan))


def collective_kind(text: str) -> str:
    """One of ``KINDS`` for a collective's name: a ``Collective name`` arg ("allreduce",
    "_allgather_base"), an op ("nccl:all_to_all", "c10d::_reduce_scatter_base_") or a kernel
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)")."""
    s = re.sub(r"[^a-z]", "", text.lower().split("(")[0])
    for needle, kind in (("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
                         ("allgather", "all_gather"), ("alltoall", "all_to_all"), ("broadcast", "broadcast"),
                         ("sendrecv", "send_recv"), ("send", "send_recv"), ("recv", "send_recv"),
                         ("barrier", "barrier"), ("reduce", "reduce")):
        if needle in s:
            return kind
    return "other"


def busbw_factor(kind: str, group_size: float) -> float:
    """NCCL-tests' bus-bandwidth factor (busbw = algbw × factor) for a group of ``group_size``
    ranks: what each link carries, comparable with the hardware's peak. NaN for barrier/other
    or an unknown size."""
    return float(busbw_factors(np.array([kind], dtype=object), np.array([group_size], dtype=np.float64))[0])


def busbw_factors(kinds: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """:func:`busbw_factor` over arrays: 2(n−1)/n for all_reduce; (n−1)/n for all_gather,
    reduce_scatter and all_to_all; 1 for broadcast, reduce and send_recv; NaN otherwise."""
    n = np.asarray(group_sizes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.select([kinds == "all_reduce", np.isin(kinds, ("all_gather", "reduce_scatter", "all_to_all")),
                            np.isin(kinds, ("broadcast", "reduce", "send_recv"))],
                           [2.0 * (n - 1) / n, (n - 1) / n, np.ones_like(n)], np.nan)
    return np.where(n >= 1, factor, np.nan)


def kernel_algorithm(name: str) -> tuple[str, str]:
    """(algorithm, protocol) from an NCCL kernel name, ("", "") when it does not say."""
    m = _ALGO.search(name)
    return (m.group(1), m.group(2)) if m else ("", "")


def tensor_bytes(dims_text: str, types_text: str) -> float:
    """Largest tensor (elements × dtype size) of an op's ``Input Dims`` / ``Input type`` JSON
    texts; NaN when no input is a tensor of known dtype."""
    try:
        dims, types = json.loads(dims_text), json.loads(types_text)
    except (ValueError, TypeError):
        return math.nan
    best = math.nan
    for d, t in zip(dims if isinstance(dims, list) else [], types if isinstance(types, list) else []):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and isinstance(t, str):
            size = float(np.prod(d)) * dtype_bytes(t)
            if not math.isnan(size):
                best = size if math.isnan(best) else max(best, size)
    return best


def _map_codes(trace: RankTrace, codes: np.ndarray, fn, missing):
    """``fn(string)`` for each code (a loop over the distinct codes only); ``missing`` for -1."""
    uniq, inverse = distinct_codes(codes, len(trace.strings))
    values = np.array([fn(trace.strings[c]) if c >= 0 else missing for c in uniq.tolist()], dtype=object)
    return values[inverse]


# --- one rank ----------------------------------------------------------------------------------
def _nearest(values: np.ndarray, ok: np.ndarray, missing):
    """Per row of the (calls × levels) arrays: the first value where ``ok``, else ``missing``."""
    first = np.argmax(ok, axis=1)
    has = ok[np.arange(len(ok)), first]
    return np.where(has, values[np.arange(len(ok)), first], missing)


def _exposed(call: np.ndarray, starts: np.ndarray, ends: np.ndarray, comp: tuple[np.ndarray, np.ndarray],
             n_calls: int) -> np.ndarray:
    """Per call (ids 0 … ``n_calls`` - 1, each with an interval at least): time of the union of
    its kernels not covered by the compute intervals."""
    covered_until = _covered_until(*union(*comp))
    if len(call) == n_calls:  # one interval per call (every host call, most NCCL calls): its own union
        seg_s, seg_e = np.empty(n_calls), np.empty(n_calls)
        seg_s[call], seg_e[call] = starts, ends
        return (seg_e - seg_s) - (covered_until(seg_e) - covered_until(seg_s))
    order = np.lexsort((starts, call))
    cid, s, e = call[order], starts[order], ends[order]
    reach = pd.Series(e).groupby(cid).cummax().to_numpy()
    new = np.r_[True, (cid[1:] != cid[:-1]) | (s[1:] > reach[:-1])]
    first = np.flatnonzero(new)
    seg_s, seg_e, seg_c = s[first], reach[np.r_[first[1:], len(s)] - 1], cid[first]
    exposed = (seg_e - seg_s) - (covered_until(seg_e) - covered_until(seg_s))
    return np.bincount(seg_c, weights=exposed, minlength=n_calls)


def _covered_until(cs: np.ndarray, ce: np.ndarray):
    """``covered_until(t)``: time of the disjoint sorted intervals [cs, ce) before each t."""
    if not len(cs):
        return lambda t: np.zeros(len(t))
    length = ce - cs
    cum = np.r_[0.0, np.cumsum(length)]

    def covered_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(cs, t, side="right") - 1
        j = np.clip(i, 0, None)
        return np.where(i >= 0, cum[j] + np.clip(t - cs[j], 0.0, length[j]), 0.0)
    return covered_until


def _count_listed(text: str) -> float:
    """Number of entries of a JSON list such as "[0, 1, 2]"; NaN when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return math.nan
    return float(len(value)) if isinstance(value, list) and value else math.nan


def _group_sizes(trace: RankTrace, size_arg: np.ndarray, ranks_code: np.ndarray, pg: np.ndarray) -> np.ndarray:
    """Group size per call: the arg, else the listed ranks, else distributedInfo, else world size."""
    out = np.where(size_arg > 0, size_arg, np.nan).astype(np.float64)
    out = np.where(np.isnan(out), _map_codes(trace, ranks_code, _count_listed, math.nan).astype(np.float64), out)
    pg_sizes = {str(c.get("pg_name")): c.get("pg_size") for c in trace.meta.distributed_info.get("pg_config", [])
                if isinstance(c, dict)}
    out = np.where(np.isnan(out), pd.Series(pg, dtype=object).map(pg_sizes).to_numpy(np.float64), out)
    world = trace.meta.world_size
    return np.where(np.isnan(out), np.nan if world is None else float(world), out)


def _ancestors(trace: RankTrace, k_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(chain, op_cell): ``chain[i, j]`` is the j-th ancestor of kernel ``k_rows[i]`` in the call
    stack (column 0 the kernel, 1 its launch; -1 above the root), ``op_cell`` where it is a
    CPU-side collective op."""
    stack = call_stack(trace)
    chain = np.full((len(k_rows), ANCESTOR_LEVELS + 1), -1, dtype=np.int64)
    chain[:, 0] = k_rows
    for j in range(1, ANCESTOR_LEVELS + 1):  # a loop over levels
        prev = chain[:, j - 1]
        chain[:, j] = np.where(prev >= 0, stack.parent[np.clip(prev, 0, None)], -1)
    safe = np.clip(chain, 0, None)  # only the chains' cells are looked at: no mask over all events
    is_op = np.isin(trace.name[safe], trace.codes_where(lambda s: COLLECTIVE_OP.search(s) is not None,
                                                           no_step_names=True)) \
        & ~trace.gpu_side()[safe]
    op_cell = (chain >= 0) & is_op
    op_cell[:, 0] = False
    return chain, op_cell


def _tensor_fallback(trace: RankTrace, chain: np.ndarray, op_cell: np.ndarray) -> np.ndarray:
    """Per kernel: the largest tensor (bytes) in the Input Dims / Input type of the collective
    ops above it (:func:`tensor_bytes`, once per distinct pair of texts); NaN if none."""
    safe = np.clip(chain, 0, None)
    dims, types = trace.arg("Input Dims", -1, safe).astype(np.int64), trace.arg("Input type", -1, safe).astype(np.int64)
    has = op_cell & (dims >= 0) & (types >= 0)
    best = np.full(len(chain), np.nan)
    if not has.any():
        return best
    base = len(trace.strings) + 1
    uniq, inverse = np.unique((dims * base + types)[has], return_inverse=True)
    sizes = np.array([tensor_bytes(trace.strings[p // base], trace.strings[p % base]) for p in uniq])
    cells = np.full(chain.shape, np.nan)
    cells[has] = sizes[inverse.ravel()]
    with np.errstate(invalid="ignore"):
        return np.fmax.reduce(cells, axis=1)


def _kernel_attributes(trace: RankTrace, k_rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per communication kernel: its call (the nearest collective op above it, else itself),
    kind, process group, group size and message bytes (see the module docstring)."""
    chain, op_cell = _ancestors(trace, k_rows)
    safe = np.clip(chain, 0, None)
    src = op_cell.copy()
    src[:, 0] = True  # newer traces put the collective's args on the kernel itself

    def arg(key: str) -> np.ndarray:
        vals = trace.arg(key, -1, safe)
        return _nearest(vals, src & (vals >= 0), -1)

    owner = _nearest(chain, op_cell, -1)
    # kind: Collective name arg, else the nearest op that is not record_param_comms, else the kernel
    named = op_cell & (trace.name[safe] != trace.code("record_param_comms"))
    text = arg("Collective name")
    text = np.where(text >= 0, text, _nearest(trace.name[safe], named, -1))
    text = np.where(text >= 0, text, trace.name[k_rows])
    nel = np.maximum(arg("In msg nelems"), arg("Out msg nelems")).astype(np.float64)
    size = _map_codes(trace, arg("dtype"), dtype_bytes, math.nan).astype(np.float64)
    msg = np.where(nel >= 0, nel * size, np.nan)
    msg = np.where(np.isnan(msg), _tensor_fallback(trace, chain, op_cell), msg)
    pg = _coded_texts(trace, arg("Process Group Name"), str, "")
    return {"seq": arg("Seq").astype(np.int64),
        "call_key": np.where(owner >= 0, owner, k_rows), "kind": _coded_texts(trace, text, collective_kind, "other"),
        "pg": pg, "group": _group_sizes(trace, arg("Group size"), arg("Process Group Ranks"), np.asarray(pg)),
        "msg": msg,
    }


def rank_collectives(trace: RankTrace) -> pd.DataFrame:
    """:func:`collectives` rows of one rank, ``ts_us`` in trace µs. Memoised on the trace: read
    it, never modify it.

    Its text columns (:data:`CODED`) are categorical: a code per call into the few distinct texts,
    made from the events' string codes. A gloo rank grown to 1 GB makes 2 M calls; with Python
    strings the table took 0.25-0.29 s to build (0.13-0.14 s with codes), 0.11-0.12 s to pickle
    into the rank's digest and 0.10 s to unpickle in the parent (nothing with codes: they go out
    of band), and its summaries 0.16 s to group (0.12 s); 2 runs each, one rank alone."""
    return trace.memo("collectives", lambda: _rank_collectives(trace))


def _rank_collectives(trace: RankTrace) -> pd.DataFrame:
    rows, starts, ends, classes = gpu_work(trace)
    is_comp = classes == CLASS_INDEX[COMPUTATION]
    comp = (starts[is_comp], ends[is_comp])
    frames = [f for f in (_gpu_calls(trace, rows, starts, ends, classes, comp), _host_calls(trace, comp)) if len(f)]
    if not frames:
        return _empty_calls()
    if len(frames) == 1:  # each kind of call is built in start order: no reordering copy of the table
        return frames[0]
    out = _concat_calls(frames)
    return out.take(np.argsort(out["ts_us"].to_numpy(), kind="stable")).reset_index(drop=True)


def _host_calls(trace: RankTrace, comp: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """One call per collective that runs on the host (see the module docstring), in start order
    (ties in row order)."""
    h = np.flatnonzero(trace.host_collectives())
    if not len(h):
        return _empty_calls()
    h = h[np.argsort(trace.ts[h], kind="stable")]
    ts, dur = trace.ts[h], trace.dur[h]
    exposed = _exposed(np.arange(len(h)), ts, ts + dur, comp, len(h))
    world = trace.meta.world_size
    nan = np.full(len(h), np.nan)
    none = coded_texts([""], np.zeros(len(h), np.intp))  # (categorical: shared, never written)
    # every column its own fresh array, so the frame may hold them as they are (copy=False): a
    # gloo rank's 2 M calls were copied into pandas' blocks, 0.3 of its 0.65 s
    return pd.DataFrame(copy=False, data={
        "rank": np.full(len(h), trace.rank, np.int64), "step": trace.iteration[h].astype(np.int64),
        "kind": _coded_texts(trace, trace.name[h], lambda n: collective_kind(n.split(":", 1)[-1]), "other"),
        "process_group": none,
        "group_size": np.full(len(h), np.nan if world is None else float(world)), "ts_us": ts, "dur_us": dur,
        "exposed_us": exposed, "msg_bytes": nan, "algbw_gbps": nan.copy(), "busbw_gbps": nan.copy(),
        "algorithm": none, "protocol": none,
        "kernel": _coded_texts(trace, trace.name[h], str, ""), "kernels": np.zeros(len(h), np.int64),
        "seq": np.full(len(h), -1, np.int64),  # gloo spans carry no NCCL sequence number: matched by order
    })


def _gpu_calls(trace: RankTrace, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, classes: np.ndarray,
               comp: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """One call per collective run by GPU kernels (see the module docstring), in start order
    (ties in the order of their call keys)."""
    comm = trace.kernels()[rows] & (classes == CLASS_INDEX[COMMUNICATION])
    k_rows, k_s, k_e = rows[comm], starts[comm], ends[comm]
    if len(k_rows) == 0:
        return _empty_calls()
    k = _kernel_attributes(trace, k_rows)
    call_ids, call = np.unique(k["call_key"], return_inverse=True)
    call = call.ravel()
    exposed = _exposed(call, k_s, k_e, comp, len(call_ids))
    order = np.lexsort((k_s, call))  # by call, then start (stable)
    heads = np.flatnonzero(np.r_[True, call[order][1:] != call[order][:-1]])
    first = order[heads]  # each call's first kernel (by start): its step, names and args
    dur = np.maximum.reduceat(k_e[order], heads) - k_s[first]
    counts = np.bincount(call, minlength=len(call_ids)).astype(np.int64)
    by_start = np.argsort(k_s[first], kind="stable")  # the table's order
    first, dur, exposed, counts = first[by_start], dur[by_start], exposed[by_start], counts[by_start]
    ts = k_s[first]
    msg_bytes = k["msg"][first].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(dur > 0, msg_bytes / BYTES_PER_GB / (dur / US_PER_S), np.nan)
    kind, group = k["kind"][first], k["group"][first].astype(np.float64)
    name = trace.name[k_rows][first]
    out = pd.DataFrame({
        "rank": np.full(len(call_ids), trace.rank, np.int64), "step": trace.iteration[k_rows][first].astype(np.int64),
        "kind": kind, "process_group": k["pg"][first], "group_size": group, "ts_us": ts, "dur_us": dur,
        "exposed_us": exposed, "msg_bytes": msg_bytes, "algbw_gbps": algbw,
        "busbw_gbps": algbw * busbw_factors(np.asarray(kind), group),
        "algorithm": _coded_texts(trace, name, lambda s: kernel_algorithm(s)[0], ""),
        "protocol": _coded_texts(trace, name, lambda s: kernel_algorithm(s)[1], ""),
        "kernel": _coded_texts(trace, name, str, ""), "kernels": counts,
        "seq": k["seq"][first],
    })
    return out


# --- all ranks ---------------------------------------------------------------------------------
def collectives(traces: TraceSet) -> pd.DataFrame:
    """One row per collective call of every rank, in start order per rank (see the module
    docstring). Columns: rank, step, kind, process_group, group_size, ts_us, dur_us, exposed_us,
    msg_bytes, algbw_gbps, busbw_gbps, algorithm, protocol, kernel (the first kernel's name),
    kernels (how many). The text columns (:data:`CODED`) are categorical (see
    :func:`rank_collectives`), their categories the texts of every rank.

    Computed once per trace set (the matching and the straggler evidence read it too); each call
    gets its own (shallow, copy-on-write) frame."""
    return traces.memo("collectives_table", lambda: _collectives(traces)).copy(deep=False)


def _collectives(traces: TraceSet) -> pd.DataFrame:
    """The ranks' calls joined, each rank's starts moved onto the job's clock once they are,
    not a shifted copy of each rank's calls joined and then copied again: 16 gloo-grown ranks of
    50 MB (1.6 M calls a side, a 153 MB table) peaked at 319 MB building it, 179 MB so
    (tracemalloc)."""
    ranks = [(t, f) for t in traces if len(f := rank_collectives(t))]  # a loop over ranks
    if not ranks:
        return _empty_calls()
    calls = _concat_calls([f for _, f in ranks])
    shifts = np.repeat([float(t.meta.ts_origin_us - traces.origin_us) for t, _ in ranks], [len(f) for _, f in ranks])
    return calls.assign(ts_us=calls["ts_us"].to_numpy(np.float64) + shifts).reset_index(drop=True)  # a new column


def collective_summary(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, kind, process_group): calls, total and exposed time (µs), exposed % of total,
    mean and total message bytes, and the mean of the calls' algbw/busbw (GB/s). Grouped rank by
    rank, on each rank's coded texts (the table is in rank order either way)."""
    frames = [f for t in traces if len(f := _rank_summary(rank_collectives(t)))]  # a loop over ranks
    if not frames:
        return typed_empty(SUMMARY_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["exposed_pct"] = [pct(e, t) for e, t in zip(out["exposed_us"], out["total_us"])]
    return out[list(SUMMARY_COLUMNS)]


def _rank_summary(c: pd.DataFrame) -> pd.DataFrame:
    if not len(c):
        return c
    g = Grouped(c, ["rank", "kind", "process_group"])
    return g.frame({
        "count": g.size(), "total_us": g.sum("dur_us"), "exposed_us": g.sum("exposed_us"),
        "msg_bytes_mean": g.mean("msg_bytes"), "msg_bytes_total": g.sum("msg_bytes", min_count=1),
        "algbw_gbps_mean": g.mean("algbw_gbps"), "busbw_gbps_mean": g.mean("busbw_gbps"),
    })


def collectives_per_step(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, step, kind, process_group): calls, summed duration and exposed time (µs) and
    message bytes (NaN when no call's size is known): the gate's per-step samples. Step -1
    collects calls launched outside any ProfilerStep."""
    frames = [f for t in traces if len(f := rank_collectives_per_step(t))]  # a loop over ranks
    return pd.concat(frames, ignore_index=True) if frames else typed_empty(STEP_COLUMNS)


def rank_collectives_per_step(trace: RankTrace) -> pd.DataFrame:
    """:func:`collectives_per_step` of one rank. Memoised on the trace, and carried by its
    digest: a compare's gate reads it in the parent, which grouped both sides' calls again (a
    gloo rank's 2 M calls: 0.2 s a side). Read it, never modify it."""
    return trace.memo("collectives_per_step", lambda: _rank_collectives_per_step(trace))


def _rank_collectives_per_step(trace: RankTrace) -> pd.DataFrame:
    c = rank_collectives(trace)
    if not len(c):
        return typed_empty(STEP_COLUMNS)
    g = Grouped(c, ["step", "kind", "process_group"])
    out = g.frame({"count": g.size(), "dur_us": g.sum("dur_us"), "exposed_us": g.sum("exposed_us"),
                   "msg_bytes": g.sum("msg_bytes", min_count=1)})
    return out.assign(rank=np.full(len(out), trace.rank, dtype=np.int64))[list(STEP_COLUMNS)]


__all__ = ["busbw_factor", "busbw_factors", "collective_kind", "collective_summary", "collectives",
           "collectives_per_step", "dtype_bytes", "kernel_algorithm", "rank_collectives", "rank_collectives_per_step",
           "tensor_bytes"]
