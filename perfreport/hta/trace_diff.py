"""HTA's trace diff API: ``LabeledTrace``, ``TraceDiff``, ``DeviceType``.

``TraceDiff.compare_traces`` counts each operator/kernel name and sums its duration in a
chosen set of ranks and iterations of two traces, then puts the two side by side. As in HTA
0.5.0 it works on the *unfiltered* parse of a trace: every ProfilerStep is present (no
last-step trim), times are not rebased, and GPU events take the iteration of their launch.

Deviations from HTA 0.5.0 (docs/hta-differences.md):

* ``compare_traces`` does not rename the test ``LabeledTrace`` when both labels are equal; the
  columns still use HTA's ``<label>_control_test`` name for the test side;
* several ranks passed to ``extract_ops`` are keyed by their own rank numbers (HTA keys them
  by the first ranks of the trace, whichever were asked for);
* durations of sub-µs events straddling a µs boundary are 0, not -1 (see ``_frame``).

The perfreport analysis with per-step means over all ranks is
:func:`perfreport.analyses.diff.ops_diff`.
"""

from __future__ import annotations

import logging
import os
import random
import re
from enum import Enum
from numbers import Integral
from typing import Dict, List, Optional, Union  # noqa: F401  (Dict/List/Optional: HTA's module namespace)

import numpy as np
import pandas as pd

from ..load import load
from ..model import TraceSet, sorted_unique
from ._frame import FRAME_COLUMNS, SymbolTable, raw_frame
from . import _plots
from .trace import FrameAccess, HtaTrace, meta_dict

log = logging.getLogger(__name__)


class DeviceType(Enum):
    """Which events a diff compares: CPU ops, GPU ops, or both (HTA's values)."""

    CPU = 1
    GPU = 2
    ALL = 3


_MEMORY_NAME = re.compile(r"^(Memcpy|Memset|dma)")


def shorten_name(name: str) -> str:
    """HTA 0.5.0's short name: drop ``->``, every ``<...>`` and ``(...)`` group, keep the last word.

    Memory-kernel names (``Memcpy…``, ``Memset…``, ``dma…``) and names without any ``<`` or
    ``(`` are returned unchanged. Unbalanced closers pop back to the previous opener, as in HTA.
    """
    if _MEMORY_NAME.match(name) or ("<" not in name and "(" not in name):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):  # loop over the characters of one distinct name
        if c == ">" or c == ")":
            opener = "<" if c == ">" else "("
            while stack and stack[-1] != opener:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(c)
    return "".join(stack).split(" ")[-1]


class ParsedTrace(FrameAccess):
    """HTA's ``Trace`` after ``parse_traces()`` alone: per-rank frames neither aligned nor trimmed.

    ``traces`` {rank: DataFrame} (index = raw event position, ``end`` = ts + dur in the file's
    own time base), ``symbol_table`` (one table for all ranks), ``traceset`` (perfreport's
    columns), ``trace_files`` and ``meta_data`` {rank: ...}.
    """

    def __init__(self, traceset: TraceSet) -> None:
        self.traceset = traceset
        self.symbol_table = SymbolTable()
        self.traces: dict[int, pd.DataFrame] = {}
        for trace in traceset:  # rank order, as HTA merges the local symbol tables
            frame, _ = raw_frame(trace, self.symbol_table)
            frame["end"] = frame["ts"] + frame["dur"]
            self.traces[trace.rank] = frame.set_index("index", drop=False).rename_axis(None)[FRAME_COLUMNS]
        self.trace_files = {t.rank: t.meta.path for t in traceset}
        self.meta_data = {t.rank: meta_dict(t) for t in traceset}
        self.trace_path = traceset.source
        self.is_parsed = True


def _as_list(value, what: str) -> list[int]:
    if isinstance(value, Integral) and not isinstance(value, bool):
        return [int(value)]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError(f"Invalid type for argument `{what}` {value}.")


