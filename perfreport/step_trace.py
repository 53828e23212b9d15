"""A look at the trace: one judged profiler step per side, cut out as a small Kineto JSON.

A reviewer who reads "step time +39 %" wants to see the step. The full traces are GBs and stay
on the runner; ``perfreport step-trace --report DIR`` writes, next to the report, one step of
each side as its own trace file that Perfetto (https://ui.perfetto.dev, "Open trace file"),
``chrome://tracing`` ("Load") and perfreport itself open:

* **candidate**: of the steps the gate judged, the one furthest from the baseline's median
  step time in the direction of the change (the slowest step of a regression, the fastest of an
  improvement), on the rank where it is furthest;
* **baseline**: its judged step closest to its own median, on the same rank where it has one —
  the typical step to hold the candidate's against.

The step is every event the loader assigns to it (CPU events that start inside the
``ProfilerStep#N`` span; GPU work launched from it, however late it runs), the GPU work of the
steps before and after that overlaps it (so its GPU timeline is what it was), the flow arrows
between them and the trace's metadata events, with the file's top-level keys (devices, ranks)
and ``ts`` written exactly as read (ns precision). A file stays at most ``max_bytes``
(20 MB by default): a step with more events keeps the first ones in time order and says where
it was cut (``perfreport_step_trace.cut_after_us``).

The choice is made from ``report.json`` alone (:func:`pick_steps`, also used by the HTML
report and the PR comment to name the files), then only the chosen rank file of each side is
read again (its SHA-256 checked against the report's); nothing else is analysed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .load.checksums import algorithm_of, file_checksum
from .storing.atomic import atomic_write_text
from .documents.cells import table_columns
from .errors import PerfreportError
from .load.fields import ARG_FIELDS, INT_MISSING
from .model import DENSE_ARGS, TEXT_ID_BASE, RankTrace, sorted_unique

FOLDER = "step-traces"
INDEX = "index.json"
MAX_BYTES = 20_000_000
"""20 MB: Perfetto and chrome://tracing open it in a second or two, and two of them keep a
report artifact small. A typical training step is a few thousand to a few hundred thousand
events (~250 bytes each), so most steps fit whole."""
OPEN_HINT = ("open it at https://ui.perfetto.dev (Open trace file) or in Chrome at chrome://tracing (Load); "
             "perfreport analyze FILE reads it too")
SIDES = ("baseline", "candidate")


@dataclass(frozen=True)
class Pick:
    side: str
    rank: int
    step: int
    wall_us: float
    file: str
    checksum: str  # ALGORITHM:HEX (a bare hex digest: SHA-256, as older reports wrote it); "" if none
    why: str

    @property
    def filename(self) -> str:
        return f"{self.side}-rank{self.rank}-step{self.step}.pt.trace.json"


def pick_steps(document: Mapping) -> dict[str, Pick]:
    """The step of each side to show (see the module docstring); {} when the document has no
    judged steps to choose from (an analysis, a multi-setup report, a trace without steps).

    Over the judged steps as arrays: a many-step compare has 37,000-173,000 of them a side, which
    a row dict each and a Python ``max`` took 0.17-0.8 s of the report's build to choose from."""
    if document.get("kind") != "perfreport.compare":
        return {}
    x = document.get("explanation") if isinstance(document.get("explanation"), Mapping) else {}
    base, cand = (_judged_rows(document, side, x.get(f"{side}_steps")) for side in SIDES)
    if not len(base.wall) or not len(cand.wall):
        return {}
    base_median = float(np.median(base.wall))
    sign = 1.0 if float(x.get("delta_ms") or 0.0) >= 0 else -1.0
    # the candidate's step furthest from the median in the change's direction (then the lowest
    # rank, then the lowest step; of equal ones the first)
    c = _first_best(sign * (cand.wall - base_median), -cand.rank, -cand.step)
    same_rank = base.rank == cand.rank[c]
    pool = np.flatnonzero(same_rank) if same_rank.any() else np.arange(len(base.wall))
    b = pool[_first_best(-np.abs(base.wall[pool] - base_median), -base.step[pool])]
    direction = "above" if sign > 0 else "below"
    return {
        "baseline": _pick(document, "baseline", base.row(b), f"the baseline's judged step closest to its median "
                                                             f"step time ({base_median / 1000:.2f} ms)"),
        "candidate": _pick(document, "candidate", cand.row(c), f"the candidate's judged step furthest {direction} "
                                                               f"the baseline's median step time "
                                                               f"({base_median / 1000:.2f} ms)"),
    }


