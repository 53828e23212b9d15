"""The op profile: per operator and kernel, calls and time per (rank, step), over all ranks.

:func:`op_profile` is the table (see :mod:`perfreport.analyses.diff` for what a sample is and
how names become keys). It is built by :class:`OpProfileFold`, which takes the ranks one at a
time and keeps sums per (kind, raw name, step) only, never per rank: the parent of a
many-rank run folds each rank's per-step sums in as its digest arrives and drops them, so its
memory does not grow with the number of ranks (:mod:`perfreport.running.assemble`).

Which steps count is only known once every rank is in (the steps common to all of them), so
the fold keeps the sums of every step a rank has, and those over each rank's whole trace for
when the ranks share no step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import TraceSet, sorted_intersection, sorted_unique
from .diff import KINDS, PROFILE_COLUMNS, _common_steps, _empty, _Pairs, _rank_pairs
from .grouping import Grouped

_STEP_SHIFT = 24
"""A (step, name) pair is one int64: ``(step + 1) << 24 | name code`` (16.7 M distinct names)."""


class _Sums:
    """Per (kind, step, name code): calls and µs summed over the ranks added so far."""

    def __init__(self) -> None:
        self.kind = np.empty(0, dtype=np.int64)
        self.pair = np.empty(0, dtype=np.int64)
        self.count = np.empty(0, dtype=np.int64)
        self.dur_us = np.empty(0, dtype=np.float64)

    def add(self, kind: np.ndarray, pair: np.ndarray, count: np.ndarray, dur_us: np.ndarray) -> None:
        """Merge one rank's sums: a (kind, pair) already held adds the rank's to its sums, held
        first, so the ranks' order fixes every rounding. The rows stay in (kind, pair) order."""
        if self._after_held(kind, pair):
            # every (kind, pair) new and after those held: the grouping below would give the rows
            # as they are (sums of one value: missing as 0, -0.0 as 0.0), at ~0.1 s per million
            dur_us = np.where(np.isnan(dur_us), 0.0, dur_us)
            dur_us += 0.0
            if not len(self.kind):  # the first rank: its columns as they are, not copied onto nothing
                self.kind, self.pair = kind.astype(np.int64, copy=False), pair.astype(np.int64, copy=False)
                self.count, self.dur_us = count.astype(np.int64), dur_us
                return
            self.kind, self.pair = np.concatenate([self.kind, kind]), np.concatenate([self.pair, pair])
            self.count = np.concatenate([self.count, count.astype(np.int64)])
            self.dur_us = np.concatenate([self.dur_us, dur_us])
            return
        kinds, pairs = np.concatenate([self.kind, kind]), np.concatenate([self.pair, pair])
        g = Grouped({"kind": kinds, "pair": pairs}, ["kind", "pair"])  # sums in row order: held first
        self.count = g.sum(np.concatenate([self.count, count]))
        self.dur_us = g.sum(np.concatenate([self.dur_us, dur_us]))
        self.kind, self.pair = kinds[g.first], pairs[g.first]

    def _after_held(self, kind: np.ndarray, pair: np.ndarray) -> bool:
        """Whether the rows are of one kind, their pairs strictly increasing, and all after the
        last held (kind, pair): a rank's sums of one kind come so (:func:`~.diff._rank_pairs`
        sums per (step, name) in that order), the first rank's whole, later ranks' mostly not."""
        if not len(kind) or kind[0] != kind[-1] or not (kind == kind[0]).all() or not (pair[1:] > pair[:-1]).all():
            return False
        if not len(self.kind):
            return True
        last_kind, last_pair = int(self.kind[-1]), int(self.pair[-1])
        return int(kind[0]) > last_kind or (int(kind[0]) == last_kind and int(pair[0]) > last_pair)


