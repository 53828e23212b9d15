"""What report.json keeps of the tables that grow with a trace's calls and steps.

Two kinds of table grow without bound:

- ``collectives`` has a row per collective call of every rank, and ``collective_skew`` one per
  call matched across ranks. A gloo rank makes a dozen calls a step, so on a long trace the
  table outgrows the trace itself: the gloo-only rank grown to 1 GB made 2,045,796 calls, 653
  MB of its 810 MB report.json.
- the per-step tables (:data:`PER_STEP_TABLES`: ``step_metrics``, ``profiler_steps``,
  ``straggler_steps`` and every ``*_per_step`` / ``*_by_step`` table) have a row (or a few) per profiler step. The trace
  grown to 1 GB from the triton example has 345,319 steps: a ``compare`` of it wrote a 1.68 GB
  report.json, 5.2 of its 14.5 s (2.3 s of it the file system taking the bytes).

Every other table is an aggregate (per kind, per rank, per op) or already bounded
(``memory_timeline``, the series), and the tables that summarise calls and steps
(``collective_summary``, ``step_times``, ``time_at_stake`` …), the gate and the diagnosis use
every call and every step whatever report.json keeps.

So report.json keeps :data:`CALL_ROWS` calls and the rows of :data:`STEP_ROWS` steps of a job,
its ranks sharing them (:func:`rows_kept`: each rank's first calls in time order and its first
steps by number; rows outside any step, step -1, stay), the job's :data:`CALL_ROWS` matched
calls of largest skew (:data:`LARGEST_CALL_TABLES`), and
its ``tables_cut`` names every table and rank cut: the table, the rank, its rows and the rows
kept (and for a per-step table its steps and the steps kept; for a table of matched calls no
rank, and the column whose largest values were kept, ``largest``). No real trace we hold comes near
either bound. ``--full-tables`` keeps every row; the Python API (``perfreport.analyses``)
always returns whole tables. A command's rank tasks already send each per-step table cut so,
with their entries (:attr:`perfreport.running.digest.AnalysisOptions.step_rows`, merged by
:func:`merged_cuts`): a 345,319-step rank's digest pickles to 183 MB instead of 403.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..model import fits_a_presence_table, sorted_unique, step_name_table


CALL_ROWS = 20_000
"""Calls of one rank report.json keeps of each per-call table: every call of every real trace we
hold (the most on one rank: 135, our FSDP gloo recording, 27 a step), so a job like it keeps
its calls for 740 steps; 20,000 rows are ~6.5 MB of JSON a rank."""

STEP_ROWS = 10_000
"""Steps of one rank report.json keeps of each per-step table, and samples of each side of a
check (a sample is a step): every step of every real trace we hold (the most: 8 steps a rank).
50,000 (the first bound) left the compare of the triton example grown to 1 GB (345,319 steps a
side) a 304 MB report.json: 123 MB of tables a side and 75 MB of samples, its encoding 0.86-0.93
s of the parent's time, on top of the 0.2-0.3 s its writing takes; with 10,000 it is 54 MB.
A job's ranks share the bound (:func:`rows_kept`)."""

RANK_CALL_ROWS_MIN = 1_000
RANK_STEP_ROWS_MIN = 100
"""The calls and steps each rank keeps however many ranks share :data:`CALL_ROWS` and
:data:`STEP_ROWS` (:func:`rows_kept`): more than any real rank we hold makes (135 calls, 8 steps)."""


