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

import functools
import re
from dataclasses import dataclass
from functools import reduce

import numpy as np
import pandas as pd

from ..model import (
    CPU_OP_CATEGORIES,
    RankTrace,
    TraceSet,
    distinct_codes,
    sorted_intersection,
)
from .grouping import code_sums, sorted_codes

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


_BRACKET = {"<": re.compile(r"[<>]"), "(": re.compile(r"[()]")}  # the brackets of each kind
_TOP_LEVEL = re.compile(r"[<>(),]")


def _matching(text: str, start: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` matching ``text[start] == opener`` (len(text) if unbalanced)."""
    depth = 0
    for m in _BRACKET[opener].finditer(text, start):  # only the bracket characters are visited
        if m.group() == opener:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    return len(text)


def _without(text: str, opener: str, closer: str) -> str:
    """``text`` without its ``opener...closer`` groups, nested ones included."""
    out, i = [], 0
    while (j := text.find(opener, i)) >= 0:
        out.append(text[i:j])
        i = _matching(text, j, opener, closer) + 1
    out.append(text[i:])
    return "".join(out)


def _split_top(args: str) -> list[str]:
    """Template arguments split at the commas outside any nested ``<>`` or ``()``."""
    parts, depth, last = [], 0, 0
    for m in _TOP_LEVEL.finditer(args):
        c = m.group()
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif depth == 0:
            parts.append(args[last:m.start()])
            last = m.end()
    parts.append(args[last:])
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
    for m in reversed(list(_BRACKET["("].finditer(name))):
        if m.group() == ")":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return name[:m.start()].rstrip() or name
    return name


def _reduce_templates(name: str) -> str:
    """Each top-level ``<...>`` group replaced by ``<identity>`` (or dropped when it has none)."""
    out, i = [], 0
    while (j := name.find("<", i)) >= 0:
        out.append(name[i:j])
        k = _matching(name, j, "<", ">")
        ident = _identity(name[j + 1:k])
        if ident:
            out.append(f"<{ident}>")
        i = k + 1
    out.append(name[i:])
    return "".join(out)


@functools.lru_cache(maxsize=65536)  # kernel names repeat across ranks and runs: parse each once
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
    return reduce(sorted_intersection, per_rank)


_GROUP_COLUMNS = ["rank", "step", "kind", "key", "name", "count", "dur_us"]


@dataclass(frozen=True)
class _Pairs:
    """One rank's counted events of one kind, summed per (step, raw name).

    Pair i has step ``step[i]``, raw name ``names[label[i]]`` and key ``keys[label[i]]``
    (``names``/``keys``: the distinct names and their keys), ``count[i]`` events and
    ``dur_us[i]`` µs. Strings stay in the small label arrays until a frame needs them.
    """

    rank: int
    kind: str
    step: np.ndarray
    label: np.ndarray
    names: np.ndarray
    keys: np.ndarray
    count: np.ndarray
    dur_us: np.ndarray


def _rank_pairs(trace: RankTrace, steps: np.ndarray, exact: bool) -> list[_Pairs]:
    """:class:`_Pairs` of one rank, cpu_op then gpu (kinds without events left out).

    Memoised per trace, steps and ``exact``: op_profile and op_steps (the gate's per-step
    samples) start from the same sums. Steps that are some of the rank's own are cut from the
    sums over all of them (the same numbers: each sum is one step's), so a worker process that
    saw this rank alone sends back sums the cross-rank common steps can be taken from.
    """
    steps = np.asarray(steps, dtype=np.int64)
    if len(steps):
        own = trace.step_numbers()
        if np.isin(steps, own).all():
            full = trace.memo(("op_pairs", "own", bool(exact)), lambda: _count_pairs(trace, own, exact))
            if len(steps) == len(own):
                return full
            return [p for p in (_only_steps(p, steps) for p in full) if len(p.step)]
    key = ("op_pairs", tuple(steps.tolist()), bool(exact))
    return trace.memo(key, lambda: _count_pairs(trace, steps, exact))


def _only_steps(pairs: _Pairs, steps: np.ndarray) -> _Pairs:
    """``pairs`` restricted to ``steps`` (the names tables kept: labels still index them)."""
    keep = np.isin(pairs.step, steps)
    return _Pairs(rank=pairs.rank, kind=pairs.kind, step=pairs.step[keep], label=pairs.label[keep], names=pairs.names,
                  keys=pairs.keys, count=pairs.count[keep], dur_us=pairs.dur_us[keep])


def _count_pairs(trace: RankTrace, steps: np.ndarray, exact: bool) -> list[_Pairs]:
    usable = np.isfinite(trace.dur) & np.isfinite(trace.ts)
    in_scope = _in_steps(trace.iteration, steps) if len(steps) else np.ones(trace.n_events, dtype=bool)
    parts = []
    cpu_ops = trace.complete & trace.is_cat(CPU_OP_CATEGORIES) & ~trace.steps()  # old traces file steps as ops
    for kind, mask in (("cpu_op", cpu_ops), ("gpu", trace.gpu_activity())):
        rows = np.flatnonzero(mask & usable & in_scope)
        if not len(rows):
            continue
        step = trace.iteration[rows] if len(steps) else np.full(len(rows), -1, dtype=np.int64)
        first = int(step.min())
        # (step, name) as one small integer: the names numbered densely first (in code order,
        # so the pairs still ascend by step, then name code)
        codes, name_id = distinct_codes(trace.name[rows], len(trace.strings))
        width = len(codes)
        pair_ids, counts, durations = _key_sums((step - first) * width + name_id, trace.dur[rows])
        names = trace.decode(codes)
        keys = names if exact or kind == "cpu_op" else _normalized(trace, codes)
        parts.append(_Pairs(rank=trace.rank, kind=kind, step=pair_ids // width + first, label=pair_ids % width,
                            names=names, keys=keys, count=counts, dur_us=durations))
    return parts


def _normalized(trace: RankTrace, codes: np.ndarray) -> np.ndarray:
    """:func:`normalize_kernel_name` of the strings of ``codes`` (object array).

    A string is normalised once per trace (a character-level parse of a long C++ name): the
    per-trace table fills on demand and is shared by op_profile, op_steps and ops_diff.
    """
    table = trace.memo("normalized_kernel_names", dict)
    for code in codes.tolist():  # a loop over distinct kernel names
        if code not in table:
            table[code] = normalize_kernel_name(trace.strings[code] if code >= 0 else "")
    return np.array([table[c] for c in codes.tolist()], dtype=object)


def _in_steps(iteration: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``np.isin(iteration, steps)`` for sorted distinct step numbers: two comparisons when
    they are consecutive (the usual case), else a lookup table over their range."""
    lo, hi = int(steps[0]), int(steps[-1])
    inside = (iteration >= lo) & (iteration <= hi)
    if hi - lo + 1 == len(steps):
        return inside
    table = np.zeros(hi - lo + 1, dtype=bool)
    table[steps - lo] = True
    return inside & table[np.where(inside, iteration - lo, 0)]


def _rank_groups(trace: RankTrace, steps: np.ndarray, exact: bool) -> pd.DataFrame:
    """One rank's counted events summed per (step, kind, raw name): count and dur_us."""
    parts = [pd.DataFrame({"rank": p.rank, "step": p.step, "kind": p.kind, "key": p.keys[p.label],
                           "name": p.names[p.label], "count": p.count, "dur_us": p.dur_us})
             for p in _rank_pairs(trace, steps, exact)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=_GROUP_COLUMNS)


def _key_sums(key: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct keys ascending, rows per key, sum of ``weights`` per key).

    Small non-negative keys (steps × names) are counted straight into a table with
    ``np.bincount`` instead of sorted by ``np.unique``; both sum each key's weights in row
    order, so the sums are the same to the last bit.
    """
    if len(key) and key.min() >= 0 and key.max() < 8 * len(key) + 4096:
        counts = np.bincount(key)
        present = np.flatnonzero(counts)
        return present, counts[present], np.bincount(key, weights=weights)[present]
    ids, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.ravel()
    return ids, np.bincount(inverse, minlength=len(ids)), np.bincount(inverse, weights=weights, minlength=len(ids))


def _events(traces: TraceSet, exact: bool) -> tuple[pd.DataFrame, int]:
    """Counted events summed per (rank, step, kind, key, name), and the number of samples."""
    steps = _common_steps(traces)
    frames = [f for t in traces if not (f := _rank_groups(t, steps, exact)).empty]
    samples = len(traces) * (len(steps) if len(steps) else 1)
    events = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_GROUP_COLUMNS)
    return events, samples


@dataclass(frozen=True)
class StepSums:
    """:func:`op_steps` as columns: row i is (``rank[i]``, ``step[i]``, ``kinds[pair[i]]``,
    ``keys[pair[i]]``) with ``count[i]`` events and ``dur_us[i]`` µs, rows in that tuple's
    sorted order; ``kinds``/``keys`` list the distinct (kind, key) pairs, sorted, so ``pair``
    codes them as the strings sort. A reader that groups or selects rows does it on integers."""

    rank: np.ndarray
    step: np.ndarray
    pair: np.ndarray
    kinds: np.ndarray
    keys: np.ndarray
    count: np.ndarray
    dur_us: np.ndarray


def step_sums(traces: TraceSet, exact: bool = False) -> StepSums:
    """:class:`StepSums` of ``traces`` over the steps common to all ranks (see :func:`op_steps`),
    made once per trace set: the gate's inputs and the attribution read the same ones (the
    attribution in a child forked after the gate's inputs are made)."""
    return traces.memo(("op_step_sums", bool(exact)), lambda: _step_sums(traces, exact))


def forget_step_sums(traces: TraceSet) -> None:
    """Let the memoised :func:`step_sums` go (a million rows on a 37,000-step rank)."""
    for exact in (False, True):
        traces._memo.pop(("op_step_sums", exact), None)


def _step_sums(traces: TraceSet, exact: bool) -> StepSums:
    steps = _common_steps(traces)
    pairs = [p for t in traces for p in _rank_pairs(t, steps, exact)]
    if not pairs:
        empty = np.empty(0, dtype=np.int64)
        return StepSums(empty, empty, empty, np.empty(0, dtype=object), np.empty(0, dtype=object), empty,
                        np.empty(0, dtype=np.float64))
    # the (rank, step, kind, key) of each pair as one integer that sorts as the tuple does (the
    # strings ranked among the few distinct ones, the (kind, key) pairs that occur numbered
    # densely), so the pairs are grouped as integers, not every row's strings: the same groups,
    # order and sums as pandas' (each group's rows in the same order)
    kinds = sorted({p.kind for p in pairs})
    keys = np.unique(np.concatenate([np.asarray(p.keys, dtype=object) for p in pairs]))
    rank, rank_ids = sorted_codes(np.concatenate([np.full(len(p.step), p.rank, dtype=np.int64) for p in pairs]))
    step, step_ids = sorted_codes(np.concatenate([p.step for p in pairs]).astype(np.int64))
    kind_keys, kind_key = distinct_codes(np.concatenate(
        [kinds.index(p.kind) * len(keys) + np.searchsorted(keys, np.asarray(p.keys, dtype=object))[p.label]
         for p in pairs]), len(kinds) * len(keys))
    code = (rank * len(step_ids) + step) * len(kind_keys) + kind_key
    group, sums = code_sums(code, len(rank_ids) * len(step_ids) * len(kind_keys),
                            {"count": np.concatenate([p.count for p in pairs]).astype(np.int64, copy=False),
                             "dur_us": np.concatenate([p.dur_us for p in pairs]).astype(np.float64, copy=False)})
    rest, pair = np.divmod(group, len(kind_keys))
    rank, step = np.divmod(rest, len(step_ids))
    kind, key = np.divmod(kind_keys, len(keys))
    return StepSums(rank=np.asarray(rank_ids, dtype=np.int64)[rank], step=np.asarray(step_ids, dtype=np.int64)[step],
                    pair=pair, kinds=np.array(kinds, dtype=object)[kind], keys=keys[key],
                    count=sums["count"], dur_us=sums["dur_us"])


def op_steps(traces: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Per (rank, step, kind, key): event ``count`` and summed ``dur_us``; the per-step samples.

    Only the steps common to all ranks (step -1 = the whole trace when there are none); a key
    absent from a step has no row there (count 0).
    """
    sums = step_sums(traces, exact)
    if not len(sums.kinds):
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "key") else float) for c in STEP_COLUMNS})
    return pd.DataFrame({"rank": sums.rank, "step": sums.step, "kind": sums.kinds[sums.pair],
                         "key": sums.keys[sums.pair], "count": sums.count, "dur_us": sums.dur_us},
                        columns=list(STEP_COLUMNS))


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


__all__ = ["normalize_kernel_name", "op_steps", "ops_diff", "added_removed"]
