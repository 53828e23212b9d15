"""Guard the model against what a scanner faithfully read but no analysis should use.

Two kinds of problems, two answers:

* *Too big* (more events or a longer string than the limits allow): the whole file is refused
  with a :class:`TraceError` naming the limit and how to raise it (:func:`check_sizes`).
* *Absurd times* on single events (a duration of 1e308 µs, a negative one, ``"abc"`` or an
  object where a number belongs, a timestamp years away from every other event): the event is
  dropped and counted, so no sum ever sees it and the rank's note says how many went
  (:func:`drop_absurd`). Dropping happens on the scanner's columns, before anything is derived.
"""

from __future__ import annotations

import numpy as np

from ..errors import TraceError
from ..limits import Limits, how_to_raise
from ..model import SparseColumn
from .fields import INT_MISSING, ScanResult

try:
    from . import _decode  # type: ignore[attr-defined]
except ImportError:  # the extension is optional: numpy always finds the answer itself
    _decode = None


def check_sizes(path, result: ScanResult, limits: Limits) -> None:
    """Refuse a file with more events, or a longer string, than ``limits`` allow."""
    if result.n_events > limits.max_events:
        raise TraceError(path, f"{result.n_events:,} events, more than the limit of {limits.max_events:,}; "
                               + how_to_raise("max_events", limits.max_events * 2))
    longest = max(map(len, result.strings), default=0)
    if longest > limits.max_name_chars:
        raise TraceError(path, f"a string (event name, category or argument) of {longest:,} characters, longer than "
                               f"the limit of {limits.max_name_kb:g} KiB; "
                               + how_to_raise("max_name_kb", f"{max(longest / 1024 * 2, 1):.0f}"))


def drop_absurd(result: ScanResult, limits: Limits) -> tuple[ScanResult, dict[str, int]]:
    """The result without events whose times cannot be real, and {reason: count} of those.

    Every event needs a phase (``ph``: an element that is not an object has none). A complete
    event (``ph: X``) needs a timestamp and a duration that are finite numbers, with
    0 <= duration <= ``max_span_s``. Any timed event (every phase but metadata ``M``, whose ts is
    often 0) must belong to the rank's bulk: a start that a gap of more than ``max_span_s``
    separates from the others (:func:`_apart`). One event at ts -1e15 would otherwise stretch the
    rank's span over decades; a long trace without such a gap keeps every event.
    """
    x_code, m_code = _code(result.strings, "X"), _code(result.strings, "M")  # (no dict of a table of 345,000 names)
    ph = result.top["ph"]
    ts_ns, dur = result.top["ts"], result.top["dur"]
    limit_ns = limits.max_span_us * 1000.0
    if plausible(ph, ts_ns, dur, x_code, m_code, limits.max_span_us, limit_ns):
        return result, {}
    complete = ph == x_code
    has_ts = ts_ns != INT_MISSING
    complete_ts = complete & has_ts
    with np.errstate(invalid="ignore"):  # NaN comparisons are False, which is what is meant
        reasons = {
            'without a phase ("ph"), e.g. not a JSON object': ph == -1,
            "without a numeric timestamp": complete & ~has_ts,
            "without a finite duration": complete_ts & ~np.isfinite(dur),
            "with a negative duration": complete_ts & (dur < 0),
            f"with a duration over {limits.max_span_s:g} s": complete_ts & (dur > limits.max_span_us),
        }
    timed = has_ts & (ph != m_code)
    if _spread(ts_ns, timed) > limit_ns:  # else no gap can be that long: no sort needed
        reasons[f"starting more than {limits.max_span_s:g} s from the others"] = _apart(ts_ns, timed, complete_ts,
                                                                                       limit_ns)
    drop = np.zeros(result.n_events, dtype=bool)
    counts = {}
    for reason, mask in reasons.items():
        if not mask.any():  # the usual case: no column-sized work
            continue
        new = mask & ~drop  # each event counted once, under its first reason
        if new.any():
            counts[reason] = int(new.sum())
            drop |= new
    if not counts:
        return result, {}
    return keep_rows(result, ~drop), counts