def rows_kept(ranks: int) -> tuple[int, int]:
    """(calls, steps) report.json keeps of each rank of a job of ``ranks`` ranks: :data:`CALL_ROWS`
    and :data:`STEP_ROWS` shared among them, each rank keeping at least :data:`RANK_CALL_ROWS_MIN`
    and :data:`RANK_STEP_ROWS_MIN`, so that a table's rows stay about as bounded for 16 ranks as
    for one. 16 ranks of 50 MB grown from the triton example (17,343 steps each) kept 10,000
    steps a rank before: a 372 MB report.json for 800 MB of traces, whose writing alone took
    1.2-1.3 s after the command's 2.6-2.7 s (`analyze --format json`)."""
    n = max(int(ranks), 1)
    return max(RANK_CALL_ROWS_MIN, CALL_ROWS // n), max(RANK_STEP_ROWS_MIN, STEP_ROWS // n)

PER_CALL_TABLES = ("collectives",)
"""The tables with a row per call, in time order within each rank."""

LARGEST_CALL_TABLES = {"collective_skew": "skew_us"}
"""The tables with a row per call matched across ranks (no rank column), and the column whose
largest values report.json keeps: the report shows the largest skews, and a cut by time would
have dropped them (the straggler evidence and the summaries are computed from every call)."""

PER_STEP_TABLES = ("profiler_steps", "step_metrics", "straggler_steps")
"""The per-step tables besides those named ``*_per_step`` / ``*_by_step`` (:func:`is_per_step`)."""

STEP_COLUMNS = ("step", "iteration")
"""A per-step table's step number column (the first of these it has)."""

STEP_NAMED_TABLES = {"gpu_user_annotation_breakdown": "name"}
"""Tables with a row per distinct name, where every ``ProfilerStep#N`` is a name of its own
(torch 2.4+ writes each step as a GPU annotation too, so the MI250 minitoy grown to 1 GB has
18,765 rows there): their step rows are cut like a per-step table's, by the N of the name
(:func:`perfreport.model.step_name_table`); the other names' rows stay."""


def is_per_step(name: str) -> bool:
    """Whether the table ``name`` has a row (or a few) per profiler step."""
    return name in PER_STEP_TABLES or name.endswith(("_per_step", "_by_step"))


def cut_tables(tables: Mapping[str, pd.DataFrame], call_rows: int | None = CALL_ROWS,
               step_rows: int | None = STEP_ROWS,
               matched_rows: int | None = None) -> tuple[dict[str, pd.DataFrame], list[dict]]:
    """``tables`` with each per-call table cut to its first ``call_rows`` rows per rank, each
    table of matched calls to its ``matched_rows`` rows of largest value (:data:`LARGEST_CALL_TABLES`;
    None: ``call_rows``) and each per-step table to the rows of its first ``step_rows`` steps per
    rank (None: as they are), and one ``tables_cut`` entry per table and rank cut (per table, for
    matched calls)."""
    out, cut = dict(tables), []
    matched_rows = call_rows if matched_rows is None else matched_rows
    for name, frame in tables.items():
        if frame is None:
            continue
        if name in LARGEST_CALL_TABLES and matched_rows is not None and len(frame) > matched_rows \
                and LARGEST_CALL_TABLES[name] in frame.columns:
            column = LARGEST_CALL_TABLES[name]
            kept = _largest(frame[column].to_numpy(np.float64), matched_rows)
            entries = [{"rows": len(frame), "kept": matched_rows, "largest": column}]
        elif "rank" not in frame.columns:
            continue
        elif name in PER_CALL_TABLES and call_rows is not None and len(frame) > call_rows:
            kept, entries = _first_calls(frame, call_rows)
        elif is_per_step(name) and step_rows is not None and len(frame) > step_rows:
            column = next((c for c in STEP_COLUMNS if c in frame.columns), None)
            if column is None:
                continue
            kept, entries = _first_steps(frame, column, step_rows)
        elif name in STEP_NAMED_TABLES and step_rows is not None and len(frame) > step_rows \
                and STEP_NAMED_TABLES[name] in frame.columns:
            named = frame[["rank"]].assign(step=_named_steps(frame[STEP_NAMED_TABLES[name]]))
            kept, entries = _first_steps(named, "step", step_rows)
        else:
            continue
        if entries:
            out[name] = frame[kept].reset_index(drop=True)
            cut += [{"table": name, **entry} for entry in entries]
    return out, cut


def merged_cuts(earlier: list[dict], later: list[dict], tables: Sequence[str]) -> list[dict]:
    """``tables_cut`` entries of two cuts of one set of tables (the rank tasks' cut of each rank's
    per-step tables, then the cut of the tables put together), in the order one cut of the whole
    tables lists them: by table in ``tables``' order, then by rank (a table of matched calls has
    no rank: it is cut once). A table and rank cut twice is one entry: its rows (and steps) before
    the first cut, those kept after the second."""
    if not earlier:
        return later
    merged = {(c["table"], c.get("rank")): dict(c) for c in earlier}
    for c in later:
        first = merged.get((c["table"], c.get("rank")))
        merged[(c["table"], c.get("rank"))] = c if first is None else \
            {**c, **{k: first[k] for k in ("rows", "steps") if k in first}}
    position = {name: i for i, name in enumerate(tables)}
    return sorted(merged.values(), key=lambda c: (position.get(c["table"], len(position)), c.get("rank", -1)))


def _largest(values: np.ndarray, limit: int) -> np.ndarray:
    """Mask of the ``limit`` rows of largest ``values`` (NaN the smallest; of equal values the
    earlier rows), which stay in their order."""
    order = np.argsort(-np.where(np.isnan(values), -np.inf, values), kind="stable")
    keep = np.zeros(len(values), dtype=bool)
    keep[order[:limit]] = True
    return keep


def _first_calls(frame: pd.DataFrame, limit: int) -> tuple[np.ndarray, list[dict]]:
    """Mask of each rank's first ``limit`` rows (in table order), and the entries of the ranks
    cut."""
    codes, ranks = pd.factorize(frame["rank"].to_numpy(), sort=True)
    counts = np.bincount(codes, minlength=len(ranks))
    if counts.max(initial=0) <= limit:
        return np.ones(len(frame), dtype=bool), []
    order = np.argsort(codes, kind="stable")
    place = np.empty(len(codes), dtype=np.int64)
    place[order] = np.arange(len(codes)) - np.repeat(np.cumsum(counts) - counts, counts)
    return place < limit, [{"rank": int(r), "rows": int(n), "kept": limit}
                           for r, n in zip(ranks, counts) if n > limit]


def _first_steps(frame: pd.DataFrame, column: str, limit: int) -> tuple[np.ndarray, list[dict]]:
    """Mask of the rows of each rank's first ``limit`` steps (by number; rows of step < 0 kept),
    and the entries of the ranks cut: each rank's distinct steps as the distinct integers
    ``rank code * width + step`` (a presence table over their range where it is not much wider
    than the rows, else a sort), its last kept step the ``limit``-th of them. A lexsort of the
    (rank, step) pairs took 27 ms for the million rows of a 345,319-step rank's idle table."""
    rank = frame["rank"].to_numpy()
    if len(rank) and (rank == rank[0]).all():  # one rank: no factorize
        codes, ranks = np.zeros(len(rank), dtype=np.int64), rank[:1]
    else:
        codes, ranks = pd.factorize(rank, sort=True)
    step = frame[column].to_numpy()
    counted = step >= 0
    s = step[counted].astype(np.int64)
    if not len(s):
        return np.ones(len(frame), dtype=bool), []
    low = int(s.min())
    width = int(s.max()) - low + 1
    key = s - low
    if len(ranks) > 1:
        key += codes[counted].astype(np.int64) * width
    span = len(ranks) * width
    if fits_a_presence_table(span, len(key)):
        present = np.zeros(span, dtype=bool)
        present[key] = True
        distinct = np.flatnonzero(present)
    else:
        distinct = sorted_unique(key)
    r, s = distinct // width, distinct % width + low
    n_steps = np.bincount(r, minlength=len(ranks))
    cut = np.flatnonzero(n_steps > limit)
    if not len(cut):
        return np.ones(len(frame), dtype=bool), []
    last = np.full(len(ranks), np.inf)
    last[cut] = s[(np.cumsum(n_steps) - n_steps)[cut] + limit - 1]
    keep = ~counted | (step <= last[codes])
    rows = np.bincount(codes, minlength=len(ranks))
    kept = np.bincount(codes[keep], minlength=len(ranks))
    return keep, [{"rank": int(ranks[i]), "rows": int(rows[i]), "kept": int(kept[i]), "steps": int(n_steps[i]),
                   "steps_kept": limit} for i in cut]


def _named_steps(names: pd.Series) -> np.ndarray:
    """The N of each ``ProfilerStep#N`` name, -1 for any other (a row outside any step)."""
    which, distinct = pd.factorize(names.to_numpy(dtype=object), use_na_sentinel=True)
    table = step_name_table(str(text) for text in distinct)  # (its last slot, -1, for a missing name)
    return table[which]


def _ranks_listed(counts: list[tuple[int, int]], verb: str) -> str:
    """"rank 0 made 135, rank 1 made 135": the first four ranks, and how many more."""
    text = ", ".join(f"rank {r} {verb} {n:,}" for r, n in counts[:4])
    return text + (f" and {len(counts) - 4} more ranks" if len(counts) > 4 else "")


def cut_text(cut: list[dict]) -> str | None:
    """The sentence a report says about the per-call tables in ``tables_cut``; None when none
    was cut."""
    calls = [c for c in cut if c.get("table") in PER_CALL_TABLES]
    skews = [c for c in cut if c.get("table") in LARGEST_CALL_TABLES]
    if not calls and not skews:
        return None
    parts = []
    if calls:
        ranks = _ranks_listed([(c["rank"], c["rows"]) for c in calls], "made")
        parts.append(f"each rank's first {calls[0]['kept']:,} collective calls ({ranks})")
    if skews:
        parts.append(f"the {skews[0]['kept']:,} calls of largest start skew across ranks (of {skews[0]['rows']:,} "
                     "matched)")
    return (f"report.json keeps {' and '.join(parts)}; the summaries and the straggler evidence count every "
            "call, and --full-tables keeps them all.")


def samples_cut_text(checks: list[dict]) -> str | None:
    """The sentence a comparison report says where report.json keeps only each check's first
    samples a side (a side's ``*_values`` list shorter than its ``*_samples`` count:
    :func:`perfreport.report.json_report.check_record`); None when no check was cut."""
    kept, most = None, 0
    for check in checks:
        e = check.get("evidence") if isinstance(check, dict) else None
        for side in ("baseline", "candidate"):
            n, values = (e or {}).get(f"{side}_samples"), (e or {}).get(f"{side}_values")
            if isinstance(n, int) and hasattr(values, "__len__") and not isinstance(values, (str, dict)) \
                    and len(values) < n:  # (a list, or the document's Floats before it is written)
                kept, most = len(values), max(most, n)
    if kept is None:
        return None
    return (f"report.json keeps each check's first {kept:,} samples a side (a side here has up to {most:,}); "
            "the verdicts use every sample, and --full-tables keeps them all.")


def steps_cut_text(cut: list[dict]) -> str | None:
    """The sentence a report says about the per-step tables in ``tables_cut``; None when none
    was cut."""
    steps: dict[int, int] = {}  # per rank: its steps (the most any table holds: step_metrics leaves the last out)
    kept = None
    for c in cut:
        if (is_per_step(str(c.get("table"))) or c.get("table") in STEP_NAMED_TABLES) and "steps" in c:
            steps[c["rank"]] = max(steps.get(c["rank"], 0), c["steps"])
            kept = c["steps_kept"]
    if not steps:
        return None
    ranks = _ranks_listed(list(steps.items()), "has")
    return (f"report.json's per-step tables, and the figures and tables drawn from them here, keep each rank's "
            f"first {kept:,} profiler steps ({ranks}); the step time series, the summaries, "
            "the gate and the diagnosis use every step, and --full-tables keeps them all.")


__all__ = ["CALL_ROWS", "rows_kept", "PER_CALL_TABLES", "PER_STEP_TABLES", "STEP_NAMED_TABLES", "STEP_ROWS", "cut_tables", "cut_text", "is_per_step",
           "merged_cuts", "steps_cut_text"]