@dataclass(frozen=True)
class _Judged:
    """A side's judged steps: wall time (µs), rank and step number, in the table's order."""

    wall: np.ndarray
    rank: np.ndarray
    step: np.ndarray

    def row(self, i: int) -> dict:
        return {"rank": int(self.rank[i]), "step": int(self.step[i]), "wall_us": float(self.wall[i])}


def _first_best(*keys: np.ndarray) -> int:
    """The first position holding the largest ``keys`` (compared in turn), as Python's ``max``
    over tuples of them gives."""
    best = np.arange(len(keys[0]))
    for key in keys:
        values = key[best]
        best = best[values == values.max()]
    return int(best[0])


def _judged_rows(document: Mapping, side: str, judged) -> _Judged:
    """The side's profiler steps with a finite wall time and integer rank and step, those in
    ``judged`` only when it lists any."""
    analyses = (document.get(side) or {}).get("analyses") or {}
    steps = analyses.get("profiler_steps") if isinstance(analyses, Mapping) else None
    wanted = _wanted_steps(judged or [])
    walls, ranks, numbers = table_columns(steps, ("wall_us", "rank", "step"))  # no dict per step
    ok = np.array([isinstance(w, (int, float)) for w in walls], dtype=bool) if set(map(type, walls)) - {float, int} \
        else np.ones(len(walls), dtype=bool)  # (None, text: what the table may hold besides numbers)
    for column in (ranks, numbers):
        if set(map(type, column)) - {int, bool}:
            ok &= np.array([isinstance(v, int) for v in column], dtype=bool)
    wall = np.array([w if good else math.nan for w, good in zip(walls, ok)] if not ok.all() else walls,
                    dtype=np.float64)
    ok &= np.isfinite(wall)
    rank, step = (_int64(column, ok) for column in (ranks, numbers))
    if len(wanted):
        ok &= np.isin(step, wanted)
    return _Judged(wall[ok], rank[ok], step[ok])


def _wanted_steps(judged) -> np.ndarray | list[int]:
    """The judged steps (numbers, as ints), sorted and distinct: in numpy when they are all ints
    (173,000 a side on a many-step job)."""
    if judged and not set(map(type, judged)) - {int}:
        try:
            return sorted_unique(np.array(judged, dtype=np.int64))
        except OverflowError:
            pass
    return sorted({int(s) for s in judged if isinstance(s, (int, float))})


def _int64(column: list, ok: np.ndarray) -> np.ndarray:
    """The column's integers where ``ok`` (0 elsewhere); one beyond int64 (no step or rank is)
    is taken out of ``ok``."""
    try:
        return np.array(column if ok.all() else [v if good else 0 for v, good in zip(column, ok)], dtype=np.int64)
    except OverflowError:
        ok &= np.array([-2**63 <= v < 2**63 if good else False for v, good in zip(column, ok)], dtype=bool)
        return np.array([v if good else 0 for v, good in zip(column, ok)], dtype=np.int64)


def _pick(document: Mapping, side: str, row: dict, why: str) -> Pick:
    files = ((document.get(side) or {}).get("analyses") or {}).get("files") or []
    entry = next((f for f in files if isinstance(f, Mapping) and f.get("rank") == row["rank"]), {})
    return Pick(side, row["rank"], row["step"], row["wall_us"], str(entry.get("file") or ""),
                str(entry.get("checksum") or entry.get("sha256") or ""), why)


