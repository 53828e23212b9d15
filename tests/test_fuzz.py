"""Property-based fuzzing of the loader and the analyses (hypothesis).

Two sources of traces: well-formed random ones (steps, launches, kernels, copies and NCCL
collectives on several streams) and mutations of real ones (fields deleted or replaced by any
JSON value, events duplicated, bytes flipped, the file cut). Properties:

* only perfreport's own error type (PerfreportError) ever escapes, and no warning is raised;
* for every trace that loads: every analysis runs; no table holds an infinity; every share
  (``*_pct`` of a breakdown) is within [0, 100]; idle + compute + non-compute = GPU span;
  overlap <= communication and <= compute; GPU busy (a union) <= GPU span <= trace span;
* for well-formed traces also: per-step sums <= whole-trace totals, and the trace compared
  with itself passes the gate;
* a real comparison's report.json with any value anywhere (nesting, int64/float64 edges,
  control characters), given to every github subcommand and archive add, and an archive
  index.json likewise edited, given to archive list/show: exit 0, or one line naming the file
  with exit 2 — never an internal error.

CI runs a bounded number of examples (the ``ci`` profile, well under a minute in all); for a
deeper run by hand: ``PERFREPORT_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py`` (failures are
printed unshrunk; add ``PERFREPORT_FUZZ_SHRINK=1`` to shrink them, which can take minutes).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perfreport.analyses import ANALYSES  # noqa: E402
from perfreport.config import Config  # noqa: E402
from perfreport.errors import PerfreportError  # noqa: E402
from perfreport.gate.verdict import evaluate  # noqa: E402
from perfreport.load import load  # noqa: E402
from perfreport.pipeline import gate_side  # noqa: E402

from .conftest import TRACES  # noqa: E402

EXAMPLES = int(os.environ.get("PERFREPORT_FUZZ_EXAMPLES", "0"))
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("deep", max_examples=max(EXAMPLES, 1), deadline=None, print_blob=True,
                          phases=tuple(hypothesis.Phase) if os.environ.get("PERFREPORT_FUZZ_SHRINK") else
                          (hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate),
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = "deep" if EXAMPLES else "ci"

TOL = 1e-6
NOT_SHARES = {("stragglers", "wall_excess_pct"),
              ("straggler_evidence", "wall_excess_pct")}
"""Columns named *_pct that are not shares of a whole: a signed excess over the median."""

# --- well-formed traces ----------------------------------------------------------------------------
GPU_WORK = [
    ("kernel", "volta_sgemm_128x64_nn"), ("kernel", "void at::native::elementwise_kernel<128, 2>"),
    ("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"), ("kernel", "ncclDevKernel_AllGather_RING_LL"),
    ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)"), ("gpu_memset", "Memset (Device)"),
]
us = st.integers(0, 10**9).map(lambda ns: ns / 1000)  # ns resolution, as Kineto writes


@st.composite
def well_formed(draw) -> dict:
    origin = 1.7e15 + draw(st.integers(0, 10**6))
    steps = draw(st.lists(st.tuples(st.integers(100_000, 20_000_000), st.integers(0, 100_000)), max_size=6))
    events, spans, t = [], [], origin
    for i, (dur_ns, gap_ns) in enumerate(steps):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 10}", "pid": 1, "tid": 1,
                       "ts": round(t, 3), "dur": dur_ns / 1000})
        spans.append((round(t, 3), round(t, 3) + dur_ns / 1000))
        t += (dur_ns + gap_ns) / 1000
    end = max(t, origin + 1000)
    work = draw(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 5_000_000), st.sampled_from([7, 8, 13]),
                                   st.sampled_from(GPU_WORK), st.floats(0, 1), st.booleans()), max_size=40))
    for corr, (where, dur_ns, stream, (cat, name), delay, launched) in enumerate(work, start=1):
        dur = dur_ns / 1000
        if launched and spans:  # launched in a step and run inside it, as a synchronous training step does
            start, stop = spans[min(int(where * len(spans)), len(spans) - 1)]
            launch_ts = round(start + 1 + delay * (stop - start - 2) / 2, 3)
            ts = round(launch_ts + 5 + delay * (stop - launch_ts - 5) / 2, 3)
            dur = max(0.0, min(dur, round(stop - ts - 0.001, 3)))
        else:  # anywhere, launched or not
            ts = round(origin + where * (end - origin), 3)
            launch_ts = round(ts - delay * 200 - 5, 3)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"stream": stream, "device": 0, "correlation": corr, "External id": corr}})
        if launched:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": launch_ts, "dur": 0.5, "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                           "ts": round(launch_ts - 0.5, 3), "dur": 1.5, "args": {"External id": corr}})
    draw(st.randoms()).shuffle(events)  # file order is not time order
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], "traceEvents": events}


# --- mutations of real traces ----------------------------------------------------------------------
REAL = sorted(p for p in TRACES.rglob("*.json*") if p.stat().st_size < 60_000)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp"]
ARGS = ["correlation", "stream", "device", "External id", "bytes", "Collective name", "In msg nelems", "Group size"]


@st.composite
def mutated(draw) -> bytes:
    path = draw(st.sampled_from(REAL))
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"]
    rng = draw(st.randoms())
    for _ in range(draw(st.integers(1, 8))):
        if not events:
            break
        i = rng.randrange(len(events))
        kind = draw(st.sampled_from(["set", "delete", "arg", "duplicate", "drop", "replace"]))
        ev = events[i]
        if kind == "replace" or not isinstance(ev, dict):
            events[i] = draw(json_values)
        elif kind == "set":
            ev[draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif kind == "delete":
            ev.pop(draw(st.sampled_from(FIELDS)), None)
        elif kind == "arg":
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            ev["args"][draw(st.sampled_from(ARGS))] = draw(json_values)
        elif kind == "duplicate":
            events.insert(rng.randrange(len(events) + 1), json.loads(json.dumps(ev)))
        else:
            events.pop(i)
    text = json.dumps(doc).encode()
    if draw(st.booleans()):  # byte-level damage: flip, cut or splice
        at = rng.randrange(len(text))
        damage = draw(st.sampled_from(["flip", "cut", "splice"]))
        if damage == "flip":
            text = text[:at] + bytes([text[at] ^ (1 << rng.randrange(8))]) + text[at + 1:]
        elif damage == "cut":
            text = text[:at]
        else:
            text = text[:at] + draw(st.binary(max_size=8)) + text[at:]
    return gzip.compress(text, compresslevel=1) if draw(st.booleans()) else text


# --- the properties --------------------------------------------------------------------------------
def load_bytes(data: bytes):
    """Load ``data`` as a rank file with every warning an error. Returns the TraceSet, or None
    when perfreport refused it with its own error (the only exception allowed to escape)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("rank0.json.gz" if data[:2] == b"\x1f\x8b" else "rank0.json")
        path.write_bytes(data)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                return load(path, workers=1)
            except PerfreportError:
                return None