class LabeledTrace:
    """A trace with a label (the column prefix in ``TraceDiff.compare_traces``).

    Built from ``trace_dir`` (a folder of rank files) or ``t`` (a ``TraceAnalysis.t``, a
    :class:`ParsedTrace` or a perfreport ``TraceSet``); either way the trace is taken
    unfiltered, as HTA's ``parse_traces()`` leaves it. The label defaults to ``t<0..10>``.
    """

    def __init__(self, label: str | None = None, t=None, trace_dir: str | None = None) -> None:
        self.label: str = label if label else f"t{random.randint(0, 10)}"
        if t is not None:
            self.t = _parsed(t)
        elif trace_dir is not None and os.path.isdir(trace_dir):
            self.t = ParsedTrace(load(trace_dir))
        else:
            raise ValueError("either a trace object or a valid trace dir must be provided in LabeledTrace.__init__()")
        table = self.t.symbol_table.get_sym_table()
        self.s_tab = pd.Series(table, dtype=object)
        self.iteration_df: pd.DataFrame = self._extract_iterations()

    @property
    def s_map(self) -> pd.Series:
        return pd.Series(self.t.symbol_table.get_sym_id_map(), dtype=np.int64)

    def _extract_iterations(self) -> pd.DataFrame:
        """(symbol, id, iteration) of each ``ProfilerStep…`` name of the events (HTA's table)."""
        table = self.t.symbol_table.get_sym_table()
        used = sorted_unique(np.concatenate([f["name"].to_numpy() for f in self.t.traces.values()] or [np.empty(0, int)]))
        rows = []
        for i in used:  # distinct names, not events
            s = table[i]
            if s.startswith("ProfilerStep"):
                try:
                    rows.append((s, int(i), int(s.replace("ProfilerStep#", ""))))
                except ValueError:
                    raise ValueError(f"LabeledTrace {self.label}: cannot read a step number from {s!r}") from None
        return pd.DataFrame(rows, columns=["symbol", "id", "iteration"]).astype({"id": np.int64, "iteration": np.int64})

    def ranks(self) -> list[int]:
        """All ranks, sorted."""
        return sorted(self.t.traces)

    def iterations(self) -> list[int]:
        """All ProfilerStep numbers of the trace, sorted (the last step included)."""
        return sorted(int(i) for i in self.iteration_df["iteration"])

    def extract_ops(self, rank: int | list[int] | None = None, iteration: int | list[int] | None = None,
                    device_type: DeviceType = DeviceType.ALL) -> pd.DataFrame:
        """Rows of ``rank`` (default: the first rank) in ``iteration`` (default: the first
        iteration) on ``device_type``: CPU = stream -1, GPU = any other stream.

        Several ranks are concatenated with ``rank``/``idx`` columns. Raises ValueError for a
        rank or iteration the trace lacks (or when it has none at all).
        """
        all_ranks = self.ranks()
        if rank is None:
            if not all_ranks:
                raise ValueError(f"Trace {self.label} doesn't have any rank.")
            ranks = all_ranks[:1]
        else:
            ranks = _as_list(rank, "rank")
        for r in ranks:
            if r not in all_ranks:
                raise ValueError(f"Invalid argument rank={rank}.")
        all_iterations = self.iterations()
        if iteration is None:
            if not all_iterations:
                raise ValueError(f"Trace {self.label} doesn't have any iteration.")
            iterations = all_iterations[:1]
        else:
            iterations = _as_list(iteration, "iteration")
        for it in iterations:
            if it not in all_iterations:
                raise ValueError(f"Invalid argument iteration={it}.")

        if len(ranks) == 1:
            df = self.t.get_trace(ranks[0])
        else:
            df = pd.concat([self.t.get_trace(r) for r in ranks], axis=0, keys=ranks,
                           names=["rank", "idx"]).reset_index()
        df = df[df["iteration"].isin(iterations)]
        if device_type == DeviceType.CPU:
            df = df[df["stream"].eq(-1)]
        elif device_type == DeviceType.GPU:
            df = df[df["stream"].ne(-1)]
        return df

    def get_ops_summary(self, ops: pd.DataFrame) -> pd.DataFrame:
        """Count and total duration (µs) of ``ops`` per (cat, name): columns ``cat``, ``name``,
        ``short_name``, ``counts``, ``total_duration``, ``cat_id``, ``name_id``."""
        df = ops.groupby(["cat", "name"])["dur"].agg(["count", "sum"]).reset_index()
        df.columns = ["cat_id", "name_id", "counts", "total_duration"]
        table = np.asarray(self.t.symbol_table.get_sym_table(), dtype=object)
        df["cat"] = table[df["cat_id"].to_numpy(dtype=np.int64)] if len(df) else pd.Series(dtype=object)
        df["name"] = table[df["name_id"].to_numpy(dtype=np.int64)] if len(df) else pd.Series(dtype=object)
        df["short_name"] = df["name"].map(shorten_name) if len(df) else pd.Series(dtype=object)
        return df[["cat", "name", "short_name", "counts", "total_duration", "cat_id", "name_id"]]


