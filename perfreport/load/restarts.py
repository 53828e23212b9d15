"""Profiler step numbers that start again within one trace: numbered on, in time order.

``torch.profiler`` numbers its steps up from where it is, across every cycle of its schedule, so
one trace holds each ``ProfilerStep#N`` once per thread that records it. A trace made of several
traces put back to back (runs concatenated, or one trace's events repeated to grow it) holds the
same numbers again later in time: ``101 … 105, 101 … 105, …``. Read as they are, every step
would span from its first occurrence to its last, the whole trace, and its GPU work would be
that of every repeat; each repeat is in fact a step of its own. So where a thread's step
numbers go down, the steps from there on are numbered on from the highest so far, in time order,
on every thread alike (``101 … 105, 106 … 110, …``), and the trace says so
(:attr:`~perfreport.model.TraceMeta.step_restarts`). Steps recorded at once on two threads
keep one number: only a number lower than the thread's last one starts again.
"""

from __future__ import annotations

import numpy as np

from ..model import StringCodes, step_name_table

STEP_NAME_FORMAT = "ProfilerStep#{}"


def restart_offsets(numbers: np.ndarray, threads: np.ndarray) -> tuple[np.ndarray, int]:
    """(the number to add to each step span's number, the restarts found) for step spans in
    time order (``numbers``, their ``threads``' codes): where a thread's number is below its
    previous one, the numbering restarts, and every span from there on is shifted so that the
    restarted number follows the highest one given so far. A loop over the step spans, run only
    for a trace whose numbers go down somewhere."""
    offsets = np.zeros(len(numbers), dtype=np.int64)
    last_of: dict[int, int] = {}
    offset, highest, restarts = 0, None, 0
    for i, (number, thread) in enumerate(zip(numbers.tolist(), threads.tolist())):
        previous = last_of.get(thread)
        if previous is not None and number + offset < previous:  # this thread starts again
            offset = highest + 1 - number
            restarts += 1
        value = number + offset
        offsets[i] = offset
        last_of[thread] = value
        highest = value if highest is None else max(highest, value)
    return offsets, restarts


def goes_down(numbers: np.ndarray, threads: np.ndarray) -> bool:
    """Whether some thread's step number (spans in time order) is below its previous one."""
    if len(numbers) < 2:
        return False
    order = np.argsort(threads, kind="stable")  # each thread's spans together, still in time order
    n, t = numbers[order], threads[order]
    return bool(((n[1:] < n[:-1]) & (t[1:] == t[:-1])).any())


def restart_note(restarts: int, first: int, last: int) -> str:
    """The sentence a trace whose numbering restarted carries (a report's notes show it)."""
    return (f"its ProfilerStep numbers start again {restarts:,} time(s) (a trace of several put back to back?): "
            f"steps numbered on in time order, {first}–{last}")


def numbered_on(cols, step_rows: np.ndarray, strings: np.ndarray, codes: StringCodes | dict[str, int],
                 step_numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(strings, step-number table, the note) once step numbers that start again are numbered on
    (see the module's doc): the spans renamed ``ProfilerStep#N`` with their new numbers
    (names added to the strings where new), so that every reader of a step's name reads its
    number. Unchanged, with no note, for a trace whose numbers never go down."""
    numbers = step_numbers[cols["name"][step_rows]]
    threads = cols["pid_code"][step_rows].astype(np.int64) * (int(cols["tid_code"].max(initial=0)) + 2) + \
        cols["tid_code"][step_rows]
    if not goes_down(numbers, threads):
        return strings, step_numbers, None
    offsets, restarts = restart_offsets(numbers, threads)
    moved = np.flatnonzero(offsets)
    new_numbers = numbers[moved] + offsets[moved]
    added: list[str] = []
    name_codes = np.empty(len(moved), dtype=cols["name"].dtype)
    for k, number in enumerate(new_numbers.tolist()):  # a loop over the restarted spans
        text = STEP_NAME_FORMAT.format(number)
        code = codes.get(text)
        if code is None:
            code = codes[text] = len(strings) + len(added)
            added.append(text)
        name_codes[k] = code
    cols["name"] = cols["name"].copy()  # (the scanner's column is read-only; this trace is rare)
    cols["name"][step_rows[moved]] = name_codes
    if added:
        strings = np.concatenate([strings, np.array(added, dtype=object)])
        step_numbers = np.concatenate([step_numbers[:-1], step_name_table(added)[:-1], step_numbers[-1:]])
    final = numbers + offsets
    return strings, step_numbers, restart_note(restarts, int(final.min()), int(final.max()))


__all__ = ["STEP_NAME_FORMAT", "goes_down", "numbered_on", "restart_note", "restart_offsets"]