def analyse(traces) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return {name: fn(traces) for name, fn in ANALYSES}


def close_le(a: float, b: float) -> bool:
    return a <= b + TOL * max(1.0, abs(b))


def check_invariants(tables: dict) -> None:
    for name, df in tables.items():
        numbers = df.select_dtypes("number")
        if len(numbers):
            assert not np.isinf(numbers.to_numpy(dtype=float)).any(), f"{name}: infinity"
        for col in df.columns:
            if col.endswith("_pct") and (name, col) not in NOT_SHARES and len(df):
                v = df[col].to_numpy(dtype=float)
                v = v[np.isfinite(v)]
                assert ((v >= -TOL) & (v <= 100 + TOL)).all(), f"{name}.{col}: {v}"
    for table in ("temporal_breakdown", "temporal_breakdown_per_step"):
        for r in tables[table].to_dict(orient="records"):
            if math.isfinite(r["gpu_span_us"]):
                total = r["idle_us"] + r["compute_us"] + r["non_compute_us"]
                assert math.isclose(total, r["gpu_span_us"], rel_tol=1e-9, abs_tol=1e-3), r
                assert close_le(r["busy_us"], r["gpu_span_us"]), r
    for table in ("comm_comp_overlap", "comm_comp_overlap_per_step"):
        for r in tables[table].to_dict(orient="records"):
            assert close_le(r["overlap_us"], r["comm_us"]) and close_le(r["overlap_us"], r["compute_us"]), r
    for r in tables["summary"].to_dict(orient="records"):
        if r["gpu_busy_us"] is not None and math.isfinite(r["gpu_busy_us"]):
            assert close_le(r["gpu_busy_us"], r["gpu_span_us"]) and close_le(r["gpu_span_us"], r["span_us"]), r