def _parsed(t) -> ParsedTrace:
    if isinstance(t, ParsedTrace):
        return t
    if isinstance(t, HtaTrace) or isinstance(getattr(t, "traceset", None), TraceSet):
        # HTA re-parses a Trace given here; the unfiltered frames come from its loaded columns
        return ParsedTrace(t.traceset)
    if isinstance(t, TraceSet):
        return ParsedTrace(t)
    raise ValueError(f"Invalid trace object {type(t).__name__} in LabeledTrace.__init__().")


TraceLike = Union[LabeledTrace, HtaTrace, ParsedTrace, TraceSet, str]


def _labeled(t: TraceLike, default_label: str) -> LabeledTrace:
    """HTA's argument adapter: a str is a trace dir, a trace object gets ``default_label``."""
    if isinstance(t, LabeledTrace):
        return t
    if isinstance(t, (str, os.PathLike)):
        return LabeledTrace(label=default_label, trace_dir=os.fspath(t))
    if isinstance(t, (HtaTrace, ParsedTrace, TraceSet)) or isinstance(getattr(t, "traceset", None), TraceSet):
        return LabeledTrace(label=default_label, t=t)
    raise ValueError(f"Invalid argument type for ({t}).")


def _labels(control: LabeledTrace, test: LabeledTrace) -> tuple[str, str]:
    if control.label != test.label:
        return control.label, test.label
    test_label = f"{test.label}_control_test"
    log.warning("The two traces have the same label. Using %s for the test trace's columns.", test_label)
    return control.label, test_label


def _side(lt: LabeledTrace, rank, iteration, device_type: DeviceType, col: str) -> pd.DataFrame:
    summary = lt.get_ops_summary(lt.extract_ops(rank, iteration, device_type))
    return summary.groupby(col)[["counts", "total_duration"]].sum()


def _compare(control: LabeledTrace, test: LabeledTrace, control_rank, test_rank, control_iteration,
             test_iteration, device_type: DeviceType, use_short_name: bool) -> pd.DataFrame:
    control_label, test_label = _labels(control, test)
    col = "short_name" if use_short_name else "name"
    comp = pd.concat([_side(control, control_rank, control_iteration, device_type, col),
                      _side(test, test_rank, test_iteration, device_type, col)],
                     axis=1, join="outer", keys=[control_label, test_label])
    comp = comp.fillna(0)
    comp.columns = [f"{label}_{c}" for label, c in comp.columns]
    comp.index.name = col
    comp["diff_counts"] = comp[f"{test_label}_counts"] - comp[f"{control_label}_counts"]
    comp["diff_duration"] = comp[f"{test_label}_total_duration"] - comp[f"{control_label}_total_duration"]
    diff = comp["diff_counts"].to_numpy()
    comp["counts_change_categories"] = np.where(diff > 0, "+", np.where(diff < 0, "-", "="))
    comp["counts_change_categories"] = comp["counts_change_categories"].astype(object)
    return comp


