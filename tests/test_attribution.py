"""perfreport.analyses.attribution: a diff of two runs that adds up to the step-time change.

Hand-built runs give every part by hand; real traces are checked against brute force over
their raw JSON (unions of GPU intervals inside each ProfilerStep), and the regression pair must
come out as GPU idle time spent in the DataLoader.
"""

from __future__ import annotations

import json
import re
import math
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.attribution import CONTRIBUTION_COLUMNS, NO_OP, explain, step_parts
from perfreport.analyses.stake import time_at_stake
from perfreport.errors import TraceError
from perfreport.load import load
from perfreport.model import TraceSet

from .conftest import TRACES, load_cached, shared_trace
from .test_step_metrics import Trace, _intersection, _length, _raw

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def run(step_us: float, gemm_us: float, nelems: int, copy: bool, loader: tuple[float, float]) -> Trace:
    """Three steps of ``step_us``: aten::mm launches gemm at +10; an allreduce op launches the
    NCCL kernel over [+30, +60); optionally aten::to copies DtoH over [+60, +70); then the
    data loader runs over ``loader`` while the GPU waits."""
    t = Trace()
    for n in range(3):
        o = n * step_us
        t.step(n + 1, o, step_us)
        t.op("aten::mm", o, 10).launch(o + 1, 1, [("gemm", o + 10, gemm_us)])
        t.op("c10d::allreduce_", o + 10, 5).launch(o + 11, 1, [(NCCL, o + 30, 30, "kernel", 8, {
            "Collective name": "allreduce", "In msg nelems": nelems, "dtype": "Float"})])
        if copy:
            t.op("aten::to", o + 55, 3).launch(o + 56, 1, [("Memcpy DtoH (Device -> Pinned)", o + 60, 10, "gpu_memcpy")],
                                               launch="cudaMemcpyAsync")
        t.op(LOADER, o + loader[0], loader[1] - loader[0])
    return t


def pair(tmp_path: Path) -> tuple[TraceSet, TraceSet]:
    base = load(run(100, 30, 1000, False, (50, 90)).write(tmp_path / "base"))
    cand = load(run(150, 35, 2000, True, (70, 140)).write(tmp_path / "cand"))
    return base, cand


def test_parts_by_hand(tmp_path: Path) -> None:
    base, cand = pair(tmp_path)
    p = step_parts(base[0])
    assert sorted(p["step"].unique()) == [1, 2]  # the last step is not a sample
    one = {(k, key): (t, o) for k, key, t, o in p[p["step"] == 1][["kind", "key", "time_us", "overlapped_us"]].values}
    # window [0, 100): gemm [10, 40); NCCL [30, 60), exposed from 40; GPU idle [0, 10) under
    # aten::mm and [60, 100): the loader [50, 90) holds 30 of it, 10 are outside any op
    assert one == {("kernel", "gemm"): (30.0, 0.0), ("communication", NCCL): (20.0, 10.0),
                   ("idle", "aten::mm"): (10.0, 0.0), ("idle", "c10d::allreduce_"): (0.0, 0.0),
                   ("idle", LOADER): (30.0, 0.0), ("idle", NO_OP): (10.0, 0.0)}
    c = step_parts(cand[0])
    two = {(k, key): t for k, key, t in c[c["step"] == 2][["kind", "key", "time_us"]].values}
    assert two == {("kernel", "gemm"): 35.0, ("communication", NCCL): 15.0, ("memory", "Memcpy DtoH"): 10.0,
                   ("idle", "aten::mm"): 10.0, ("idle", "c10d::allreduce_"): 0.0, ("idle", "aten::to"): 0.0,
                   ("idle", LOADER): 70.0, ("idle", NO_OP): 10.0}