# --- writing ---------------------------------------------------------------------------------
def write_step_traces(report_dir: str | Path, *, out: str | Path | None = None,
                      max_bytes: int = MAX_BYTES) -> list[dict]:
    """Write both sides' step traces and ``index.json`` into ``out`` (default
    ``REPORT_DIR/step-traces``); returns the index entries."""
    from .github.comment import read_document

    document = read_document(report_dir)
    picks = pick_steps(document)
    if not picks:
        raise PerfreportError(f"{report_dir}: no judged profiler steps in report.json to cut a step trace from "
                              "(a comparison of traces with ProfilerStep#N spans has them)")
    folder = Path(out) if out is not None else Path(report_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for side in SIDES:
        pick = picks[side]
        trace = _load_rank(pick)
        entries.append(write_step(trace, pick, folder / pick.filename, max_bytes=max_bytes))
    atomic_write_text(folder / INDEX, json.dumps({"max_bytes": max_bytes, "open": OPEN_HINT, "steps": entries},
                                             indent=2) + "\n")
    return entries


def _load_rank(pick: Pick) -> RankTrace:
    from .load import load

    path = Path(pick.file)
    if not pick.file or not path.is_file():
        raise PerfreportError(f"{pick.file or '(no file)'}: the {pick.side}'s rank {pick.rank} trace named in "
                              "report.json is not here (run step-trace where compare ran)")
    if pick.checksum:
        algorithm = algorithm_of(pick.checksum)
        try:
            actual = file_checksum(path, algorithm)
        except ValueError:
            raise PerfreportError(f"{path}: report.json gives its checksum in an unknown algorithm "
                                  f"({algorithm[:40]!r})") from None
        if actual.split(":", 1)[1] != pick.checksum.rsplit(":", 1)[-1]:
            raise PerfreportError(f"{path}: changed since the report was made (its {algorithm} checksum differs "
                                  "from report.json)")
    traces = load(str(path), workers=1)
    return next(iter(traces))


def step_rows(trace: RankTrace, step: int) -> np.ndarray:
    """Rows of the step, ascending by time: its events (GPU work it launched, however late it
    ran, and GPU work of neighbouring steps that ran inside its span), the flow events joining
    them, and the metadata events (process and thread names) first."""
    in_step = trace.iteration == step
    span = trace.steps() & in_step & ~trace.gpu_side()
    if span.any():  # GPU work of other steps running inside this one: it is what the step's timeline shows
        start, end = float(np.min(trace.ts[span])), float(np.max(trace.ts[span] + trace.dur[span]))
        gpu = trace.gpu_side() & in_step
        end = max(end, float(np.nanmax(trace.ts[gpu] + trace.dur[gpu]))) if gpu.any() else end
        in_step = in_step | (trace.gpu_side() & (trace.ts < end) & (trace.ts + trace.dur > start))
    flows = np.isin(trace.ph, trace.codes(("s", "f", "t")))
    ids = sorted_unique(trace.flow_id[in_step & flows & (trace.flow_id >= 0)])
    rows = np.flatnonzero(in_step | (flows & np.isin(trace.flow_id, ids) & (trace.flow_id >= 0)))
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    meta = np.flatnonzero(trace.ph == trace.code("M"))
    return np.concatenate([meta, rows[~np.isin(rows, meta)]])


def write_step(trace: RankTrace, pick: Pick, path: Path, *, max_bytes: int = MAX_BYTES) -> dict:
    """Write ``pick``'s step of ``trace`` to ``path`` (at most ``max_bytes``); its index entry."""

    rows = step_rows(trace, pick.step)
    if not np.any(trace.iteration[rows] == pick.step):
        raise PerfreportError(f"{pick.file}: no events in profiler step {pick.step} of rank {trace.rank}")
    row_args = _row_args(trace, rows, dict(ARG_FIELDS))
    ns = np.round(trace.ts[rows] * 1000.0)
    top = _top_level(trace, pick)
    budget = max_bytes - len(json.dumps(top)) - 1_000  # room for the counts written below
    lines: list[str] = []
    used = 0
    for i, row in enumerate(rows):  # in time order, until the budget is spent
        line = _event_json(trace, int(row), ns[i], row_args[i])
        used += len(line.encode()) + 2
        if used > budget:
            break
        lines.append(line)
    keep = len(lines)
    n_meta = int(np.sum(trace.ph[rows] == trace.code("M")))
    start = float(np.nanmin(trace.ts[rows][trace.iteration[rows] == pick.step]))
    cut_after = round(float(trace.ts[rows[keep]]) - start, 3) if keep < len(rows) else None
    top["perfreport_step_trace"].update(events=keep - n_meta, events_in_step=len(rows) - n_meta,
                                        cut_after_us=cut_after)
    text = "{" + json.dumps(top)[1:-1] + ', "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n"
    atomic_write_text(path, text)
    size = path.stat().st_size
    return {"side": pick.side, "rank": pick.rank, "step": pick.step, "step_time_ms": round(pick.wall_us / 1000, 3),
            "why": pick.why, "file": path.name, "bytes": size, "events": keep - n_meta,
            "events_in_step": len(rows) - n_meta, "cut_after_us": cut_after, "source": pick.file}


def _row_args(trace: RankTrace, rows: np.ndarray, kinds: Mapping[str, str]) -> list[dict]:
    """The args of each row, built from the sparse columns (only the values present are touched)
    and from the columns the loader made of args keys (:data:`~perfreport.model.DENSE_ARGS`)."""
    out: list[dict] = [{} for _ in range(len(rows))]
    spellings: dict[str, list[str]] = {}
    for key, column in DENSE_ARGS.items():
        spellings.setdefault(column, []).append(key)
    for column, keys in spellings.items():
        if any(k in trace.args for k in keys):  # a trace loaded before these keys became columns
            continue
        key = keys[0]  # the modern spelling
        values = getattr(trace, column)[rows]
        for i in np.flatnonzero(values != -1).tolist():
            out[i][key] = int(values[i])
    for key, col in trace.args.items():
        if not len(col.rows):
            continue
        pos = np.minimum(np.searchsorted(col.rows, rows), len(col.rows) - 1)
        hit = np.flatnonzero(col.rows[pos] == rows)
        kind = kinds.get(key, "f")
        values = col.values[pos[hit]]
        if kind == "s":  # each distinct string once
            codes, inverse = np.unique(values, return_inverse=True)
            table = [_arg_value(trace, kind, c) for c in codes.tolist()]
            converted = [table[j] for j in inverse.ravel().tolist()]
        else:
            converted = [_arg_value(trace, kind, v) for v in values.tolist()]
        for i, value in zip(hit.tolist(), converted):
            if value is not None:
                out[i][key] = value
    return out


def _arg_value(trace: RankTrace, kind: str, value):
    if kind == "s":
        if value < 0:
            return None
        text = str(trace.strings[int(value)])
        if text[:1] in "[{" or text in ("true", "false", "null"):
            try:
                return json.loads(text)  # non-string values were interned as their JSON text
            except ValueError:
                return text
        return text
    if kind == "i":
        return None if value == INT_MISSING else int(value)
    return None if not math.isfinite(value) else (int(value) if float(value).is_integer() else float(value))


def _id(trace: RankTrace, value: int):
    if value <= TEXT_ID_BASE:
        return str(trace.strings[TEXT_ID_BASE - int(value)])
    return None if value == -1 else int(value)


def _event_json(trace: RankTrace, row: int, ns: float, args: dict) -> str:
    event = {"ph": str(trace.strings[trace.ph[row]]) if trace.ph[row] >= 0 else "X"}
    for key, column in (("cat", trace.cat), ("name", trace.name)):
        if column[row] >= 0:
            event[key] = str(trace.strings[column[row]])
    for key, column in (("pid", trace.pid), ("tid", trace.tid)):
        value = _id(trace, int(column[row]))
        if value is not None:
            event[key] = value
    parts = [json.dumps(event, ensure_ascii=False)[:-1]]
    if math.isfinite(ns):
        total = trace.meta.ts_origin_us * 1000 + int(ns)  # exact ns, written as µs with 3 decimals
        sign, total = ("-", -total) if total < 0 else ("", total)
        parts.append(f', "ts": {sign}{total // 1000}.{total % 1000:03d}')
    dur = float(trace.dur[row])
    if math.isfinite(dur):
        parts.append(f', "dur": {int(dur) if dur.is_integer() else round(dur, 3)}')
    if trace.flow_id[row] >= 0:
        parts.append(f', "id": {int(trace.flow_id[row])}')
    if event["ph"] in ("f", "t"):
        parts.append(', "bp": "e"')
    if args:
        parts.append(', "args": ' + json.dumps(args, ensure_ascii=False))
    return "".join(parts) + "}"


def _top_level(trace: RankTrace, pick: Pick) -> dict:
    m = trace.meta
    top = {"schemaVersion": m.schema_version, "deviceProperties": m.device_properties,
           "distributedInfo": m.distributed_info, "displayTimeUnit": m.display_time_unit or "ms",
           "baseTimeNanoseconds": m.base_time_ns, "traceName": m.trace_name}
    top = {k: v for k, v in top.items() if v not in (None, {}, [])}
    top["perfreport_step_trace"] = {"side": pick.side, "rank": pick.rank, "step": pick.step,
                                    "step_time_ms": round(pick.wall_us / 1000, 3), "why": pick.why,
                                    "source": pick.file}
    return top
