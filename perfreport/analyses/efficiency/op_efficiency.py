"""Per op (name, shapes, dtypes): kernel time, achieved TFLOPS/s and TB/s, and the roofline.

Kernel time reaches an op through the call tree of :mod:`perfreport.analyses.callstack` (the
one shared with the op–kernel table: CPU ops nested per thread, each GPU event hung under the
launch that enqueued it). A GPU event belongs to its *innermost enclosing op that has a
performance model* (``aten::addmm`` inside ``aten::linear``, as TraceLens attributes it); a GPU
event under no modelled op belongs to its outermost ``cpu_op`` (the op–kernel table's owner)
and that op's row says ``model = "none"``: counted, never guessed.

Per group: ``tflops_per_s`` = FLOPs of all calls / kernel time, ``tb_per_s`` likewise for
bytes, ``arithmetic_intensity`` = FLOPs / byte, ``pct_of_peak`` = achieved / the GPU's peak for
the op's compute class, ``pct_of_bw`` = achieved / the GPU's memory bandwidth, ``bound`` =
compute when the intensity is at or above the ridge point (peak / bandwidth) else memory, and
``pct_of_roofline`` = the roofline's time (max(FLOPs / peak, bytes / bandwidth)) / the kernel
time, i.e. achieved / min(peak, intensity × bandwidth) (for a copy, bandwidth alone). Without a known GPU the
peak columns are empty and ``bound`` is "". ``share_of_gpu_pct`` is the group's kernel time over
all the rank's GPU time (kernels, memcpy, memset); ``time_at_stake_us`` = kernel time ×
(1 − pct_of_roofline / 100), floored at 0: the time the group would save at its roofline, which
orders "which op to look at first". A model counts the algorithm's FLOPs, so a kernel that
does fewer (Winograd or FFT convolutions) can exceed 100 % of peak; that is reported as is.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd

from ...model import CPU_OP_CATEGORIES, RankTrace, TraceSet
from ..callstack import call_stack, nearest_match, outermost_ops, stack_levels
from ..grouping import distinct_rows
from .gpu_metrics import args_at, metrics_of, weighted_pct
from .gpus import GpuSpec, rank_gpu
from .perfmodel import MODELS, OpModel, model

COLUMNS = ("rank", "op", "label", "input_dims", "input_types", "concrete_inputs", "model", "kind", "dtype",
           "compute_class", "calls", "kernels", "kernel_us", "gflops_per_call", "bytes_per_call", "tflops_per_s",
           "tb_per_s", "arithmetic_intensity", "peak_tflops_per_s", "pct_of_peak", "pct_of_bw", "pct_of_roofline",
           "bound", "share_of_gpu_pct", "time_at_stake_us", "tensor_core_pct", "est_sm_efficiency_pct",
           "est_achieved_occupancy_pct", "gpu")
"""Columns of :func:`op_efficiency` (units in the names: µs, GFLOP, B, TFLOPS/s, TB/s, FLOP/B, %)."""
_TEXT = {"op", "label", "input_dims", "input_types", "concrete_inputs", "model", "kind", "dtype", "compute_class",
         "bound", "gpu"}
_INT = {"rank", "calls", "kernels"}


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, object if c in _TEXT else np.int64 if c in _INT else np.float64)
                         for c in COLUMNS})


def op_efficiency(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, op name, Input Dims, Input type, Concrete Inputs) that ran GPU work,
    by kernel time descending (see module doc for the columns)."""
    frames = [f for t in traces if len(f := rank_op_efficiency(t))]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def _signature(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """(n, 4) int64 string codes: name, Input Dims, Input type, Concrete Inputs (-1 when absent)."""
    args = args_at(trace, [(key, -1) for key in ("Input Dims", "Input type", "Concrete Inputs")], rows)
    return np.column_stack([trace.name[rows].astype(np.int64)] + [a.astype(np.int64) for a in args])


def _text(trace: RankTrace, code: int) -> str:
    return trace.strings[code] if code >= 0 else ""


def modelled_ops(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[OpModel | None]]:
    """(op rows, their signature id, the distinct signatures (k, 4), a model per signature) for the
    rank's ``cpu_op`` events whose name has a formula."""
    stack = call_stack(trace)
    ops = np.flatnonzero(trace.complete & trace.is_cat(CPU_OP_CATEGORIES) & stack.is_node)
    named = np.zeros(len(trace.strings) + 1, dtype=bool)
    named[trace.codes(MODELS)] = True
    ops = ops[named[trace.name[ops]]]
    sig = _signature(trace, ops)
    first, inverse = distinct_rows(sig)
    uniq = sig[first]
    models = [model(_text(trace, a), _text(trace, b), _text(trace, c), _text(trace, d)) for a, b, c, d in uniq.tolist()]
    return ops, inverse.ravel(), uniq, models


def kernel_owner(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPU rows, owner op row, owner is modelled) for every GPU event of the call tree that has an
    owner (see module doc); memoised per trace."""
    def compute():
        stack = call_stack(trace)
        ops, sig_id, _, models = modelled_ops(trace)
        ok = np.array([m is not None for m in models], dtype=bool).reshape(-1)
        matches = np.zeros(trace.n_events, dtype=bool)
        matches[ops[ok[sig_id]]] = True
        near = nearest_match(stack.parent, stack_levels(trace), matches)
        gpu = trace.gpu_work_rows()
        gpu = gpu[stack.is_node[gpu]]
        owner = near[gpu]
        modelled = owner >= 0
        owner = np.where(modelled, owner, outermost_ops(trace)[gpu])
        keep = owner >= 0
        return gpu[keep], owner[keep], modelled[keep]

    return trace.memo("efficiency_kernel_owner", compute)


def _owner_calls(trace: RankTrace) -> tuple[np.ndarray, ...]:
    """(the op calls that own GPU work, per GPU event of :func:`kernel_owner` its call's index,
    the calls' signatures (k, 4), the first call of each distinct signature, per call its
    signature's index). Memoised: the op table and its per-step samples share the grouping."""
    def compute() -> tuple[np.ndarray, ...]:
        _, owner, _ = kernel_owner(trace)
        owners, owner_of = _distinct_events(owner, trace.n_events)
        sig = _signature(trace, owners)
        first, sig_of = distinct_rows(sig)
        return owners, owner_of.ravel(), sig, first, sig_of

    return trace.memo("efficiency_owner_calls", compute)


def _distinct_events(rows: np.ndarray, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct event rows, ascending; each row's position among them): ``np.unique``'s
    answer through a mark per event and a slot written only at the distinct rows (no sort, no
    running count over all events)."""
    mark = np.zeros(n_events, dtype=bool)
    mark[rows] = True
    uniq = np.flatnonzero(mark)
    slot = np.empty(n_events, dtype=np.int64)  # read back only where written
    slot[uniq] = np.arange(len(uniq))
    return uniq, slot[rows]


def rank_op_efficiency(trace: RankTrace) -> pd.DataFrame:
    """:func:`op_efficiency` of one rank, memoised: a digest carries it (the gate reads it)."""
    return trace.memo("op_efficiency", lambda: _rank_op_efficiency(trace))


def _rank_op_efficiency(trace: RankTrace) -> pd.DataFrame:
    gpu, owner, _ = kernel_owner(trace)
    if len(gpu) == 0:
        return _empty()
    dur = np.nan_to_num(trace.dur[gpu])
    metrics = metrics_of(trace, gpu)
    tc, tf32 = metrics["tensor_core"], metrics["tf32"]
    sm_eff, occ = metrics["sm_efficiency_pct"], metrics["occupancy_pct"]
    owners, owner_of, sig, first, group_of_call = _owner_calls(trace)
    uniq, group = sig[first], group_of_call[owner_of.ravel()]
    n = len(uniq)
    calls = np.bincount(group_of_call, minlength=n)
    kernel_us = np.bincount(group, weights=dur, minlength=n)
    tc_us = np.bincount(group, weights=dur * tc, minlength=n)
    any_tf32 = np.bincount(group, weights=tf32.astype(float), minlength=n) > 0
    match = rank_gpu(trace.meta)
    rows = []
    for g, (a, b, c, d) in enumerate(uniq.tolist()):
        name = _text(trace, a)
        m = model(name, _text(trace, b), _text(trace, c), _text(trace, d))
        rows.append(_row(trace.rank, name, _text(trace, b), _text(trace, c), _text(trace, d), m, int(calls[g]),
                         kernel_us[g], bool(any_tf32[g]), match.spec))
    frame = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("label", "kernels", "share_of_gpu_pct",
                                                                        "time_at_stake_us", "tensor_core_pct",
                                                                        "est_sm_efficiency_pct",
                                                                        "est_achieved_occupancy_pct", "gpu")])
    frame["kernels"] = np.bincount(group, minlength=n)
    gpu_total = float(np.nan_to_num(trace.dur[trace.gpu_work_rows()]).sum())
    frame["share_of_gpu_pct"] = 100.0 * kernel_us / gpu_total if gpu_total > 0 else np.nan
    frame["time_at_stake_us"] = np.clip(kernel_us * (1.0 - frame["pct_of_roofline"].to_numpy() / 100.0), 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        frame["tensor_core_pct"] = np.where(kernel_us > 0, 100.0 * tc_us / kernel_us, np.nan)
    frame["est_sm_efficiency_pct"] = weighted_pct(sm_eff, dur, group, n)
    frame["est_achieved_occupancy_pct"] = weighted_pct(occ, dur, group, n)
    frame["gpu"] = match.device_name or ""
    frame["label"] = [label(o, d, t) for o, d, t in zip(frame["op"].tolist(), frame["input_dims"].tolist(),
                                                         frame["dtype"].tolist())]
    frame = frame[list(COLUMNS)].sort_values(["kernel_us", "op"], ascending=[False, True], kind="stable")
    return frame.reset_index(drop=True)


@functools.lru_cache(maxsize=1 << 16)
def label(op: str, dims_text: str, dtype: str) -> str:
    """``aten::mm [8192×4096, 4096×4096] bf16``: the op with its tensor shapes and dtype, for people.
    Kept per process, as :func:`~.perfmodel.model` is: a worker's ranks share their op signatures
    (16 ranks grown from one A100 trace: 525 a rank; with each label's JSON parsed once a worker,
    not once a rank, a rank's op table takes 11 ms instead of 16.5, best of 7)."""
    try:
        dims = json.loads(dims_text) if dims_text else []
    except ValueError:
        dims = []
    shapes = ["×".join(str(x) for x in d) for d in dims if isinstance(d, list) and d]
    return op + (f" [{', '.join(shapes)}]" if shapes else "") + (f" {dtype}" if dtype else "")


def compute_class(m: OpModel, any_tf32: bool, spec: GpuSpec | None) -> str:
    """The peak an op is measured against: a matrix op runs on tensor/matrix cores in its dtype
    (FP32 as TF32 when its kernels say so, on AMD matrix cores as FP32-matrix); a vector op on the
    FP32 (or FP64) vector units."""
    if not m.matrix:
        return "fp64" if m.dtype == "fp64" else "fp32"
    if m.dtype == "fp32":
        if any_tf32:
            return "tf32"
        return "fp32_matrix" if spec is not None and spec.peak("fp32_matrix") is not None else "fp32"
    return m.dtype


def _row(rank: int, name: str, dims: str, types: str, concrete: str, m: OpModel | None, calls: int,
         kernel_us: float, any_tf32: bool, spec: GpuSpec | None) -> tuple:
    if m is None:
        return (rank, name, dims, types, concrete, "none", "", "", "", calls, kernel_us) + (np.nan,) * 9 + ("",)
    flops, nbytes = m.flops * calls, m.bytes * calls
    secs = kernel_us * 1e-6
    tflops = flops / secs / 1e12 if secs > 0 else np.nan
    tbps = nbytes / secs / 1e12 if secs > 0 else np.nan
    intensity = m.flops / m.bytes if m.bytes > 0 else np.nan
    cls = compute_class(m, any_tf32, spec) if m.flops > 0 else ""  # a copy or fill computes nothing
    peak = spec.peak(cls) if spec is not None and cls else None
    pct_peak = pct_bw = pct_roof = np.nan
    bound = ""
    if spec is not None:
        pct_bw = 100.0 * tbps / spec.mem_tbps
        memory_s = m.bytes / (spec.mem_tbps * 1e12)
        if peak is not None:
            pct_peak = 100.0 * tflops / peak
            ridge = peak / spec.mem_tbps  # FLOP per byte where the roofline bends
            bound = "compute" if intensity >= ridge else "memory"
            ideal_s = max(m.flops / (peak * 1e12), memory_s)  # the roofline's time for one call
        elif m.flops == 0:
            bound, ideal_s = "memory", memory_s  # a copy or fill: the bandwidth is its only roof
        else:
            ideal_s = np.nan  # the GPU has no units of this class: no roofline
        pct_roof = 100.0 * ideal_s * calls / secs if secs > 0 else np.nan
    if m.flops == 0:
        tflops = intensity = np.nan
    return (rank, name, dims, types, concrete, "perfreport", m.kind, m.dtype, cls, calls, kernel_us, m.flops / 1e9,
            m.bytes, tflops, tbps, intensity, np.nan if peak is None else peak, pct_peak, pct_bw, pct_roof, bound)


STEP_COLUMNS = ("rank", "step", "label", "bound", "calls", "kernel_us", "flops", "bytes")
TOP_STEP_OPS = 20
"""Modelled op groups per rank kept per step (by kernel time): the gate's samples."""


def op_efficiency_steps(trace: RankTrace) -> pd.DataFrame:
    """Per (profiler step, modelled op group) of the rank's top :data:`TOP_STEP_OPS` groups by
    kernel time: calls, kernel µs, FLOPs and bytes (totals), for the gate's achieved-throughput
    checks (a call belongs to the step of its own event). Memoised: a digest carries it."""
    return trace.memo("op_efficiency_steps", lambda: _op_efficiency_steps(trace))


def _op_efficiency_steps(trace: RankTrace) -> pd.DataFrame:
    table = rank_op_efficiency(trace)
    top = table[table["model"] == "perfreport"].head(TOP_STEP_OPS)
    gpu, owner, _ = kernel_owner(trace)
    empty = pd.DataFrame({c: np.empty(0, object if c in ("label", "bound") else np.float64) for c in STEP_COLUMNS})
    if not len(top) or not len(gpu):
        return empty.astype({"rank": np.int64, "step": np.int64, "calls": np.int64})
    owners, owner_of, sig, first, sig_of = _owner_calls(trace)  # distinct signatures: a few hundred
    wanted = {(r.op, r.input_dims, r.input_types, r.concrete_inputs): i for i, r in enumerate(top.itertuples())}
    which = np.array([wanted.get(tuple(_text(trace, c) for c in row), -1) for row in sig[first].tolist()],
                     dtype=np.int64)[sig_of]  # a loop over distinct signatures
    step = trace.iteration[owners]
    keep_call = (which >= 0) & (step >= 0)
    if not keep_call.any():
        return empty.astype({"rank": np.int64, "step": np.int64, "calls": np.int64})
    steps, step_id = np.unique(step[keep_call], return_inverse=True)
    n_ops = len(top)
    cell_of_call = np.full(len(owners), -1, dtype=np.int64)
    cell_of_call[keep_call] = step_id.ravel() * n_ops + which[keep_call]
    cell = cell_of_call[owner_of]
    ok = cell >= 0
    n_cells = len(steps) * n_ops
    kernel_us = np.bincount(cell[ok], weights=np.nan_to_num(trace.dur[gpu[ok]]), minlength=n_cells)
    calls = np.bincount(cell_of_call[keep_call], minlength=n_cells)
    present = calls > 0
    op_index = np.arange(n_cells) % n_ops
    gflops = top["gflops_per_call"].to_numpy(np.float64)[op_index]
    nbytes = top["bytes_per_call"].to_numpy(np.float64)[op_index]
    return pd.DataFrame({
        "rank": trace.rank, "step": np.repeat(steps, n_ops)[present].astype(np.int64),
        "label": top["label"].to_numpy(object)[op_index][present],
        "bound": top["bound"].to_numpy(object)[op_index][present],
        "calls": calls[present], "kernel_us": kernel_us[present],
        "flops": (gflops * 1e9 * calls)[present], "bytes": (nbytes * calls)[present]})