def test_explanation_by_hand(tmp_path: Path) -> None:
    base, cand = pair(tmp_path)
    x = explain(base, cand, top=4)
    assert (x.baseline_step_ms, x.candidate_step_ms, x.delta_ms, x.delta_pct) == (0.1, 0.15, 0.05, 50.0)
    assert (x.baseline_samples, x.candidate_samples, x.rank_pairs) == (2, 2, ((0, 0),))
    got = [(c.kind, c.key, c.change, c.baseline_us, c.candidate_us, c.delta_us, c.share_pct)
           for c in x.contributions]
    assert got == [
        ("idle", LOADER, "changed", 30.0, 70.0, 40.0, 80.0),
        ("memory", "Memcpy DtoH", "added", 0.0, 10.0, 10.0, 20.0),
        ("communication", NCCL, "changed", 20.0, 15.0, -5.0, -10.0),  # ties on |delta|: by kind
        ("kernel", "gemm", "changed", 30.0, 35.0, 5.0, 10.0),
        ("other", "other", "", 20.0, 20.0, 0.0, 0.0),  # idle under aten::mm and outside ops
    ]
    assert x.contributions[2].overlapped_delta_us == 5.0 and math.isnan(x.contributions[3].overlapped_delta_us)
    assert [(c.kind, c.delta_us) for c in x.by_kind] == [("idle", 40.0), ("memory", 10.0), ("communication", -5.0),
                                                          ("kernel", 5.0)]
    assert [(k.kind, k.key, k.count_per_step, k.dur_per_step_us) for k in x.added] == [
        ("gpu", "Memcpy DtoH (Device -> Pinned)", 1.0, 10.0), ("cpu_op", "aten::to", 1.0, 3.0)]
    assert x.removed == ()
    (coll,) = x.collectives  # 1000 then 2000 float32 elements per call, one call per step
    assert (coll.collective, coll.changes, coll.baseline_msg_bytes, coll.candidate_msg_bytes) == (
        "all_reduce", ("message size",), 4000.0, 8000.0)
    assert (coll.baseline_exposed_per_step_us, coll.candidate_exposed_per_step_us) == (20.0, 15.0)
    lines = x.lines()
    assert lines[0] == ("candidate +50 µs/step (+50.0 %): +40 µs GPU idle (host-bound) while the CPU runs "
                        f"{LOADER} (80 %), +10 µs new Memcpy DtoH (20 %), \u22125 µs {NCCL} (exposed, not overlapped) "
                        "(\u221210 %), +5 µs gemm (10 %), +0 µs other (0 %)")
    assert "collective all_reduce: bytes/call 4.0 kB → 8.0 kB; exposed \u22125 µs/step" in lines
    assert any("new in the candidate: Memcpy DtoH (Device -> Pinned) (GPU" in line for line in lines)
    frame = x.to_frame()
    assert list(frame.columns) == list(CONTRIBUTION_COLUMNS) and len(frame) == 5
    assert frame["delta_per_step_us"].sum() == pytest.approx(50.0)
    d = json.loads(json.dumps(x.to_dict(), allow_nan=False))
    assert d["contributions"][0]["label"].startswith("GPU idle") and d["contributions"][3]["overlapped_delta_us"] is None
    assert d["rank_pairs"] == [[0, 0]] and d["collectives"][0]["changes"] == ["message size"]
    assert d["collectives"][0]["baseline_algorithms"] == d["collectives"][0]["candidate_algorithms"] == ["RING_LL"]


def test_contributions_add_up_whatever_top(tmp_path: Path) -> None:
    base, cand = pair(tmp_path)
    for top in (0, 1, 3, 100):
        x = explain(base, cand, top=top)
        assert len(x.contributions) == min(top, 8) + 1  # 8 (kind, key) parts over both runs
        assert sum(c.delta_us for c in x.contributions) == pytest.approx(50.0, abs=1e-9)
        assert sum(c.share_pct for c in x.contributions) == pytest.approx(100.0)
    assert explain(base, cand, top=100).contributions[-1].delta_us == pytest.approx(0.0, abs=1e-9)
    same = explain(base, base)
    assert same.delta_ms == 0 and all(math.isnan(c.share_pct) for c in same.contributions)
    assert same.added == same.removed == same.collectives == ()