def plausible(ph: np.ndarray, ts_ns: np.ndarray, dur: np.ndarray, x_code: int, m_code: int, max_dur_us: float,
              limit_ns: float, use_c: bool | None = None) -> bool:
    """True when :func:`drop_absurd` certainly drops nothing: the C extension ``_decode`` checks
    the usual case in one pass (numpy: a boolean column per reason, all found empty, ~0.05
    CPU s at 1 GB), and a rank that runs for longer than ``max_span_s`` in one more, where no
    gap between neighbouring starts is that long (numpy sorted every start to find that: the
    triton example grown to 1 GB, 345,319 steps of 13.3 s, spans 53 days: its drop_absurd took
    0.175 s). False (or no extension, or columns of other types): drop_absurd looks itself, and
    stays the one definition of what is dropped. ``use_c`` forces the check (tests)."""
    if use_c is None:
        use_c = _decode is not None and (ph.dtype, ts_ns.dtype, dur.dtype) == (np.int32, np.int64, np.float64)
    if not use_c:
        return False
    return _decode.times_plausible(np.ascontiguousarray(ph), np.ascontiguousarray(ts_ns), np.ascontiguousarray(dur),
                                   x_code, m_code, max_dur_us, limit_ns)


def _spread(ts_ns: np.ndarray, timed: np.ndarray) -> float:
    """float(latest) - float(earliest) start of the timed events (0 when none). Within the limit,
    no gap between two starts can pass it, so :func:`_apart` (a sort) is skipped: every real
    trace takes only these two reductions."""
    if not timed.any():
        return 0.0
    lo = ts_ns.min(where=timed, initial=np.iinfo(np.int64).max)
    hi = ts_ns.max(where=timed, initial=np.iinfo(np.int64).min)
    return float(hi) - float(lo)


def _apart(ts_ns: np.ndarray, timed: np.ndarray, complete: np.ndarray, limit_ns: float) -> np.ndarray:
    """Per event, whether it is a timed event outside the rank's bulk: the timed starts, sorted,
    fall into runs wherever two neighbours are more than ``limit_ns`` apart; the bulk is the run
    with the most complete events (then the most timed ones, then the earliest). A stray
    timestamp is a run of its own, years from the rest; a trace that runs for days without such
    a gap is one run, and keeps every event (its ends are far from its median, which dropped
    them before: a 1 GB trace grown from a short gloo one, a third of its events)."""
    rows = np.flatnonzero(timed)
    order = np.argsort(ts_ns[rows], kind="stable")
    rows = rows[order]
    starts = ts_ns[rows].astype(np.float64)  # (differences of int64 extremes would overflow)
    run = np.zeros(len(rows), dtype=np.int64)
    if len(rows) > 1:
        np.cumsum(np.diff(starts) > limit_ns, out=run[1:])
    far = np.zeros(len(ts_ns), dtype=bool)
    if not len(rows):
        return far
    n_runs = int(run[-1]) + 1
    n_complete = np.bincount(run[complete[rows]], minlength=n_runs)
    n_timed = np.bincount(run, minlength=n_runs)
    bulk = np.lexsort((-np.arange(n_runs), n_timed, n_complete))[-1]  # most complete, most timed, earliest
    far[rows[run != bulk]] = True
    return far


def _code(strings: list[str], text: str) -> int:
    """The code of ``text`` in the scanner's string table (its texts are distinct), -2 if absent."""
    try:
        return strings.index(text)
    except ValueError:
        return -2


def keep_rows(result: ScanResult, keep: np.ndarray) -> ScanResult:
    """The rows of ``result`` where ``keep`` is True (sparse args renumbered to match)."""
    new_row = np.cumsum(keep) - 1
    args = {}
    for key, col in result.args.items():
        kept = keep[col.rows]
        args[key] = SparseColumn(rows=new_row[col.rows[kept]], values=col.values[kept])
    return ScanResult(
        n_events=int(keep.sum()),
        top={key: values[keep] for key, values in result.top.items()},
        args=args,
        strings=result.strings,
    )
