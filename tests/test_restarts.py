"""perfreport.load.restarts: a trace whose ProfilerStep numbers start again (traces put back to
back) has its steps numbered on in time order, each repeat a step of its own, checked against
the raw events of a real trace repeated; steps recorded at once on two threads keep one number."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from perfreport.analyses.steps import profiler_steps
from perfreport.load import load
from perfreport.load.restarts import goes_down, restart_offsets

SOURCE = Path(__file__).parent / "data" / "traces" / "odd_amd_mi250_rocm62_minitoy" / \
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _source_document() -> dict:
    with gzip.open(SOURCE) as f:
        return json.loads(f.read())


def _repeated(tmp_path: Path, copies: int) -> tuple[Path, float]:
    """The source trace's events ``copies`` times back to back (each copy shifted by the trace's
    span and 1 ms, nothing else changed: ids, names and step numbers repeat), and the shift."""
    doc = _source_document()
    timed = [e for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift = end - start + 1000.0
    events = []
    for k in range(copies):
        for e in doc["traceEvents"]:
            if k and isinstance(e.get("ts"), (int, float)):
                e = {**e, "ts": e["ts"] + k * shift}
            elif k and e.get("ph") == "M":
                continue
            events.append(e)
    path = tmp_path / f"repeated{copies}.json"
    path.write_text(json.dumps({**doc, "traceEvents": events}))
    return path, shift


def test_a_trace_repeated_has_each_repeat_of_a_step_as_a_step_of_its_own(tmp_path: Path) -> None:
    """Three copies of a 2-step trace: 6 steps numbered on in time order, each copy's steps as
    long as the source's (from the raw ProfilerStep events) and with the same GPU work, and a
    note; the source itself is left as it is. Before, each number spanned all three copies."""
    copies = 3
    path, shift = _repeated(tmp_path, copies)
    source, repeated = load(str(SOURCE)), load(str(path))
    one, three = profiler_steps(source), profiler_steps(repeated)
    n = len(one)
    assert n >= 2 and len(three) == copies * n
    first = int(one["step"].iloc[0])
    assert three["step"].tolist() == list(range(first, first + copies * n))
    raw = [e for e in _source_document()["traceEvents"]
           if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    walls = sorted((float(e["ts"]), float(e["dur"])) for e in raw)
    assert np.allclose(one["wall_us"], [d for _, d in walls])
    for k in range(copies):
        part = three.iloc[k * n:(k + 1) * n]
        assert np.allclose(part["wall_us"].to_numpy(), one["wall_us"].to_numpy())
        assert np.allclose(part["start_us"].to_numpy() - k * shift, one["start_us"].to_numpy(), atol=1e-3)
        assert part["gpu_events"].tolist() == one["gpu_events"].tolist()
    note = next(iter(repeated)).meta.step_restarts
    assert note and f"start again {copies - 1:,} time(s)" in note and f"{first}–{first + copies * n - 1}" in note
    assert next(iter(source)).meta.step_restarts is None


def test_a_trace_repeated_links_each_kernel_to_the_launch_of_its_own_copy(tmp_path: Path) -> None:
    """The copies repeat their correlation ids, so an id names a launch in every copy: each GPU
    event is linked to its own copy's (the one that starts before it), as the raw events say:
    the launch the source links it to, one shift later per copy."""
    copies = 3
    path, shift = _repeated(tmp_path, copies)
    one, three = next(iter(load(str(SOURCE)))), next(iter(load(str(path))))
    gpu = np.flatnonzero(one.is_cat(("kernel", "gpu_memcpy", "gpu_memset")) & (one.linked >= 0))
    assert len(gpu) >= 16
    pairs = np.sort(np.c_[one.ts[gpu], one.ts[one.linked[gpu]]], axis=0)
    rows = np.flatnonzero(three.is_cat(("kernel", "gpu_memcpy", "gpu_memset")) & (three.linked >= 0))
    assert len(rows) == copies * len(gpu)
    copy = np.floor((three.ts[rows] - three.ts[rows].min() + 1.0) / shift).astype(int)
    for k in range(copies):  # each copy's links are the source's, shifted by k copies (µs, as float sums round)
        at = rows[copy == k]
        got = np.sort(np.c_[three.ts[at], three.ts[three.linked[at]]] - k * shift, axis=0)
        assert got.shape == pairs.shape and np.allclose(got, pairs, rtol=0, atol=0.01)


def test_steps_recorded_at_once_on_two_threads_keep_one_number() -> None:
    """Two threads recording the same steps (spans in time order, interleaved): no number goes
    down on any thread, so none is changed; one thread starting again is numbered on, and the
    other thread's repeat of the same step takes the same new number."""
    numbers = np.array([5, 5, 6, 6, 7, 7])
    threads = np.array([0, 1, 0, 1, 0, 1])
    assert not goes_down(numbers, threads)
    numbers = np.array([5, 5, 6, 6, 5, 5, 6, 6])
    threads = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    assert goes_down(numbers, threads)
    offsets, restarts = restart_offsets(numbers, threads)
    assert (numbers + offsets).tolist() == [5, 5, 6, 6, 7, 7, 8, 8] and restarts == 1
    offsets, restarts = restart_offsets(np.array([101, 102, 101, 102, 101, 102]), np.zeros(6, dtype=int))
    assert offsets.tolist() == [0, 0, 2, 2, 4, 4] and restarts == 2
