"""Which operators and kernels changed between two runs, per step, over all ranks.

Two traces rarely have the same number of steps or ranks, so each is reduced to per-step
means first: the samples of a trace are its (rank, profiler step) pairs, for the steps that
every rank has; an event belongs to a step by ``RankTrace.iteration`` (CPU events by their
start inside the step span, GPU work by the step of the launch that enqueued it, CUDA-graph
replays included). ``count_per_step`` and ``dur_per_step_us`` are totals over the samples
divided by the number of samples, i.e. per rank and per step. A trace without a step common
to all its ranks counts each rank's whole trace as one sample (``step`` = -1).

Two kinds of rows: ``cpu_op`` (``cpu_op`` events: ATen operators and other dispatched ops;
they nest, so their times overlap) and ``gpu`` (kernels, memcpy, memset: GPU activity).

GPU names are normalised so that one kernel matches across builds (``exact=False``, the
default, see :func:`normalize_kernel_name`): template arguments ``<...>`` are dropped except
the first one that names something (the functor of an elementwise kernel, a CUTLASS config),
the trailing parameter list and a leading ``void`` go, and Triton kernels lose Inductor's
numeric suffix and hash suffixes. Kernels replayed by a CUDA graph carry the same names as
eagerly launched ones and take the step of their ``cudaGraphLaunch``, so they match the other
run's eager launches. ``exact=True`` compares raw names. CPU op names are never changed.

Edge cases: no GPU activity gives no ``gpu`` rows; an empty trace gives an empty frame with
the columns; the share of the total delta is NaN when the kind's total delta is 0.
"""

from __future__ import annotations

import re
from functools import reduce

import numpy as np
import pandas as pd

from ..model import CPU_OP_CATEGORIES, RankTrace, TraceSet

KINDS = ("cpu_op", "gpu")
STEP_COLUMNS = ("rank", "step", "kind", "key", "count", "dur_us")
PROFILE_COLUMNS = ("kind", "key", "samples", "count_per_step", "dur_per_step_us", "dur_per_call_us", "names")
DIFF_COLUMNS = (
    "kind", "key", "control_count_per_step", "test_count_per_step", "delta_count_per_step",
    "control_dur_per_step_us", "test_dur_per_step_us", "delta_dur_per_step_us", "delta_dur_pct",
    "delta_share_pct", "control_dur_per_call_us", "test_dur_per_call_us", "count_change", "names",
)
COUNT_CHANGES = ("added", "removed", "more", "fewer", "same")

_TRITON = re.compile(r"^triton", re.IGNORECASE)
_TRITON_HASH = re.compile(r"_([0-9a-f]{8,})$")
_TRITON_SPECIALISATION = re.compile(r"(\d+[cde]*)+")  # "0d1d2de": argument specialisation, not a hash
_TRITON_COUNTER = re.compile(r"_\d+$")
_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")