def test_collective_changes(tmp_path: Path) -> None:
    base, cand = Trace(), Trace()
    for n in range(3):
        o = n * 100
        base.step(n + 1, o, 100)
        for i in range(2):
            base.launch(o + 1 + i, 1, [(NCCL + "(ncclDevKernelArgsStorage<4096ul>)", o + 10 + 20 * i, 10, "kernel", 8,
                                        {"Collective name": "allreduce", "In msg nelems": 1000, "dtype": "Float"})])
        cand.step(n + 1, o, 100)
        cand.launch(o + 1, 1, [("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL", o + 10, 10, "kernel", 8,
                                {"Collective name": "allreduce", "In msg nelems": 4000, "dtype": "BFloat16"})])
        cand.launch(o + 2, 1, [("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", o + 30, 5, "kernel", 8)])
    x = explain(load(base.write(tmp_path / "b")), load(cand.write(tmp_path / "c")))
    got = {c.collective: c for c in x.collectives}
    assert set(got) == {"all_reduce", "broadcast"}
    a = got["all_reduce"]
    assert a.changes == ("count", "message size", "algorithm")
    assert (a.baseline_count_per_step, a.candidate_count_per_step) == (2.0, 1.0)
    assert (a.baseline_msg_bytes, a.candidate_msg_bytes) == (4000.0, 8000.0)  # float32 vs bfloat16 elements
    assert (a.baseline_algorithms, a.candidate_algorithms) == (("RING_LL",), ("TREE_LL",))
    assert (a.baseline_dur_per_step_us, a.candidate_dur_per_step_us) == (20.0, 10.0)
    b = got["broadcast"]
    assert b.changes == ("added",) and b.candidate_count_per_step == 1.0 and math.isnan(b.candidate_msg_bytes)
    assert b.candidate_algorithms == ("RING_LL",) and math.isnan(b.baseline_msg_bytes)
    lines = x.lines()
    assert "collective all_reduce: calls/step 2 → 1; bytes/call 4.0 kB → 8.0 kB; algorithm RING_LL → TREE_LL; " \
           "exposed \u221210 µs/step" in lines
    assert "collective broadcast: calls/step 0 → 1; exposed +5 µs/step" in lines


def test_cuda_graph_replays_match_eager_kernels(tmp_path: Path) -> None:
    eager, graphed = Trace(), Trace()
    for n in range(3):
        o = n * 100
        eager.step(n + 1, o, 100).launch(o + 1, 1, [("void gemm<float, 128>(float*)", o + 10, 20)])
        eager.launch(o + 2, 1, [("void relu<float>(float*)", o + 40, 5)])
        graphed.step(n + 1, o, 100).launch(o + 1, 1, [("void gemm<float, 256>(float*)", o + 10, 15),
                                                      ("void relu<float>(float*)", o + 25, 5)], launch="cudaGraphLaunch")
    x = explain(load(eager.write(tmp_path / "e")), load(graphed.write(tmp_path / "g")), top=100)
    gpu = {c.key: (c.change, c.delta_us) for c in x.contributions if c.kind == "kernel"}
    assert gpu == {"gemm<float>": ("changed", -5.0), "relu<float>": ("changed", 0.0)}
    assert x.added == x.removed == ()
    exact = explain(load(eager.write(tmp_path / "e")), load(graphed.write(tmp_path / "g")), exact_names=True, top=100)
    changes = {c.key: c.change for c in exact.contributions if c.kind == "kernel"}
    assert changes["void gemm<float, 256>(float*)"] == "added" and changes["void gemm<float, 128>(float*)"] == "removed"