class TraceDiff:
    """Compare the operators and kernels of two traces (HTA's class methods)."""

    @classmethod
    def compare_traces(cls, control: TraceLike, test: TraceLike, control_rank: int | list[int] | None = None,
                       test_rank: int | list[int] | None = None,
                       control_iteration: int | list[int] | None = None,
                       test_iteration: int | list[int] | None = None,
                       device_type: DeviceType = DeviceType.ALL, use_short_name: bool = False) -> pd.DataFrame:
        """Counts and total durations (µs) of each op name in both traces, and their change.

        ``control``/``test`` are LabeledTraces, trace dirs (labelled "Control"/"Test") or trace
        objects. Ranks and iterations default to each trace's first. Index: ``name`` (or
        ``short_name``); columns ``<control>_counts``, ``<control>_total_duration``,
        ``<test>_counts``, ``<test>_total_duration``, ``diff_counts``, ``diff_duration``
        (test - control) and ``counts_change_categories`` ("+", "-", "="). A name missing on
        one side counts 0 there (the counts of that side then become floats, as in HTA). With
        equal labels the test columns are named ``<label>_control_test``.
        """
        return _compare(_labeled(control, "Control"), _labeled(test, "Test"), control_rank, test_rank,
                        control_iteration, test_iteration, device_type, use_short_name)

    @classmethod
    def ops_diff(cls, control: TraceLike, test: TraceLike, control_rank: int | list[int] | None = None,
                 test_rank: int | list[int] | None = None, control_iteration: int | list[int] | None = None,
                 test_iteration: int | list[int] | None = None,
                 device_type: DeviceType = DeviceType.ALL) -> dict[str, list[str]]:
        """Op names by change: ``added`` (only in test), ``deleted`` (only in control),
        ``increased`` / ``decreased`` (in control, and more / fewer in test) and ``unchanged``
        (in test with the same count)."""
        c, t = _labeled(control, "Control"), _labeled(test, "Test")
        df = _compare(c, t, control_rank, test_rank, control_iteration, test_iteration, device_type, False)
        control_counts, test_counts = df.iloc[:, 0], df.iloc[:, 2]
        diff = df["diff_counts"]
        names = df.index

        def pick(mask: pd.Series) -> list[str]:
            return [str(n) for n in names[mask.to_numpy()]]

        return {
            "added": pick(control_counts.eq(0) & test_counts.gt(0)),
            "deleted": pick(control_counts.gt(0) & test_counts.eq(0)),
            "increased": pick(control_counts.gt(0) & diff.gt(0)),
            "decreased": pick(test_counts.gt(0) & diff.lt(0)),
            "unchanged": pick(test_counts.gt(0) & diff.eq(0)),
        }

    @classmethod
    def visualize_counts_diff(cls, df: pd.DataFrame, show_image: bool = True,
                              export_image_path: str | None = None) -> None:
        """Grouped bars of the two traces' counts and their difference per op (``compare_traces``
        output). ``export_image_path`` writes the figure; the extension picks the format."""
        _bar_chart(df, "counts", "diff_counts", "Ops Count Comparison", "Counts", show_image, export_image_path)

    @classmethod
    def visualize_duration_diff(cls, df: pd.DataFrame, show_image: bool = True,
                                export_image_path: str | None = None) -> None:
        """Grouped bars of the two traces' total durations (µs) and their difference per op."""
        _bar_chart(df, "total_duration", "diff_duration", "Ops Duration Comparison", "Total Duration (us)",
                   show_image, export_image_path)


_LABEL_CHARS = 48


def _bar_chart(df: pd.DataFrame, what: str, diff_col: str, title: str, ylabel: str, show_image: bool,
               export_image_path: str | None) -> None:
    labels = [c[: -len("_total_duration")] for c in df.columns if c.endswith("_total_duration")]
    if len(labels) < 2:
        raise ValueError("expected the output of TraceDiff.compare_traces (two *_total_duration columns)")
    series = [(name, df[col].to_numpy(dtype=float)) for name, col in (
        (labels[0], f"{labels[0]}_{what}"), (labels[1], f"{labels[1]}_{what}"), ("Difference", diff_col))]
    _plots.grouped_bars([str(n) for n in df.index], series, title, ylabel, show_image, export_image_path)


def __getattr__(name: str):
    """``go`` (plotly.graph_objects), as HTA's module has it; plotly is optional here."""
    if name == "go":
        import plotly.graph_objects as go

        return go
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TraceDir = str
"""HTA's alias for a trace folder argument."""
logger = log
Trace = HtaTrace


def flatten_column_names(df: pd.DataFrame) -> None:
    """Join MultiIndex column levels with "_" in place (HTA's ``hta.utils.utils`` helper)."""
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = ["_".join(str(c) for c in col).rstrip("_") for col in df.columns]


__all__ = ["DeviceType", "LabeledTrace", "TraceDiff", "ParsedTrace", "shorten_name", "TraceDir", "Trace",
           "flatten_column_names", "logger"]
