"""What report.json keeps of a table with one row per call.

``collectives`` has a row per collective call of every rank. A gloo rank makes a dozen calls a
step, so on a long trace the table outgrows the trace itself: the gloo-only rank grown to 1 GB
made 2,045,796 calls, 653 MB of its 810 MB report.json, and encoding both sides' tables took
4.5 s of a 13.7 s ``compare``. Every other table is an aggregate (per step, per kind, per rank)
or already bounded (``memory_timeline``, the series), and the tables that summarise the calls
(``collective_summary``, ``collectives_per_step``, ``collective_skew``, ``straggler_evidence``)
count every call whatever report.json keeps.

So report.json keeps each rank's first :data:`CALL_ROWS` calls, in time order, and its
``tables_cut`` names every rank whose calls were cut (the table, the rank, the calls it made,
the calls kept). ``--full-tables`` keeps every row; the Python API
(:func:`perfreport.analyses.collectives.collectives`) always returns the whole table.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

CALL_ROWS = 20_000
"""Calls of one rank report.json keeps of each per-call table: every call of every real trace we
hold (the most on one rank: 135, our FSDP gloo recording, 27 a step), so a job like it keeps
its calls for 740 steps; 20,000 rows are ~6.5 MB of JSON a rank."""

PER_CALL_TABLES = ("collectives",)
"""The tables with a row per call, in time order within each rank."""


def cut_tables(tables: Mapping[str, pd.DataFrame], limit: int | None = CALL_ROWS
               ) -> tuple[dict[str, pd.DataFrame], list[dict]]:
    """``tables`` with each per-call table cut to its first ``limit`` rows per rank (None: as
    they are), and one ``tables_cut`` entry per rank cut: ``table``, ``rank``, ``rows`` (its
    calls), ``kept``."""
    out, cut = dict(tables), []
    if limit is None:
        return out, cut
    for name in PER_CALL_TABLES:
        frame = out.get(name)
        if frame is None or len(frame) <= limit:
            continue
        ranks = frame["rank"].to_numpy()
        codes, uniques = pd.factorize(ranks, sort=True)
        counts = np.bincount(codes, minlength=len(uniques))
        if counts.max() <= limit:
            continue
        out[name] = frame[_first_rows(codes, counts, limit)].reset_index(drop=True)
        cut += [{"table": name, "rank": int(rank), "rows": int(n), "kept": limit}
                for rank, n in zip(uniques, counts) if n > limit]
    return out, cut


def _first_rows(codes: np.ndarray, counts: np.ndarray, limit: int) -> np.ndarray:
    """Mask of the rows among the first ``limit`` of their rank (``codes``), in table order."""
    order = np.argsort(codes, kind="stable")
    starts = np.cumsum(counts) - counts
    place = np.empty(len(codes), dtype=np.int64)
    place[order] = np.arange(len(codes)) - np.repeat(starts, counts)
    return place < limit


def cut_text(cut: list[dict]) -> str | None:
    """The sentence a report says about ``tables_cut``; None when nothing was cut."""
    if not cut:
        return None
    ranks = ", ".join(f"rank {c['rank']} made {c['rows']:,}" for c in cut[:4])
    more = f" and {len(cut) - 4} more ranks" if len(cut) > 4 else ""
    return (f"report.json keeps each rank's first {cut[0]['kept']:,} collective calls ({ranks}{more}); the "
            "summaries count every call, and --full-tables keeps them all.")


__all__ = ["CALL_ROWS", "PER_CALL_TABLES", "cut_tables", "cut_text"]
