"""Linking each GPU event to the CPU launch that enqueued it, and each launch to its first GPU
event: through ``args.correlation``, and the ``ac2g`` flow arrows where a correlation finds no
launch. Part of the decode (:mod:`perfreport.load.columns`); the C extension ``_decode`` finds
each launch's first GPU event in one pass, numpy is the reference."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..model import RUNTIME_CATEGORIES, SparseColumn, code_mask, rows_among, search_sorted

try:
    from . import _decode  # type: ignore[attr-defined]
except ImportError:  # the extension is optional (no compiler at install): numpy links alone
    _decode = None

_FLOW_CATEGORIES = ("ac2g", "async", "async_cpu_to_gpu")
"""Categories of the CPU->GPU launch flow arrows (modern, June-2021, and 2022 spellings)."""


def name_mask(column: np.ndarray, codes: Mapping[str, int], names) -> np.ndarray:
    """Where the string-code ``column`` holds one of ``names``: one gather through a boolean
    table indexed by code (code -1, missing, reads the last slot: False). np.isin would sort
    or build its table over the column's value range first: ~4x slower on millions of rows."""
    return code_mask(column, [codes[c] for c in names if c in codes], len(codes))


def link_cpu_gpu(cols: dict[str, np.ndarray], correlation: SparseColumn, codes: Mapping[str, int],
                  complete: np.ndarray, gpu_side: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Row of the partner of each event: GPU event -> its CPU launch; launch -> its first GPU event.

    Linked through ``args.correlation``; GPU events whose correlation has no CPU partner fall
    back to the ``ac2g`` flow arrows (start at the launch, end at the GPU event). ``complete``:
    the ``X`` events; ``gpu_side``: the complete events of a GPU-side category. ``out``: where
    the column may be written (see :func:`link_by_correlation`).
    """
    cpu_side = complete & ~gpu_side
    linked = link_by_correlation(correlation, cpu_side, gpu_side, cols["ts"], out=out)
    unlinked = gpu_side & (linked < 0)
    if unlinked.any():
        _link_by_flows(cols, codes, cpu_side, unlinked, linked)
    link_first_gpu_events(cols["ts"], gpu_side, linked)
    return linked


def link_by_correlation(corr: SparseColumn, cpu_side: np.ndarray, gpu_side: np.ndarray,
                        ts: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """For each GPU-side row with a correlation id (a value >= 0 of the sparse ``corr``), the
    last CPU-side row with the same id; -1 elsewhere. Only the rows with an id are read.
    Correlation ids grow along the file, so the stable argsort of the CPU rows' ids runs over
    nearly sorted input (faster than a hash table of them in C: sparse ids miss the cache at
    every row). With ``ts``, a GPU row whose CPU row would start after it (by more than
    :data:`LAUNCH_SLACK_US`) takes the last row of its id that starts before it, where there is
    one (:func:`_launches_before`): a trace made of traces put back to back repeats its ids.
    Where the CPU rows' ids are distinct there is no other row to take, and the starts are not
    compared (5 ms of the V100-grown 1 GB rank's decode).
    ``out``: an array of one entry per event, of the column's integers (:func:`linked_dtype`), to
    write it in instead of a new one (:func:`perfreport.load.columns._second_half`)."""
    n = len(gpu_side)
    if out is not None and out.dtype == linked_dtype(n) and out.shape == (n,) and out.flags.writeable:
        linked = out
        linked.fill(-1)
    else:
        linked = np.full(n, -1, dtype=linked_dtype(n))
    (gpu_rows, gpu_ids), (cpu_rows, cpu_ids) = split_by_side(corr, gpu_side, cpu_side)
    if len(gpu_rows) and len(cpu_rows):
        order = np.argsort(cpu_ids, kind="stable")
        cpu_sorted, cpu_corr = cpu_rows[order], cpu_ids[order]
        pos = search_sorted(cpu_corr, gpu_ids, side="right") - 1  # last CPU row wins (ids nearly in order)
        ok = (pos >= 0) & (cpu_corr[np.maximum(pos, 0)] == gpu_ids)
        linked[gpu_rows[ok]] = cpu_sorted[pos[ok]]
        if ts is not None and (cpu_corr[1:] == cpu_corr[:-1]).any():  # (ids distinct: no other row to take)
            late = ok.copy()
            late[ok] = ts[cpu_sorted[pos[ok]]] > ts[gpu_rows[ok]] + LAUNCH_SLACK_US
            if late.any():
                _launches_before(linked, ts, gpu_rows[late], gpu_ids[late], cpu_rows, cpu_ids)
    return linked


def split_by_side(corr: SparseColumn, gpu_side: np.ndarray, cpu_side: np.ndarray,
                  use_c: bool | None = None) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((rows, ids) on GPU-side events, (rows, ids) on CPU-side events) of the sparse id column
    ``corr``, ids >= 0 only. For int32 rows and int64 ids in two passes of the C extension
    ``_decode``: the counts, then the rows and ids into arrays of those lengths (numpy's two
    gathers and four selections: the V100-grown 1 GB rank's decode 0.141-0.148 -> 0.133-0.137
    CPU s, 21,600 page faults instead of 22,400); else numpy, the reference. ``use_c`` forces
    one path (tests)."""
    rows, ids = corr.rows, corr.values
    if use_c if use_c is not None else (_decode is not None and hasattr(_decode, "split_by_side")
                                         and rows.dtype == np.int32 and ids.dtype == np.int64):
        rows, ids = np.ascontiguousarray(rows), np.ascontiguousarray(ids)
        sides = np.ascontiguousarray(gpu_side), np.ascontiguousarray(cpu_side)
        none = np.empty(0, np.int32), np.empty(0, np.int64)
        n_gpu, n_cpu = _decode.split_by_side(rows, ids, *sides, *none, *none)  # the counts
        gpu = np.empty(n_gpu, np.int32), np.empty(n_gpu, np.int64)
        cpu = np.empty(n_cpu, np.int32), np.empty(n_cpu, np.int64)
        _decode.split_by_side(rows, ids, *sides, *gpu, *cpu)
        return gpu, cpu
    if len(ids) and ids.min() < 0:
        rows, ids = rows[ids >= 0], ids[ids >= 0]
    on_gpu, on_cpu = gpu_side[rows], cpu_side[rows]
    return (rows[on_gpu], ids[on_gpu]), (rows[on_cpu], ids[on_cpu])


def linked_dtype(n_events: int) -> type:
    """The linked column's integers: int32 while the rows fit, as :func:`~perfreport.model.narrow`
    leaves it (made so from the start, not as an int64 column copied to int32: the V100-grown
    1 GB rank's decode made 53,700 page faults instead of 63,600), int64 past 2**31 - 1 events,
    or where a C extension built before it took int32 does the linking."""
    c_ok = _decode is None or getattr(_decode, "GROUPS_INT32", 0)
    return np.int32 if c_ok and n_events < np.iinfo(np.int32).max else np.int64


LAUNCH_SLACK_US = 1000.0
"""How much later than its GPU event a CPU launch may start (clocks of the host and the device
disagree by microseconds) before the link is taken for one to the wrong copy of a repeated id."""


def _launches_before(linked: np.ndarray, ts: np.ndarray, gpu_rows: np.ndarray, gpu_ids: np.ndarray,
                     cpu_rows: np.ndarray, cpu_ids: np.ndarray) -> None:
    """Link each of ``gpu_rows`` to the last CPU row of its id (``cpu_rows``, ``cpu_ids``) that
    starts at or before it (within :data:`LAUNCH_SLACK_US`), where there is one. The CPU rows
    ordered by (id, start) get the key id block x n + rank of their start among all of them;
    a GPU row's key is its id's block x n + the number of starts up to its own, so the last key
    below it is the last row of its id starting by then (one search for all rows)."""
    order = np.lexsort((ts[cpu_rows], cpu_ids))
    rows, ids = cpu_rows[order], cpu_ids[order]
    starts = ts[rows]
    n = len(rows)
    by_start = np.argsort(starts, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[by_start] = np.arange(n)
    block = np.concatenate([[0], np.cumsum(ids[1:] != ids[:-1])])
    key = block * n + rank  # ascending: ids ascending, and starts ascending within an id
    first_of_block = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    q_block = np.searchsorted(ids[first_of_block], gpu_ids)
    q_block = np.minimum(q_block, len(first_of_block) - 1)
    found = ids[first_of_block[q_block]] == gpu_ids
    upto = np.searchsorted(starts[by_start], ts[gpu_rows] + LAUNCH_SLACK_US, side="right")
    pos = np.searchsorted(key, q_block * n + upto, side="left") - 1
    good = found & (pos >= 0) & (block[np.maximum(pos, 0)] == q_block)
    linked[gpu_rows[good]] = rows[pos[good]]


def link_first_gpu_events(ts: np.ndarray, gpu_side: np.ndarray, linked: np.ndarray,
                          use_c: bool | None = None) -> None:
    """Launch -> the first GPU event (by start time, then file order) it produced: a CUDA-graph
    launch produces many. Written into ``linked`` at the launches (CPU rows, -1 until now) of
    its linked GPU rows. The C extension ``_decode`` does it in one pass (numpy: a lexsort of
    the linked GPU rows); numpy is the reference. ``use_c`` forces one path (tests)."""
    if use_c if use_c is not None else _decode is not None:
        _decode.first_of_groups(linked, gpu_side, ts)
        return
    gpu_linked = np.flatnonzero(gpu_side & (linked >= 0))
    if len(gpu_linked):
        order = np.lexsort((ts[gpu_linked], linked[gpu_linked]))
        g = gpu_linked[order]
        first = np.ones(len(g), dtype=bool)
        first[1:] = linked[g][1:] != linked[g][:-1]
        linked[linked[g[first]]] = g[first]


MANY_UNLINKED = 1 << 17
"""Unlinked GPU events past which :func:`_link_by_flows` lists the flow ends by their phase
(a pass over the phase codes, then a lookup among the flow ends only) rather than the rows
that start when one of them does: the C lookup of :func:`~perfreport.model.rows_among` tests a
bitmap of 2**18 bits before it searches, which lets ~40 % of the rows through at this many
values and all of them at a million. Below it the lookup among all rows is the cheaper: the
CUDA-graph trace grown to 1 GB (37,496 unlinked kernels, 1.5 M flow ends) loaded in
0.677-0.802 s that way against 0.714-0.836 s by phase (3 alternating pairs)."""


def _link_by_flows(cols, codes, cpu_side: np.ndarray, unlinked: np.ndarray, linked: np.ndarray) -> None:
    """Link GPU events through flow arrows: ``f`` at the GPU event, ``s`` at its launch.

    Only the unlinked GPU events, the flow events and the runtime calls take part, matched on
    exact (pid, tid, ts) keys, so a trace with a handful of orphan kernels pays a handful. Each
    match reads, of the other side, only the rows whose most selective key (a start, a flow id)
    is one of the few already matched (:func:`~perfreport.model.rows_among`, one pass of a
    column): the flow events and launches of the whole trace are never listed. A rank with
    orphan kernels has them in every copy of a repeated trace (1,095 at 1 GB grown from the
    V100 trace, linked by no flow), and listing every flow event and launch for them took 44 ms
    of its decode: 0.171-0.176 CPU s then, 0.150-0.154 s reading only those rows (4 alternating
    pairs).

    Where the unlinked GPU events are many, the flow ends are listed by their phase instead
    (:data:`MANY_UNLINKED`), and a trace without flow ends skips the pass: HTA's trace_compare
    tiny grown to 1 GB has 1.39 M GPU events whose correlations find no launch and no flow
    event at all, and looking their starts up among every start took 0.14-0.19 s of its 0.28 s
    decode.
    """
    if "f" not in codes:  # no event of phase "f": no flow arrow ends anywhere
        return
    gpu = np.flatnonzero(unlinked)
    place = ("pid_code", "tid_code", "ts")
    near = rows_among(cols["ts"], cols["ts"][gpu]) if len(gpu) <= MANY_UNLINKED \
        else np.flatnonzero(cols["ph"] == codes["f"])
    ends = _flow_rows(cols, codes, "f", near)
    f_of_gpu = _match(cols, place, gpu, ends)
    ok = f_of_gpu >= 0
    gpu, f_rows = gpu[ok], f_of_gpu[ok]
    if not len(gpu):
        return
    starts = _flow_rows(cols, codes, "s", rows_among(cols["flow_id"], cols["flow_id"][f_rows]))
    s_of_gpu = _match(cols, ("flow_id",), f_rows, starts)
    ok = s_of_gpu >= 0
    gpu, s_rows = gpu[ok], s_of_gpu[ok]
    if not len(gpu):
        return
    near = rows_among(cols["ts"], cols["ts"][s_rows])
    launches = near[cpu_side[near] & name_mask(cols["cat"][near], codes, RUNTIME_CATEGORIES)]
    cpu_of_gpu = _match(cols, place, s_rows, launches)
    ok = cpu_of_gpu >= 0
    linked[gpu[ok]] = cpu_of_gpu[ok]


def _tuple_ids(columns: list[np.ndarray]) -> np.ndarray:
    """An id per row of the key ``columns`` (equal tuples, equal ids; NaN equals nothing, as
    ``==`` says): one lexsort of the columns, then the rows where any key changes. A
    ``np.unique`` of the rows as one structured array compared them field by field in a generic
    sort: the CUDA-graph trace grown to 1 GB (its graph kernels linked by flow arrows) has 75,594
    candidate rows, whose unique took 0.11 CPU s of its 0.25 s decode; the lexsort 0.001 s."""
    order = np.lexsort(columns[::-1])  # by the first key, then the next
    new = np.zeros(len(order), dtype=bool)
    new[:1] = True
    for column in columns:
        ordered = column[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _flow_rows(cols, codes: Mapping[str, int], phase: str, rows: np.ndarray) -> np.ndarray:
    """Those of ``rows`` (ascending) that are launch flow events of ``phase`` (``s`` or ``f``)
    with a flow id."""
    rows = rows[cols["ph"][rows] == codes.get(phase, -2)]
    return rows[name_mask(cols["cat"][rows], codes, _FLOW_CATEGORIES) & (cols["flow_id"][rows] >= 0)]


def _match(cols: dict[str, np.ndarray], keys: tuple[str, ...], rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """For each row of ``rows_a``, a row of ``rows_b`` (ascending) whose ``keys`` columns hold
    equal values (the last such row), else -1. Values are compared exactly.

    Only rows whose last key (the most selective: a timestamp, a flow id) occurs on the other
    side can match, so the rows are first narrowed on that one column, and only the candidates'
    other keys are read; the sort of whole key tuples then runs on the candidates alone (a few
    orphan kernels against a million flow events costs a few rows, not a million-row sort).
    """
    out = np.full(len(rows_a), -1, dtype=np.int64)
    if not len(rows_a) or not len(rows_b):
        return out
    last = cols[keys[-1]]
    # The smaller side first: the big column is looked up among the few values, where a lookup
    # against another big column sorts both. The bigger side's candidates are then looked up
    # among themselves (the same rows: a value of the small side occurs on the big side exactly
    # when it occurs among the big side's candidates). One orphan kernel against ~800k flow
    # ends of a 1 GB trace: a few ms instead of ~60.
    a_small = len(rows_a) <= len(rows_b)
    small, big = (last[rows_a], last[rows_b]) if a_small else (last[rows_b], last[rows_a])
    in_big = rows_among(big, small)
    if not len(in_big):
        return out
    in_small = rows_among(small, big[in_big])
    at_a, at_b = (in_small, in_big) if a_small else (in_big, in_small)
    cand_a, cand_b = rows_a[at_a], rows_b[at_b]
    inverse = _tuple_ids([np.concatenate([cols[k][cand_a], cols[k][cand_b]]) for k in keys])
    last_b = np.full(inverse.max() + 1, -1, dtype=np.int64)
    last_b[inverse[len(cand_a):]] = cand_b  # repeated keys: the last assignment wins (rows_b ascends)
    out[at_a] = last_b[inverse[:len(cand_a)]]
    return out