def _matching(text: str, start: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` matching ``text[start] == opener`` (len(text) if unbalanced)."""
    depth = 0
    for i in range(start, len(text)):  # loop over the characters of one distinct name
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _without(text: str, opener: str, closer: str) -> str:
    """``text`` without its ``opener...closer`` groups, nested ones included."""
    out, i = [], 0
    while i < len(text):
        if text[i] == opener:
            i = _matching(text, i, opener, closer) + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _split_top(args: str) -> list[str]:
    """Template arguments split at the commas outside any nested ``<>`` or ``()``."""
    parts, depth, cur = [], 0, []
    for c in args:
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


_ANON = "(anonymous namespace)"
_LITERAL = re.compile(r"^(\([\w:\s]*\))?\s*-?\d+[uUlL]*$|^(true|false)$")


def _identity(args: str) -> str:
    """The first template argument that names something (not a number, cast number or bool),
    reduced to its outer identifier: no template arguments, parameter lists or lambda parts."""
    for arg in _split_top(args):
        arg = arg.strip()
        if not arg or _LITERAL.match(arg):
            continue
        arg = _without(_without(arg.replace(_ANON, "\x01"), "<", ">"), "(", ")")
        arg = arg.split("::{", 1)[0].replace(" const", "")
        arg = " ".join(arg.split()).replace("\x01", _ANON)
        if arg:
            return arg
    return ""


def _drop_parameters(name: str) -> str:
    """``name`` without a trailing ``(...)`` parameter list."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        if name[i] == ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
            if depth == 0:
                return name[:i].rstrip() or name
    return name


def _reduce_templates(name: str) -> str:
    """Each top-level ``<...>`` group replaced by ``<identity>`` (or dropped when it has none)."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "<":
            j = _matching(name, i, "<", ">")
            ident = _identity(name[i + 1:j])
            if ident:
                out.append(f"<{ident}>")
            i = j + 1
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def normalize_kernel_name(name: str) -> str:
    """The build-independent part of a GPU kernel name.

    Template arguments are dropped except the first one that names something (a functor, a
    CUTLASS configuration, a dtype), itself cut to its outer identifier, so vector widths, block
    sizes, lambda numbers and container types (which change between builds) do not matter while
    ``add`` and ``mul`` elementwise kernels stay apart. The trailing parameter list and a
    leading ``void`` go; Triton kernels lose Inductor's ``_<n>`` suffix and a hex hash suffix
    (not the ``0d1d2de`` argument specialisation of older Triton names). Memcpy/memset names
    are kept.

    >>> normalize_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::"
    ...                       "CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, float)")
    'at::native::vectorized_elementwise_kernel<at::native::CUDAFunctor_add>'
    >>> normalize_kernel_name("triton_poi_fused_add_cos_sin_0")
    'triton_poi_fused_add_cos_sin'
    >>> normalize_kernel_name("Memcpy HtoD (Pinned -> Device)")
    'Memcpy HtoD (Pinned -> Device)'
    """
    if _MEMORY.match(name):
        return name
    key = _drop_parameters(name.strip())
    if key.startswith("void "):
        key = key[len("void "):].lstrip()
    key = _reduce_templates(key).strip()
    if _TRITON.match(key):
        m = _TRITON_HASH.search(key)
        if m and not _TRITON_SPECIALISATION.fullmatch(m.group(1)):
            key = key[: m.start()]
        key = _TRITON_COUNTER.sub("", key)
    return key or name


def _common_steps(traces: TraceSet) -> np.ndarray:
    per_rank = [t.step_numbers() for t in traces]
    if not per_rank:
        return np.empty(0, dtype=np.int64)
    return reduce(np.intersect1d, per_rank)


_GROUP_COLUMNS = ["rank", "step", "kind", "key", "name", "count", "dur_us"]


def _rank_groups(trace: RankTrace, steps: np.ndarray, exact: bool) -> pd.DataFrame:
    """One rank's counted events summed per (step, kind, raw name): count and dur_us."""
    usable = np.isfinite(trace.dur) & np.isfinite(trace.ts)
    in_scope = np.isin(trace.iteration, steps) if len(steps) else np.ones(trace.n_events, dtype=bool)
    parts = []
    cpu_ops = trace.complete & trace.is_cat(CPU_OP_CATEGORIES) & ~trace.steps()  # old traces file steps as ops
    for kind, mask in (("cpu_op", cpu_ops), ("gpu", trace.gpu_activity())):
        rows = np.flatnonzero(mask & usable & in_scope)
        if not len(rows):
            continue
        step = trace.iteration[rows] if len(steps) else np.full(len(rows), -1, dtype=np.int64)
        width = len(trace.strings) + 1
        first = int(step.min())
        pair_ids, inverse = np.unique((step - first) * width + trace.name[rows], return_inverse=True)
        inverse = inverse.ravel()
        pairs = np.stack([pair_ids // width + first, pair_ids % width], axis=1)
        codes, code_of_pair = np.unique(pairs[:, 1], return_inverse=True)
        names = trace.decode(codes)
        keys = names if exact or kind == "cpu_op" else np.array([normalize_kernel_name(n) for n in names], object)
        raw, keys = names[code_of_pair.ravel()], keys[code_of_pair.ravel()]
        parts.append(pd.DataFrame({
            "rank": trace.rank, "step": pairs[:, 0], "kind": kind, "key": keys, "name": raw,
            "count": np.bincount(inverse, minlength=len(pairs)),
            "dur_us": np.bincount(inverse, weights=trace.dur[rows], minlength=len(pairs)),
        }))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=_GROUP_COLUMNS)


def _events(traces: TraceSet, exact: bool) -> tuple[pd.DataFrame, int]:
    """Counted events summed per (rank, step, kind, key, name), and the number of samples."""
    steps = _common_steps(traces)
    frames = [f for t in traces if not (f := _rank_groups(t, steps, exact)).empty]
    samples = len(traces) * (len(steps) if len(steps) else 1)
    events = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_GROUP_COLUMNS)
    return events, samples


def op_steps(traces: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Per (rank, step, kind, key): event ``count`` and summed ``dur_us``; the per-step samples.

    Only the steps common to all ranks (step -1 = the whole trace when there are none); a key
    absent from a step has no row there (count 0).
    """
    events, _ = _events(traces, exact)
    if events.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "key") else float) for c in STEP_COLUMNS})
    out = events.groupby(["rank", "step", "kind", "key"], sort=True)[["count", "dur_us"]].sum().reset_index()
    return out.astype({"rank": np.int64, "step": np.int64, "count": np.int64, "dur_us": np.float64})[list(STEP_COLUMNS)]


def op_profile(traces: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Per (kind, key): ``count_per_step``, ``dur_per_step_us`` (means per rank and step, see
    the module docstring), ``dur_per_call_us``, the number of ``samples`` averaged and of raw
    ``names`` merged into the key. Sorted by kind, then by time per step, largest first."""
    events, samples = _events(traces, exact)
    if events.empty:
        return _empty(PROFILE_COLUMNS)
    g = events.groupby(["kind", "key"], sort=False)
    out = g[["count", "dur_us"]].sum().reset_index()
    out["names"] = g["name"].nunique().to_numpy()
    out["samples"] = samples
    out["count_per_step"] = out["count"] / samples
    out["dur_per_step_us"] = out["dur_us"] / samples
    out["dur_per_call_us"] = out["dur_us"] / out["count"]
    out = out.sort_values(["kind", "dur_per_step_us", "key"], ascending=[True, False, True], ignore_index=True)
    return out[list(PROFILE_COLUMNS)].astype({"samples": np.int64, "names": np.int64})


def ops_diff(control: TraceSet, test: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Per (kind, key), control vs test per-step means and their change (test - control).

    ``delta_dur_pct`` is the change relative to control (NaN for added keys);
    ``delta_share_pct`` is the key's share of its kind's total change in time per step (signed:
    shares above 100 % mean other keys moved the other way). ``count_change`` is "added",
    "removed", "more", "fewer" or "same" (calls per step). ``names`` counts the distinct raw
    names merged into the key over both runs. Sorted by kind, then by |delta| time, largest first.
    """
    c_events, c_samples = _events(control, exact)
    t_events, t_samples = _events(test, exact)
    sides = []
    for prefix, events, samples in (("control", c_events, c_samples), ("test", t_events, t_samples)):
        if events.empty:
            sides.append(pd.DataFrame(columns=["kind", "key", f"{prefix}_count_per_step", f"{prefix}_dur_per_step_us",
                                               f"{prefix}_calls"]).set_index(["kind", "key"]))
            continue
        agg = events.groupby(["kind", "key"]).agg(calls=("count", "sum"), dur=("dur_us", "sum"))
        sides.append(pd.DataFrame({
            f"{prefix}_count_per_step": agg["calls"] / samples,
            f"{prefix}_dur_per_step_us": agg["dur"] / samples,
            f"{prefix}_calls": agg["calls"],
        }))
    both = sides[0].join(sides[1], how="outer")
    if both.empty:
        return _empty(DIFF_COLUMNS)
    both = both.astype(float).fillna(0.0).reset_index()
    names = pd.concat([c_events[["kind", "key", "name"]], t_events[["kind", "key", "name"]]])
    n_names = names.groupby(["kind", "key"])["name"].nunique()
    both["names"] = n_names.reindex(pd.MultiIndex.from_frame(both[["kind", "key"]])).to_numpy(dtype=np.int64)

    cc, tc = both["control_count_per_step"].to_numpy(), both["test_count_per_step"].to_numpy()
    cd, td = both["control_dur_per_step_us"].to_numpy(), both["test_dur_per_step_us"].to_numpy()
    both["delta_count_per_step"] = tc - cc
    both["delta_dur_per_step_us"] = td - cd
    with np.errstate(divide="ignore", invalid="ignore"):
        both["delta_dur_pct"] = np.where(cd > 0, 100.0 * (td - cd) / np.where(cd > 0, cd, 1.0), np.nan)
        total = both.groupby("kind")["delta_dur_per_step_us"].transform("sum").to_numpy()
        both["delta_share_pct"] = np.where(total != 0, 100.0 * both["delta_dur_per_step_us"] / np.where(
            total != 0, total, 1.0), np.nan)
        both["control_dur_per_call_us"] = np.where(
            both["control_calls"] > 0, cd * c_samples / np.maximum(both["control_calls"], 1), np.nan)
        both["test_dur_per_call_us"] = np.where(
            both["test_calls"] > 0, td * t_samples / np.maximum(both["test_calls"], 1), np.nan)
    same = np.isclose(tc, cc, rtol=1e-9, atol=0.0)
    both["count_change"] = np.select(
        [cc == 0, tc == 0, same, tc > cc], ["added", "removed", "same", "more"], default="fewer").astype(object)
    order = np.lexsort((both["key"].to_numpy(), -np.abs(both["delta_dur_per_step_us"].to_numpy()),
                        both["kind"].to_numpy()))
    return both.iloc[order].reset_index(drop=True)[list(DIFF_COLUMNS)]


def added_removed(diff: pd.DataFrame) -> dict[str, list[str]]:
    """Keys only in test (``added_*``) or only in control (``removed_*``) of an :func:`ops_diff`
    frame, for CPU ops and GPU kernels, each sorted."""
    out = {}
    for change in ("added", "removed"):
        for kind, label in (("cpu_op", "ops"), ("gpu", "kernels")):
            sel = diff[(diff["kind"] == kind) & (diff["count_change"] == change)]
            out[f"{change}_{label}"] = sorted(sel["key"].tolist())
    return out


def _empty(columns) -> pd.DataFrame:
    text = {"kind", "key", "count_change"}
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else float) for c in columns})


__all__ = ["normalize_kernel_name", "op_steps", "op_profile", "ops_diff", "added_removed"]