def check_per_step_sums(tables: dict) -> None:
    """Steps do not overlap, and the generator runs a step's GPU work inside it: what each step
    holds adds up to at most the whole trace's total. (Where GPU work of one step overlaps the
    next step's, as it may in an asynchronous loop, the per-step unions can add up to more.)"""
    for table, whole, columns in (("temporal_breakdown_per_step", "temporal_breakdown", ("busy_us", "compute_us")),
                                  ("comm_comp_overlap_per_step", "comm_comp_overlap", ("comm_us", "overlap_us"))):
        per_step, total = tables[table], tables[whole]
        per_step = per_step[per_step["step"] >= 0]  # (work outside any step has a row of its own)
        for col in columns:
            if len(per_step) and len(total):
                assert close_le(float(per_step[col].sum()), float(total[col].sum())), (table, col)


@settings(settings.get_profile(PROFILE))
@given(well_formed())
def test_well_formed_traces_keep_every_invariant(doc):
    traces = load_bytes(json.dumps(doc).encode())
    assert traces is not None  # a well-formed trace always loads
    tables = analyse(traces)
    check_invariants(tables)
    check_per_step_sums(tables)
    n_events = len(doc["traceEvents"])
    assert tables["summary"]["events"].iloc[0] == n_events  # nothing dropped from a well-formed trace


@settings(settings.get_profile(PROFILE), max_examples=max(EXAMPLES // 5, 8))
@given(well_formed())
def test_a_trace_compared_with_itself_passes(doc):
    traces = load_bytes(json.dumps(doc).encode())
    config = Config()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verdict = evaluate(gate_side("baseline", traces, config), gate_side("candidate", traces, config), config)
    assert verdict.status == "pass", [(c.title, c.status) for c in verdict.checks if c.status != "pass"]


@pytest.mark.skipif(not REAL, reason="no small real traces in tests/data/traces")
@settings(settings.get_profile(PROFILE))
@given(mutated())
def test_mutated_real_traces_load_or_fail_cleanly(data):
    traces = load_bytes(data)
    if traces is not None:
        check_invariants(analyse(traces))


def test_profile_is_bounded_in_ci():
    if not EXAMPLES:
        assert settings.get_profile("ci").max_examples <= 25


def test_random_bytes_never_escape():
    rng = random.Random(13)
    for _ in range(30):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        load_bytes(data)
        load_bytes(b'{"traceEvents": [' + data)
        load_bytes(b"[" + data)


# --- report.json from an untrusted run: any value anywhere, through every reader ------------------
EDGE_VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12),
    st.sampled_from(["\n::error::forged", "\x1b[31m", "\u202e", "pass", "fail", "perfreport.compare", ""]),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30]),
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 1e-300, 0.1]),
    st.recursive(st.integers(-3, 3), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["rank", "status", "name", "lines", "x"]), inner, max_size=3), max_leaves=6),
    st.integers(1, 300).map(lambda n: {"deep": json.loads("[" * n + "]" * n)}),
)


