"""Hints for a newcomer's slips on the command line: arguments of ``compare`` that look swapped.

``compare BASELINE CANDIDATE`` judges the second against the first; given the other way round
every regression reads as an improvement, and the verdict is wrong without any error. Two
signs that the order is wrong, both read from what was loaded (nothing is guessed from names):

* the CANDIDATE is a stored baseline while the BASELINE is a plain trace folder or file;
* the BASELINE was recorded after the CANDIDATE: each rank file's start on the wall clock is
  ``baseTimeNanoseconds`` (the profiler's epoch offset) plus its first timestamp, and the
  baseline's earliest start is later than the candidate's latest.

A hint is advice on stderr; the comparison runs as asked.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

from ..model import TraceSet


def recorded_at(traces: TraceSet) -> list[float]:
    """Each rank's recording start, seconds since the Unix epoch, where the trace says it
    (``baseTimeNanoseconds`` present); ranks without it are left out."""
    return [t.meta.base_time_ns / 1e9 + t.meta.ts_origin_us / 1e6 for t in traces
            if t.meta.base_time_ns is not None]


def _when(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="seconds")


def swapped_hints(baseline_ref: str, candidate_ref: str, *, baseline_stored: bool, candidate_stored: bool,
                  baseline_times: Iterable[float], candidate_times: Iterable[float]) -> list[str]:
    """The hints (one line each) that ``compare baseline_ref candidate_ref`` has its arguments
    the wrong way round; [] when nothing suggests it."""
    swap = f"perfreport compare {candidate_ref} {baseline_ref}"
    if candidate_stored and not baseline_stored:
        return [f"CANDIDATE {candidate_ref} is a stored baseline and BASELINE {baseline_ref} is not: the arguments "
                f"look swapped (compare BASELINE CANDIDATE judges the second against the first); did you mean "
                f"`{swap}`?"]
    base, cand = list(baseline_times), list(candidate_times)
    if base and cand and not baseline_stored and min(base) > max(cand):
        return [f"BASELINE {baseline_ref} was recorded after CANDIDATE {candidate_ref} ({_when(min(base))} vs "
                f"{_when(max(cand))} UTC): the baseline is usually the older run; did you mean `{swap}`?"]
    return []


__all__ = ["recorded_at", "swapped_hints"]