class OpProfileFold:
    """:func:`op_profile` of ranks added one at a time with :meth:`add`, held as sums per
    (kind, raw name, step) over the ranks so far: its size is that of one rank's sums, whatever
    the number of ranks. Ranks added in the same order give the same table to the last bit."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        """Every raw name seen (of either kind), its code."""
        self.keys: list[str] = []
        """Per name code: its key (the normalised kernel name; a CPU op's own name)."""
        self.steps = _Sums()
        self.whole = _Sums()
        self.common: np.ndarray | None = None
        self.ranks = 0
        self.without_whole = 0
        """Ranks added without their whole-trace sums: the table needs common steps then."""

    def add(self, steps: np.ndarray, own: list[_Pairs] | None, whole: list[_Pairs] | None) -> None:
        """One rank: its step numbers, its sums per step over those steps (None when it has
        none), and per name over its whole trace (step -1; None: the caller knows the ranks
        share a step)."""
        steps = np.asarray(steps, dtype=np.int64)
        self.common = steps if self.common is None else sorted_intersection(self.common, steps)
        self.ranks += 1
        self.without_whole += whole is None
        for sums, pairs in ((self.steps, own), (self.whole, whole)):
            for p in pairs or ():
                codes = self._codes(p)
                sums.add(np.full(len(p.label), KINDS.index(p.kind), dtype=np.int64),
                         (p.step.astype(np.int64) + 1) << _STEP_SHIFT | codes[p.label], p.count, p.dur_us)

    def _codes(self, p: _Pairs) -> np.ndarray:
        """The fold's code of each of ``p``'s distinct names (a loop over distinct names)."""
        out = np.empty(len(p.names), dtype=np.int64)
        for i, (name, key) in enumerate(zip(p.names.tolist(), p.keys.tolist())):
            code = self.names.get(name)
            if code is None:
                code = self.names[name] = len(self.keys)
                self.keys.append(key)
            out[i] = code
        return out

    def table(self) -> pd.DataFrame:
        """The :func:`op_profile` table of the ranks added."""
        common = self.common if self.common is not None else np.empty(0, dtype=np.int64)
        if not len(common) and self.without_whole:
            raise ValueError(f"op profile: the ranks share no step and {self.without_whole} came without "
                             "their whole-trace sums")
        sums = self.steps if len(common) else self.whole
        keep = np.isin((sums.pair >> _STEP_SHIFT) - 1, common) if len(common) else np.ones(len(sums.pair), dtype=bool)
        kind, code = sums.kind[keep], sums.pair[keep] & ((1 << _STEP_SHIFT) - 1)
        if not len(kind):
            return _empty(PROFILE_COLUMNS)
        names = np.array(self.keys, dtype=object)
        key_ids, _ = pd.factorize(names, sort=True)  # each name code's key, numbered in the keys' order
        if len(key_ids) and key_ids.min() >= 0:  # grouped by integers: the groups strings give, in their order
            g = Grouped({"kind": kind, "key": key_ids[code]}, ["kind", "key"])
        else:  # (a missing key: the strings' grouping drops it)
            g = Grouped({"kind": kind, "key": names[code]}, ["kind", "key"])
        keys = names[code[g.first]]
        distinct_names = sorted_unique(g.ids * len(self.keys) + code[g.rows]) // len(self.keys)  # (group, raw name)
        out = pd.DataFrame({"kind": np.array(KINDS, dtype=object)[kind[g.first]], "key": keys,
                            "count": g.sum(sums.count[keep]), "dur_us": g.sum(sums.dur_us[keep])})
        out["names"] = np.bincount(distinct_names, minlength=g.n)
        samples = self.ranks * (len(common) if len(common) else 1)
        out["samples"] = samples
        out["count_per_step"] = out["count"] / samples
        out["dur_per_step_us"] = out["dur_us"] / samples
        out["dur_per_call_us"] = out["dur_us"] / out["count"]
        out = out.sort_values(["kind", "dur_per_step_us", "key"], ascending=[True, False, True], ignore_index=True)
        return out[list(PROFILE_COLUMNS)].astype({"samples": np.int64, "names": np.int64})


def op_profile(traces: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Per (kind, key): ``count_per_step``, ``dur_per_step_us`` (means per rank and step, see
    :mod:`perfreport.analyses.diff`), ``dur_per_call_us``, the number of ``samples`` averaged and
    of raw ``names`` merged into the key. Sorted by kind, then by time per step, largest first.

    The ranks in rank order through :class:`OpProfileFold`; each gives only the sums the
    table needs (those of the common steps, or of its whole trace when there are none)."""
    steps = _common_steps(traces)
    fold = OpProfileFold()
    for t in traces:  # a loop over ranks
        pairs = _rank_pairs(t, steps, exact)
        fold.add(steps, pairs if len(steps) else None, None if len(steps) else pairs)
    return fold.table()


__all__ = ["OpProfileFold", "op_profile"]