def test_ranks_steps_and_no_gpu(tmp_path: Path) -> None:
    run(100, 30, 1000, False, (50, 90)).write(tmp_path / "b", rank=0, world=2)
    run(100, 30, 1000, False, (50, 90)).write(tmp_path / "b", rank=1, world=2)
    run(120, 30, 1000, False, (50, 90)).write(tmp_path / "c", rank=0, world=2)
    run(120, 30, 1000, False, (50, 90)).write(tmp_path / "c", rank=2, world=2)
    x = explain(load(tmp_path / "b"), load(tmp_path / "c"))
    assert (x.rank_pairs, x.baseline_only_ranks, x.candidate_only_ranks) == (((0, 0),), (1,), (2,))
    assert x.delta_ms == pytest.approx(0.02)
    assert x.lines()[-2:] == ["ranks only in the baseline (not compared): 1",
                              "ranks only in the candidate (not compared): 2"]
    with pytest.raises(TraceError, match="empty"):
        explain(TraceSet(ranks={}, source="nothing"), load(tmp_path / "c"))
    # no ProfilerStep: each rank's whole trace is one sample; its idle time goes to the top-level
    # ops of the launching thread
    flat_b = Trace().op("aten::mm", 0, 10).launch(1, 1, [("gemm", 10, 20)]).op("load", 30, 50)
    flat_c = Trace().op("aten::mm", 0, 10).launch(1, 1, [("gemm", 10, 20)]).op("load", 30, 90)
    x = explain(load(flat_b.write(tmp_path / "fb")), load(flat_c.write(tmp_path / "fc")))
    assert (x.baseline_samples, x.baseline_step_ms, x.candidate_step_ms) == (1, 0.08, 0.12)
    assert (x.contributions[0].kind, x.contributions[0].key, x.contributions[0].delta_us) == ("idle", "load", 40.0)
    # nothing with a duration: nothing to explain, said in one line
    meta = Trace()
    meta.events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}})
    empty = load(meta.write(tmp_path / "meta"))
    x = explain(empty, empty)
    assert x.baseline_samples == 0 and math.isnan(x.delta_ms) and x.lines() == [
        "no step-time change to explain: 0 baseline and 0 candidate (rank, step) samples with a duration"]
    json.dumps(x.to_dict(), allow_nan=False)
    # CPU only: all of the step is GPU idle: communication while gloo's all_reduce runs on the host,
    # the rest outside any op (nothing launched work)
    cpu = load_cached(str(TRACES / "odd_cpu_only_rank34of300_trimmed"))
    x = explain(cpu, cpu)
    kinds = {c.kind: c.baseline_us for c in x.by_kind}
    assert x.delta_ms == 0 and set(kinds) == {"communication", "idle"}
    assert kinds["communication"] + kinds["idle"] == pytest.approx(1000 * x.baseline_step_ms)
    gloo = next(r for r in time_at_stake(cpu).itertuples() if r.kind == "communication")
    assert kinds["communication"] == pytest.approx(gloo.us_per_step)  # one definition of communication


# --- real traces ------------------------------------------------------------------------------
def _windows(events: list[dict]) -> dict[int, tuple[float, float]]:
    spans = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#") and e["cat"] not in ("gpu_user_annotation",)}
    return {n: spans[n] for n in sorted(spans)[:-1]}  # the last step is dropped


def _gpu(events: list[dict]) -> list[dict]:
    return [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")]


def _clip(intervals, a: float, b: float) -> list[tuple[float, float]]:
    return [(max(s, a), min(e, b)) for s, e in intervals if min(e, b) > max(s, a)]


def test_partition_of_nccl_trace_matches_brute_force() -> None:
    """Per step: compute parts = compute union in the window, communication parts = comm not
    under compute, idle = window - busy; the parts sum to the step time."""
    folder = TRACES / "hta_a100_nccl_rank0of2"
    events = _raw(folder)
    gpu = _gpu(events)
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["cat"] == "kernel" and "nccl" in e["name"]]
    comp = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["cat"] == "kernel" and "nccl" not in e["name"]]
    busy = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    # collectives on the host (the nccl:* / c10d / record_param_comms ops) while the GPU idles
    host = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("dur", 0) > 0
            and e["cat"] not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync")
            and re.search(r"^(nccl|rccl|gloo):|^c10d::|^record_param_comms$", e["name"])]
    parts = step_parts(load_cached(str(folder))[0])
    for n, (a, b) in _windows(events).items():
        p = parts[parts["step"] == n].groupby("kind")["time_us"].sum()
        c_in, m_in, b_in, h_in = _clip(comp, a, b), _clip(comm, a, b), _clip(busy, a, b), _clip(host, a, b)
        idle_comm = _length(h_in) - _intersection(h_in, b_in)
        assert idle_comm > 0
        assert p["kernel"] == pytest.approx(_length(c_in), abs=1e-6)
        assert p["communication"] == pytest.approx(_length(m_in) - _intersection(m_in, c_in) + idle_comm, abs=1e-6)
        assert p["idle"] == pytest.approx((b - a) - _length(b_in) - idle_comm, abs=1e-6)
        assert p.sum() == pytest.approx(b - a, abs=1e-6)
        overlapped = parts[(parts["step"] == n) & (parts["kind"] == "communication")]["overlapped_us"].sum()
        assert overlapped == pytest.approx(_intersection(m_in, c_in), abs=1e-6) and overlapped > 0