def _nodes(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):  # the first rows of a table stand for the rest
            yield from _nodes(v, (*path, i))


@st.composite
def mutated_document(draw) -> str:
    from .conftest import small_comparison_json

    doc = json.loads(small_comparison_json())
    paths = [p for p in _nodes(doc) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = draw(EDGE_VALUES)
        except (KeyError, IndexError, TypeError):  # an earlier mutation replaced the way there
            continue
    return json.dumps(doc)


@settings(settings.get_profile(PROFILE), max_examples=EXAMPLES or 12)
@given(mutated_document())
def test_mutated_report_json_through_github_and_archive_readers(text):
    """Whatever a fork's run puts in report.json: every github subcommand and archive add end in
    exit 0 or one line naming the file with exit 2; never a traceback or an internal error."""
    import contextlib
    import io

    from perfreport.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        report.mkdir()
        (report / "report.json").write_text(text)
        env = {"GITHUB_STEP_SUMMARY": f"{tmp}/summary.md", "GITHUB_OUTPUT": f"{tmp}/output"}
        commands = [["github", c, "--report", str(report)] for c in ("comment", "summary", "annotate", "outputs")]
        commands.append(["archive", "add", "--release", "v1", "--report", str(report), "--store", f"{tmp}/site"])
        saved = {k: os.environ.get(k) for k in (*env, "GITHUB_EVENT_PATH")}
        os.environ.update(env)
        os.environ.pop("GITHUB_EVENT_PATH", None)
        try:
            for args in commands:
                out, err = io.StringIO(), io.StringIO()
                with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    warnings.simplefilter("error")
                    code = main(args)
                assert "internal error" not in err.getvalue() and "Traceback" not in err.getvalue(), (args, err.getvalue())
                if code != 0:
                    assert code == 2 and err.getvalue().count("\n") == 1, (args, err.getvalue())
                    assert str(report / "report.json") in err.getvalue(), (args, err.getvalue())
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@st.composite
def mutated_index(draw) -> dict:
    """An archive index.json of three releases with up to three fields replaced by any value."""
    metrics = {"step_time_us": 100_000.0, "gpu_busy_us": 80_000.0, "idle_pct": 12.5, "overlap_pct": None,
               "exposed_comm_us": 0.0}
    releases = [{"tag": f"v{i}", "id": f"{i:032x}", "date": f"2026-0{i}-01T00:00:00+00:00", "commit": "a" * 40,
                 "status": "pass", "headline": "h", "baseline": "b", "report_created_utc": "",
                 "metrics": dict(metrics), "kernels": {"gemm": 10.0 * i, "nccl": 5.0},
                 "files": [f"releases/v{i}/report.html"]} for i in range(1, 4)]
    index = {"schema_version": 1, "generator": "perfreport", "releases": releases}
    paths = [p for p in _nodes(index) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        node = index
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = draw(EDGE_VALUES)
        except (KeyError, IndexError, TypeError):
            continue
    return index


@settings(settings.get_profile(PROFILE), max_examples=EXAMPLES or 25)
@given(mutated_index())
def test_mutated_archive_index_is_refused_or_drawn(index):
    """An index.json someone edited: refused with a reason (one line, by every command), or
    drawn and listed without an error; never a TypeError halfway through an update."""
    import contextlib
    import io

    from perfreport.archive.entries import check_index
    from perfreport.archive.site import render_index
    from perfreport.cli import main

    problem = check_index(index)
    if problem is None:
        render_index(index)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "index.json").write_text(json.dumps(index))
        for args in (["list"], ["show", "v2"]):
            err = io.StringIO()
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(err):
                warnings.simplefilter("error")
                code = main(["archive", *args, "--store", tmp])
            assert "internal error" not in err.getvalue(), err.getvalue()
            if problem is not None:
                assert code == 2 and err.getvalue().count("\n") == 1 and "index.json" in err.getvalue()