def test_dataloader_regression_is_host_bound_idle() -> None:
    """workers=4 -> workers=0: the step grows because the GPU waits while the main process loads
    data itself (brute force: GPU idle inside the steps and inside the DataLoader ops)."""
    sides = {}
    for side in ("workers4", "workers0"):
        folder = shared_trace(f"pair_kineto_resnet50_v100_dataloader/{side}")
        events = _raw(folder)
        busy = [(e["ts"], e["ts"] + e["dur"]) for e in _gpu(events)]
        windows = _windows(events)
        step = np.mean([b - a for a, b in windows.values()])
        idle = np.mean([(b - a) - _length(_clip(busy, a, b)) for a, b in windows.values()])
        loaders = [e for e in events if e["name"].startswith("enumerate(DataLoader)")]
        loader_idle = sum(e["dur"] - _length(_clip(busy, e["ts"], e["ts"] + e["dur"])) for e in loaders
                          if any(a <= e["ts"] < b for a, b in windows.values())) / len(windows)
        sides[side] = (load_cached(str(folder)), step, idle, loader_idle)
    (base, b_step, b_idle, b_loader), (cand, c_step, c_idle, c_loader) = sides["workers4"], sides["workers0"]
    x = explain(base, cand)
    assert x.baseline_step_ms == pytest.approx(b_step / 1000) and x.candidate_step_ms == pytest.approx(c_step / 1000)
    assert x.delta_pct > 20
    idle = {c.kind: c for c in x.by_kind}["idle"]
    assert idle.delta_us == pytest.approx(c_idle - b_idle, abs=1e-6)
    assert x.by_kind[0].kind == "idle" and idle.share_pct > 80  # mostly GPU idle
    top = x.contributions[0]
    assert (top.kind, top.key, top.change) == ("idle", LOADER, "added")
    assert top.candidate_us == pytest.approx(c_loader, abs=1e-6) and top.delta_us > 0.9 * x.delta_ms * 1000
    gone = explain(base, cand, top=1000).to_frame().set_index("key")
    assert gone.loc["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "baseline_per_step_us"] == \
        pytest.approx(b_loader, abs=1e-6)
    assert gone["delta_per_step_us"].sum() == pytest.approx(x.delta_ms * 1000)
    assert abs(gone.loc["other", "delta_per_step_us"]) < 1e-6
    assert "GPU idle (host-bound) while the CPU runs enumerate(DataLoader)" in x.lines()[0]
    assert LOADER in [k.key for k in x.added]


def test_runs_on_two_jobs_with_different_gpus() -> None:
    c = load_cached(str(shared_trace("pair_hta_trace_diff/control")))
    t = load_cached(str(shared_trace("pair_hta_trace_diff/test")))
    x = explain(c, t, top=1000)
    assert x.rank_pairs == ((3, 1),) and x.baseline_only_ranks == x.candidate_only_ranks == ()
    assert x.baseline_samples == x.candidate_samples == 5
    assert sum(k.delta_us for k in x.contributions) == pytest.approx(x.delta_ms * 1000)
    assert abs(x.contributions[-1].delta_us) < 1e-6  # everything listed: nothing left over
    assert "baseline rank 3 with candidate rank 1" in x.lines()[1]
    json.dumps(x.to_dict(), allow_nan=False)
    kinds = {c.kind for c in x.contributions}
    assert {"kernel", "communication", "memory", "idle"} <= kinds
    assert x.collectives and all(c.changes for c in x.collectives)
    assert any(line.startswith("collective ") for line in x.lines())


@pytest.mark.parametrize("exact", [False, True])
def test_the_one_sided_sums_are_op_steps_grouped_by_text(exact: bool):
    """The ops and kernels of one run only are summed per (kind, key) over the samples from
    op_steps' integer codes; they must be op_steps' rows of the samples grouped by the text, as
    pandas sums them (to the last bit), on a real pair with several ranks and on the samples of
    some ranks and steps only (the gate's choice after warm-up)."""
    import pandas as pd

    from perfreport.analyses.attribution import _per_sample, _side
    from perfreport.analyses.diff import op_steps

    traces = load_cached(str(Path(TRACES).parent / "recorded" / "short_multirank" / "ddp_w2_gloo_1step_run1"))
    for ranks, steps in ((traces.rank_ids, None), (traces.rank_ids[:1], None)):
        side = _side(traces, ranks, exact, steps)
        sub = TraceSet(ranks={r: traces[r] for r in ranks}, source=traces.source)
        rows = op_steps(sub, exact).merge(side.samples[["rank", "step"]], on=["rank", "step"])
        want = rows.groupby(["kind", "key"])[["count", "dur_us"]].sum() / len(side.samples)
        got = _per_sample(traces, ranks, side, exact)
        assert len(got) == len(want) > 10
        assert got.index.tolist() == want.index.tolist()
        assert np.array_equal(got["count"].to_numpy(), want["count"].to_numpy())
        assert np.array_equal(got["dur_us"].to_numpy().view(np.int64), want["dur_us"].to_numpy().view(np.int64))
    repeat = load_cached(str(Path(TRACES).parent / "recorded" / "repeat_base" / "run1"))
    steps = sorted(repeat[repeat.rank_ids[0]].step_numbers().tolist())[2:-2]  # some steps only
    side = _side(repeat, repeat.rank_ids, exact, steps)
    rows = op_steps(repeat, exact).merge(side.samples[["rank", "step"]], on=["rank", "step"])
    want = rows.groupby(["kind", "key"])[["count", "dur_us"]].sum() / len(side.samples)
    got = _per_sample(repeat, repeat.rank_ids, side, exact)
    assert len(side.samples) == len(steps) and got.index.tolist() == want.index.tolist()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize("run", ["recorded/short_multirank/ddp_w2_gloo_1step_run1", "traces/hta_a100_nccl_rank0of2",
                                 "traces/hta_a100_rank0of16_cudagraph_triton"])
def test_c_class_claims_equal_the_numpy_path(monkeypatch, run: str) -> None:
    """The GPU parts' segment pass in C (_nest.class_claim) and in numpy: the same first class
    per segment, rates, computation mask and per-class integrals, float for float, and so the
    same step parts, on traces with communication under computation and fractional µs."""
    import pandas as pd

    from perfreport.analyses import step_parts as parts
    from perfreport.analyses.intervals import sorted_edges

    if not hasattr(parts._nest, "class_claim"):
        pytest.skip("the C extension was not built")
    traces = load_cached(str(Path(TRACES).parent / run))
    for trace in traces:
        rows = trace.gpu_work_rows()
        rows = rows[trace.dur[rows] > 0]
        s, e = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
        cls = parts._PRIORITY_OF_CLASS[trace.gpu_class()[rows]]
        bounds, (si, ei) = sorted_edges(s, e)
        n_cls = len(parts.PRIORITY)
        in_c = parts._class_claim(cls, si, ei, bounds, n_cls)
        parts_c = parts._step_parts(trace, False).frame()
        with monkeypatch.context() as m:
            m.setattr(parts, "_nest", None)
            in_numpy = parts._class_claim(cls, si, ei, bounds, n_cls)
            parts_numpy = parts._step_parts(trace, False).frame()
        for got, want in zip(in_c, in_numpy):
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.array_equal(got.view(np.int64) if got.dtype == np.float64 else got,
                                  want.view(np.int64) if want.dtype == np.float64 else want)
        pd.testing.assert_frame_equal(parts_c, parts_numpy, check_exact=True)
        top = in_c[0]
        assert len(rows) > 500 and (top >= 0).any() and (in_c[2] > 0).any()
        assert (np.unique(top[top >= 0]).size > 1) or "gloo" in run
