"""perfreport.analyses.collectives and .matching: name parsing, a hand-computed two-rank job, straggler
verdicts on built jobs, and real NCCL traces checked against plain-Python walks over the raw
JSON (kernel → launch by correlation → enclosing collective ops by time on the thread)."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.collectives import (
    CALL_COLUMNS,
    CODED,
    STEP_COLUMNS,
    SUMMARY_COLUMNS,
    busbw_factor,
    collective_kind,
    collective_summary,
    collectives,
    collectives_per_step,
    dtype_bytes,
    kernel_algorithm,
    tensor_bytes,
)
from perfreport.analyses.collectives import _concat_calls
from perfreport.analyses.matching import (
    EVIDENCE_COLUMNS,
    SKEW_COLUMNS,
    _matched_calls,
    collective_skew,
    straggler_evidence,
    straggler_report,
)
from perfreport.load import load

from .conftest import TRACES, load_cached, shared_trace
from .test_steps import cpu, kernel, launch, write_trace

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV_OLD = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV_NEW = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
BASE_US = 1_700_000_000_000_000  # unix-epoch µs, as real traces write them


def test_names_and_factors() -> None:
    cases = {
        "allreduce": "all_reduce", "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
        "reduce_scatter_tensor_coalesced": "reduce_scatter", "nccl:_reduce_scatter_base": "reduce_scatter",
        "nccl:all_to_all": "all_to_all", "c10d::alltoall_base_": "all_to_all", "nccl:broadcast": "broadcast",
        "nccl:send": "send_recv", "nccl:recv": "send_recv", "c10d::barrier": "barrier", "nccl:reduce": "reduce",
        "gloo:all_reduce": "all_reduce", "c10d::gather_": "other", "scatter": "other",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "all_reduce",
        ALLREDUCE: "all_reduce", SENDRECV_NEW: "send_recv", SENDRECV_OLD: "send_recv",
        "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "broadcast",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL128(x)": "reduce_scatter",
    }
    assert {k: collective_kind(k) for k in cases} == cases
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert [busbw_factor(k, 4) for k in ("all_gather", "reduce_scatter", "all_to_all")] == [0.75] * 3
    assert [busbw_factor(k, 4) for k in ("broadcast", "reduce", "send_recv")] == [1.0] * 3
    assert busbw_factor("all_reduce", 1) == 0.0
    assert math.isnan(busbw_factor("barrier", 8)) and math.isnan(busbw_factor("all_reduce", float("nan")))
    assert kernel_algorithm("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == ("RING", "LL")
    assert kernel_algorithm(ALLREDUCE) == ("RING", "LL")
    assert kernel_algorithm("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL128(x)") == ("TREE", "LL128")
    assert kernel_algorithm("ncclDevKernel_AllGather_NVLS_SIMPLE") == ("NVLS", "SIMPLE")
    assert kernel_algorithm(SENDRECV_NEW) == ("", "")
    assert [dtype_bytes(d) for d in ("Float", "float", "BFloat16", "c10::BFloat16", "Half", "Double", "Long",
                                     "Int", "Byte", "unsigned char", "signed char", "bf16", "f16", "int32",
                                     "Float8_e4m3fn", "Bool")] == [4, 4, 2, 2, 2, 8, 8, 4, 1, 1, 1, 2, 2, 4, 1, 1]
    assert math.isnan(dtype_bytes("TensorList")) and math.isnan(dtype_bytes(""))
    assert tensor_bytes('[[64,4],[8,4],[]]', '["c10::BFloat16","c10::BFloat16",""]') == 512
    assert math.isnan(tensor_bytes('[[],[]]', '["TensorList","Scalar"]'))


def rank_events(shift: float, late: float) -> list[dict]:
    """One step [0, 1000] (rank-local µs, written at BASE_US + shift): a GEMM on stream 7 at
    [100, 300]; an all_reduce with full args at [200 + late, 600]; an old-style all_gather
    (sizes only in Input Dims) on an old SendRecv kernel at [700 + late, 800]; an unlinked
    SendRecv kernel at [850, 860]."""
    ev = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("aten::mm", 10, 10), launch(12, corr=1), kernel("gemm", 100, 200, corr=1, stream=7),
        cpu("c10d::allreduce_", 30, 30),
        cpu("record_param_comms", 31, 28, **{"Collective name": "allreduce", "In msg nelems": 1_000_000,
                                             "Out msg nelems": 1_000_000, "dtype": "Float", "Group size": 2,
                                             "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}),
        cpu("nccl:all_reduce", 32, 26, cat="user_annotation"), launch(33, corr=2),
        kernel(ALLREDUCE, 200 + late, 400 - late, corr=2, stream=20),
        cpu("c10d::_allgather_base_", 70, 20, **{"Input Dims": [[64, 4], [8, 4], []],
                                                  "Input type": ["c10::BFloat16", "c10::BFloat16", ""]}),
        cpu("nccl:_all_gather_base", 71, 18, cat="user_annotation",
            **{"Input Dims": [[8, 4]], "Input type": ["c10::BFloat16"]}),
        launch(72, corr=3), kernel(SENDRECV_OLD, 700 + late, 100 - late, corr=3, stream=20),
        kernel(SENDRECV_NEW, 850, 10, corr=99, stream=20),
    ]
    for e in ev:
        e["ts"] = BASE_US + shift + e["ts"]
    return ev


def two_ranks(tmp_path: Path, late: float = 30.0) -> Path:
    """Rank 1's clock starts 5 µs after rank 0's and its first two collectives start ``late`` µs
    later on its own clock."""
    root = tmp_path / "job"
    write_trace(root, rank_events(0.0, 0.0), rank=0, world=2)
    write_trace(root, rank_events(5.0, late), rank=1, world=2)
    return root


def test_two_rank_job_by_hand(tmp_path: Path) -> None:
    traces = load(two_ranks(tmp_path), workers=1)
    c = collectives(traces)
    assert list(c.columns) == list(CALL_COLUMNS)
    r0 = c[c["rank"] == 0].reset_index(drop=True)
    assert r0["kind"].tolist() == ["all_reduce", "all_gather", "send_recv"]
    assert r0["step"].tolist() == [1, 1, -1]
    assert r0["process_group"].tolist() == ["0", "", ""]
    assert r0["group_size"].tolist() == [2.0, 2.0, 2.0]  # the last two from the world size
    assert r0["ts_us"].tolist() == [200.0, 700.0, 850.0] and r0["dur_us"].tolist() == [400.0, 100.0, 10.0]
    assert r0["exposed_us"].tolist() == [300.0, 100.0, 10.0]  # the GEMM hides [200, 300]
    assert r0["msg_bytes"].tolist()[:2] == [4_000_000.0, 512.0] and math.isnan(r0["msg_bytes"][2])
    assert r0["algbw_gbps"][0] == pytest.approx(4e6 / 1e9 / 400e-6)
    assert r0["busbw_gbps"][0] == pytest.approx(4e6 / 1e9 / 400e-6 * 2 * 1 / 2)
    assert r0["busbw_gbps"][1] == pytest.approx(512 / 1e9 / 100e-6 * 1 / 2)
    assert r0["algorithm"].tolist() == ["RING", "RING", ""] and r0["protocol"].tolist() == ["LL", "SIMPLE", ""]
    assert r0["kernels"].tolist() == [1, 1, 1]
    r1 = c[c["rank"] == 1].reset_index(drop=True)
    assert r1["ts_us"].tolist() == [235.0, 735.0, 855.0]  # on rank 0's clock: +5 µs
    assert r1["dur_us"].tolist() == [370.0, 70.0, 10.0] and r1["exposed_us"].tolist() == [300.0, 70.0, 10.0]

    per_step = collectives_per_step(traces)
    assert list(per_step.columns) == list(STEP_COLUMNS)
    s0 = per_step[per_step["rank"] == 0]
    assert s0[["step", "kind", "process_group", "count", "dur_us", "exposed_us"]].values.tolist() == [
        [-1, "send_recv", "", 1, 10.0, 10.0], [1, "all_gather", "", 1, 100.0, 100.0],
        [1, "all_reduce", "0", 1, 400.0, 300.0]]
    summary = collective_summary(traces)
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    ar = summary[(summary["kind"] == "all_reduce")].set_index("rank")
    assert ar.loc[1, "total_us"] == 370.0 and ar.loc[1, "exposed_pct"] == pytest.approx(100 * 300 / 370)

    skew = collective_skew(traces)
    assert list(skew.columns) == list(SKEW_COLUMNS)
    cols = ["kind", "step", "ranks", "skew_us", "earliest_rank", "latest_rank", "overlapping"]
    assert skew[cols].values.tolist() == [["all_reduce", 1, 2, 35.0, 0, 1, True],
                                          ["all_gather", 1, 2, 35.0, 0, 1, True],
                                          ["send_recv", -1, 2, 5.0, 0, 1, True]]

    ev, text = straggler_report(traces)
    assert list(ev.columns) == list(EVIDENCE_COLUMNS)
    one = ev.set_index("rank").loc[1]
    assert (one["calls_compared"], one["latest_calls"], one["latest_pct"]) == (3, 3, 100.0)
    assert one["lateness_us_mean"] == pytest.approx(25.0) and one["lateness_pct"] == pytest.approx(2.5)
    assert one["late_start_us_median"] == 30.0  # HTA: the all_reduce, 30 µs later into the step
    assert not ev["is_straggler"].any()
    assert text.startswith("no straggler among 2 ranks") and "the latest is rank 1" in text


def test_calls_that_cannot_be_one_collective_are_not_evidence(tmp_path: Path) -> None:
    # rank 1's all_reduce starts after rank 0's has ended: not the same collective
    traces = load(two_ranks(tmp_path, late=0.0), workers=1)
    root = tmp_path / "far"
    write_trace(root, rank_events(0.0, 0.0), rank=0, world=2)
    write_trace(root, rank_events(450.0, 0.0), rank=1, world=2)
    far = load(root, workers=1)
    skew = collective_skew(far)
    assert skew["overlapping"].tolist() == [False, False, False]
    ev = straggler_evidence(far)
    assert ev["calls_compared"].tolist() == [0, 0] and not ev["is_straggler"].any()
    assert collective_skew(traces)["overlapping"].all()


def straggler_job(tmp_path: Path, step_shift: list[float], start: list[float]) -> Path:
    """Ranks whose clocks agree; rank r's steps begin ``step_shift[r]`` µs late and its allreduce
    starts ``start[r]`` µs into the step and ends 400 µs after ``500 + max(step_shift)``."""
    root = tmp_path / "job"
    end = 900.0 + max(step_shift)
    for rank, (shift, s) in enumerate(zip(step_shift, start)):
        events = []
        for step in (0, 1):
            t0 = step * 2000.0 + shift
            events += [cpu(f"ProfilerStep#{step + 1}", t0, 1000.0, cat="user_annotation"),
                       cpu("aten::mm", t0 + 10, 20), launch(t0 + s - 5, corr=10 * step + 1),
                       kernel(ALLREDUCE, t0 + s, step * 2000.0 + end - (t0 + s), corr=10 * step + 1)]
        for e in events:
            e["ts"] += BASE_US
        write_trace(root, events, rank=rank, world=len(start))
    return root


def test_a_late_rank_is_named_with_evidence(tmp_path: Path) -> None:
    # HTA's late start sees it too: rank 2 reaches the allreduce 300 µs later into its step
    ev, text = straggler_report(load(straggler_job(tmp_path / "a", [0, 0, 0], [500, 520, 800]), workers=1))
    assert ev["is_straggler"].tolist() == [False, False, True] and ev["hta_is_straggler"].tolist()[2]
    assert ev["latest_calls"].tolist() == [0, 0, 2] and ev["lateness_us_mean"].tolist() == [0.0, 20.0, 300.0]
    assert ev["lateness_us_median"].tolist() == [0.0, 20.0, 300.0] and ev["late_steps"].tolist() == [2, 2, 2]
    assert ev["noise_us"].tolist() == [0.0, 0.0, 0.0]  # every step 1,000 µs: no step-to-step noise
    assert text.startswith("rank 2 is the straggler: it reached the collectives 300.0 µs after the earliest rank "
                           "(median over 2 steps") and "started last in 2 of 2 collectives" in text
    # only the cross-rank clock sees it: rank 2 enters every step 300 µs late (slow input),
    # so within its own step it is on time and HTA's method flags nobody
    ev, text = straggler_report(load(straggler_job(tmp_path / "b", [0, 0, 300], [500, 500, 500]), workers=1))
    assert not ev["hta_is_straggler"].any() and ev["late_start_us_median"].tolist() == [0.0, 0.0, 0.0]
    assert ev["is_straggler"].tolist() == [False, False, True]
    assert ev["lateness_us_mean"].tolist() == [0.0, 0.0, 300.0] and ev["lateness_pct"].tolist()[2] == 30.0
    assert text.startswith("rank 2 is the straggler") and "300.0 µs after the earliest rank" in text


def test_text_columns_are_categories_of_every_rank(tmp_path: Path) -> None:
    """The call table holds its texts as categories: a rank with NCCL kernels and a gloo span (two
    kinds of call, built apart and put together) and a rank without the span (other categories)
    give one table whose texts read as the events' names, whose categories are sorted, and whose
    summaries, per-step sums and matching equal those of the same table with plain texts."""
    root = tmp_path / "job"
    write_trace(root, rank_events(0.0, 0.0) + [cpu("gloo:broadcast", BASE_US + 900, 20)], rank=0, world=2)
    write_trace(root, rank_events(5.0, 0.0), rank=1, world=2)
    traces = load(root, workers=1)
    c = collectives(traces)
    for column in CODED:
        assert isinstance(c[column].dtype, pd.CategoricalDtype)
        labels = c[column].cat.categories.tolist()
        assert labels == sorted(set(labels))
    r0 = c[c["rank"] == 0]
    assert r0["kernel"].tolist() == [ALLREDUCE, SENDRECV_OLD, SENDRECV_NEW, "gloo:broadcast"]
    assert r0["kind"].tolist() == ["all_reduce", "all_gather", "send_recv", "broadcast"]
    assert r0["kernels"].tolist() == [1, 1, 1, 0] and r0["ts_us"].tolist() == [200.0, 700.0, 850.0, 900.0]
    assert c[c["rank"] == 1]["kernel"].tolist() == [ALLREDUCE, SENDRECV_OLD, SENDRECV_NEW]
    # the summaries grouped on the codes equal pandas' groupby of the texts
    plain = c.astype({k: object for k in CODED})
    expected = plain.groupby(["rank", "kind", "process_group"], sort=True).agg(
        count=("dur_us", "size"), total_us=("dur_us", "sum"), exposed_us=("exposed_us", "sum")).reset_index()
    summary = collective_summary(traces)
    assert summary[["rank", "kind", "process_group", "count", "total_us", "exposed_us"]].values.tolist() == \
        expected.values.tolist()
    per_step = plain.groupby(["rank", "step", "kind", "process_group"], sort=True).agg(
        count=("dur_us", "size"), dur_us=("dur_us", "sum")).reset_index()
    assert collectives_per_step(traces)[["rank", "step", "kind", "process_group", "count", "dur_us"]].values.tolist() \
        == per_step.values.tolist()
    # the gloo span is on rank 0 only: matched on no other rank
    assert collective_skew(traces)["kind"].tolist() == ["all_reduce", "all_gather", "send_recv"]


def pandas_matched(c: pd.DataFrame) -> pd.DataFrame:
    """The matching as plain pandas states it (sort, number, group by text): the reference."""
    c = c.astype({k: object for k in CODED}).sort_values(["rank", "kind", "process_group", "step", "ts_us"],
                                                         kind="stable").reset_index(drop=True)
    c["call_index"] = c.groupby(["rank", "kind", "process_group", "step"]).cumcount().astype(np.int64)
    known = (c["seq"] >= 0) & (c["process_group"] != "")
    by_seq = known.groupby(c["process_group"]).transform("all") & known
    c["matched_by"] = np.where(by_seq, "seq", "order")
    key = [c["process_group"], c["kind"], c["seq"]]
    c.loc[by_seq, "step"] = c["step"].where(by_seq).groupby(key).transform("min")[by_seq].astype(np.int64)
    c.loc[by_seq, "call_index"] = c.loc[by_seq, "seq"]
    g = c.groupby(["kind", "process_group", "step", "call_index"])
    c["ranks"] = g["rank"].transform("nunique")
    c["overlapping"] = g["ts_us"].transform("max") <= (c["ts_us"] + c["dur_us"]).groupby(
        [c[k] for k in ("kind", "process_group", "step", "call_index")]).transform("min")
    c["lateness_us"] = c["ts_us"] - g["ts_us"].transform("min")
    return c.loc[c["ranks"] >= 2].reset_index(drop=True)


@pytest.mark.parametrize("spread", [16, 1 << 40], ids=["ranks", "wide values"])
def test_distinct_values_per_group_are_pandas_nunique(spread: int) -> None:
    """How many ranks made each matched call: through a presence table of (group, rank) pairs
    where the ranks span a narrow range, by sorting the pairs where they do not; pandas'
    ``nunique`` either way."""
    from perfreport.analyses.grouping import Grouped
    from perfreport.analyses.matching import _distinct_per_group

    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"call": rng.integers(0, 500, 20_000), "rank": rng.integers(0, 16, 20_000) * (spread // 16)})
    g = Grouped(frame, ["call"])
    want = frame.groupby("call", sort=True)["rank"].nunique().to_numpy()
    np.testing.assert_array_equal(_distinct_per_group(g, frame["rank"].to_numpy()), want)


@pytest.mark.parametrize("job", ["recorded/setups/fsdp_full_w2_gloo", "traces/hta_sampled_2of128rank", "seq"])
def test_matching_is_the_plain_pandas_matching(job: str, tmp_path: Path) -> None:
    """The matching (numpy on the texts' codes) gives the rows plain pandas gives, in its order,
    on two real multi-rank jobs and on a job matched by NCCL's seq with ranks whose steps differ."""
    if job == "seq":
        root = tmp_path / "job"
        write_trace(root, seq_rank_events(0.0, [5, 6], [200.0, 700.0]), rank=0, world=2)
        write_trace(root, seq_rank_events(0.0, [6, 5], [720.0, 205.0], step=7), rank=1, world=2)
        traces = load(root, workers=1)
    else:
        traces = load_cached(str(TRACES.parent / job))
    expected = pandas_matched(collectives(traces))
    got = _matched_calls(traces)
    assert len(got) >= 2 and len(got) == len(expected)
    for column in got.columns:
        assert got[column].astype(object).tolist() == expected[column].tolist(), column


def test_calls_of_plain_and_coded_texts_put_together() -> None:
    """A part with plain texts (a digest cached by an earlier version) makes the column plain;
    coded parts of different categories make one coded column of the united categories."""
    a = pd.DataFrame({"kind": pd.Categorical(["b", "a", "b"]), "ts_us": [1.0, 2.0, 3.0]})
    b = pd.DataFrame({"kind": pd.Categorical(["c", "a"]), "ts_us": [4.0, 5.0]})
    both = _concat_calls([a, b])
    assert both["kind"].cat.categories.tolist() == ["a", "b", "c"]
    assert both["kind"].tolist() == ["b", "a", "b", "c", "a"] and both["ts_us"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    mixed = _concat_calls([a, b.assign(kind=np.array(["c", "a"], dtype=object))])
    assert not isinstance(mixed["kind"].dtype, pd.CategoricalDtype)
    assert mixed["kind"].tolist() == ["b", "a", "b", "c", "a"]


def test_one_rank_or_no_collectives(tmp_path: Path) -> None:
    one = load(write_trace(tmp_path / "one", rank_events(0.0, 0.0)), workers=1)
    assert len(collectives(one)) == 3 and collective_skew(one).empty
    ev, text = straggler_report(one)
    assert text.startswith("one rank") and not ev["is_straggler"].any()
    none = load_cached(str(TRACES / "odd_cpu_only_rank34of300_trimmed"))
    for fn, cols in ((collectives, CALL_COLUMNS), (collective_summary, SUMMARY_COLUMNS),
                     (collectives_per_step, STEP_COLUMNS), (collective_skew, SKEW_COLUMNS)):
        df = fn(none)
        assert list(df.columns) == list(cols)
    # no GPU, but gloo runs its all_reduce on the host: those spans are the calls
    gloo = [e for _, events, _ in raw(TRACES / "odd_cpu_only_rank34of300_trimmed") for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("gloo:")
            and e.get("cat") != "gpu_user_annotation"]
    calls = collectives(none)
    assert len(calls) == len(gloo) > 0 and set(calls["kind"]) == {"all_reduce"}
    assert calls["kernels"].tolist() == [0] * len(gloo) and calls["exposed_us"].tolist() == pytest.approx(calls["dur_us"].tolist())
    assert sorted(calls["dur_us"]) == pytest.approx(sorted(float(e["dur"]) for e in gloo))
    assert collective_skew(none).empty and straggler_evidence(none)["calls_compared"].tolist() == [0]


# --- real traces, against plain Python over the raw JSON ----------------------------------------
def raw(folder: Path) -> list[tuple[dict, list[dict], int]]:
    """Per rank file: (distributedInfo, events, origin). Numbers are read exactly (Decimal) and
    ``ts`` becomes float µs since ``origin``, the floor of the earliest complete event's ts (the
    loader's clock): float64 cannot hold unix-epoch µs to the ns."""
    out = []
    for path in sorted(folder.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
        events = doc["traceEvents"]
        origin = int(min(e["ts"] for e in events if e.get("ph") == "X"))
        for e in events:
            if "ts" in e:
                e["ts"] = float(e["ts"] - origin)
            if "dur" in e:
                e["dur"] = float(e["dur"])
        out.append((doc.get("distributedInfo", {}), events, origin))
    return out


def brute_calls(events: list[dict]) -> list[dict]:
    """NCCL kernels in start order, each with its launch's enclosing ops (by time on the
    launch's thread) and the step of the ProfilerStep span (any thread) containing the launch."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    cpu_ops = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            cpu_ops[(e["pid"], e["tid"])].append(e)
    spans = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    calls = []
    for k in sorted((e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                    key=lambda e: e["ts"]):
        lch = launches.get(k["args"]["correlation"])
        around = [] if lch is None else [o for o in cpu_ops[(lch["pid"], lch["tid"])]
                                         if o["ts"] <= lch["ts"] and lch["ts"] + lch["dur"] <= o["ts"] + o["dur"]]
        steps = [] if lch is None else [n for n, a, z in spans if a <= lch["ts"] < z]
        calls.append({"kernel": k, "ops": around, "step": steps[0] if steps else -1})
    return calls


def compute_exposed(events: list[dict], k: dict) -> float:
    """Kernel time not covered by any non-NCCL kernel, by sweeping a sorted list."""
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "kernel" and not e["name"].startswith("nccl"))
    a, b = k["ts"], k["ts"] + k["dur"]
    covered, reach = 0.0, a
    for s, e in comp:
        s, e = max(s, reach), min(e, b)
        if e > s:
            covered += e - s
            reach = e
    return (b - a) - covered


def test_nccl_trace_matches_plain_python() -> None:
    folder = TRACES / "hta_a100_nccl_rank0of2"
    traces = load_cached(str(folder))
    [(info, events, _)] = raw(folder)
    got = collectives(traces)
    calls = brute_calls(events)
    assert len(got) == len(calls) == 21
    kinds = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    for row, call in zip(got.itertuples(), calls):
        k = call["kernel"]
        (rpc,) = [o for o in call["ops"] if o["name"] == "record_param_comms"]
        a = rpc["args"]
        assert row.kind == kinds[a["Collective name"]] and row.process_group == a["Process Group Name"]
        assert row.group_size == a["Group size"] == 2 and row.step == call["step"]
        assert row.ts_us == pytest.approx(k["ts"], abs=1e-6) and row.dur_us == pytest.approx(k["dur"])
        assert row.msg_bytes == max(a["In msg nelems"], a["Out msg nelems"]) * {"Float": 4, "Long": 8}[a["dtype"]]
        assert row.algbw_gbps == pytest.approx(row.msg_bytes / 1e9 / (k["dur"] / 1e6))
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps)  # n = 2: 2(n-1)/n = 1, broadcast 1
        assert row.exposed_us == pytest.approx(compute_exposed(events, k), abs=1e-6)
        assert (row.algorithm, row.protocol) == ("RING", "LL")


def input_bytes(op: dict) -> float:
    sizes = {"float": 4, "int": 4, "long": 8, "signed char": 1, "unsigned char": 1}
    out = [float(np.prod(d)) * sizes[t] for d, t in zip(op["args"].get("Input Dims", []),
                                                        op["args"].get("Input type", [])) if d and t in sizes]
    return max(out) if out else math.nan


def test_sampled_two_ranks_match_plain_python() -> None:
    folder = TRACES / "hta_sampled_2of128rank"
    traces = load_cached(str(folder))
    got = collectives(traces)
    per_rank = {}
    files = raw(folder)
    common = min(origin for _, _, origin in files)
    for info, events, origin in files:
        calls = brute_calls(events)
        rows = got[got["rank"] == info["rank"]]
        assert len(rows) == len(calls) == 10
        names = {"nccl:all_reduce": "all_reduce", "nccl:all_to_all": "all_to_all",
                 "nccl:_all_gather_base": "all_gather"}
        for row, call in zip(rows.itertuples(), calls):
            colls = [o for o in call["ops"] if o["name"].startswith(("nccl:", "c10d::", "record_param_comms"))]
            (ann,) = [o for o in colls if o["name"].startswith("nccl:")]
            assert row.kind == names[ann["name"]] and row.step == call["step"]
            assert row.msg_bytes == max(b for b in map(input_bytes, colls) if not math.isnan(b))
            assert row.group_size == 128 and row.process_group == ""  # old trace: the world size
        per_rank[info["rank"]] = [(names[next(o["name"] for o in c["ops"] if o["name"].startswith("nccl:"))],
                                   c["step"], c["kernel"]["ts"] + (origin - common),
                                   c["kernel"]["ts"] + (origin - common) + c["kernel"]["dur"])
                                  for c in calls]
    # pair the i-th call of each (kind, step) across the ranks, on the common clock
    seq = {r: defaultdict(list) for r in per_rank}
    for r, calls in per_rank.items():
        for kind, step, s, e in calls:
            seq[r][(kind, step)].append((s, e))
    want = []
    for key in seq[0]:
        for (s0, e0), (s1, e1) in zip(seq[0][key], seq[1][key]):
            want.append((key[0], key[1], abs(s1 - s0), max(s0, s1) <= min(e0, e1), 1 if s1 > s0 else 0))
    skew = collective_skew(traces)
    assert sorted(zip(skew["kind"], skew["step"], skew["skew_us"], skew["overlapping"], skew["latest_rank"])) \
        == sorted(want)
    ok = [w for w in want if w[3]]
    assert len(ok) == 4  # the sampling dropped calls: the other pairs are not one collective
    ev, text = straggler_report(traces)
    one = ev.set_index("rank").loc[1]
    assert one["latest_calls"] == sum(w[4] for w in ok) == 4
    assert one["lateness_us_mean"] == pytest.approx(np.mean([w[2] for w in ok]))
    assert not ev["is_straggler"].any()  # ~7 ms late on a ~617 ms step, HTA agrees
    assert "no straggler among 2 ranks" in text


def test_b200_all_gather_bus_bandwidth() -> None:
    folder = shared_trace("tracelens_b200_eager_rank0of8")
    [(info, events, _)] = raw(folder)
    (k,) = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    row = collectives(load_cached(str(folder))).iloc[0]
    a = k["args"]
    assert (row["kind"], row["process_group"], row["group_size"]) == ("all_gather", a["Process Group Name"], 8)
    assert row["msg_bytes"] == a["Out msg nelems"] * 2  # BFloat16, the gathered output
    assert row["busbw_gbps"] == pytest.approx(row["msg_bytes"] / 1e9 / (k["dur"] / 1e6) * 7 / 8)


def seq_rank_events(shift: float, seqs: list[int], starts: list[float], step: int = 1) -> list[dict]:
    """All-reduces of process group "0" carrying NCCL's ``Seq`` arg, one per (seq, start), in
    ProfilerStep#``step``."""
    ev = [cpu(f"ProfilerStep#{step}", 0, 2000, cat="user_annotation")]
    for i, (seq, start) in enumerate(zip(seqs, starts)):
        ev += [cpu("record_param_comms", start - 20, 10, **{"Collective name": "allreduce", "Seq": seq,
                                                           "Process Group Name": "0", "Group size": 2}),
               launch(start - 15, corr=i + 1), kernel(ALLREDUCE, start, 150, corr=i + 1, stream=20)]
    for e in ev:
        e["ts"] = BASE_US + shift + e["ts"]
    return ev


def test_calls_matched_by_nccl_sequence_number(tmp_path: Path) -> None:
    """Rank 1's trace lacks the first all_reduce (seq 5): by order its first call would pair
    with rank 0's seq 5; by NCCL's seq it pairs with rank 0's seq 6 (HTA 0.6's seq_num)."""
    root = tmp_path / "job"
    write_trace(root, seq_rank_events(0.0, [5, 6], [200.0, 700.0]), rank=0, world=2)
    write_trace(root, seq_rank_events(0.0, [6], [710.0]), rank=1, world=2)
    traces = load(root, workers=1)
    assert collectives(traces)["seq"].tolist() == [5, 6, 6]
    skew = collective_skew(traces)
    assert skew[["call_index", "ranks", "skew_us", "earliest_rank", "latest_rank", "overlapping", "matched_by"]
                ].values.tolist() == [[6, 2, 10.0, 0, 1, True, "seq"]]
    # without the Seq arg the same calls are paired by order: the wrong pair, flagged as such
    plain = tmp_path / "plain"
    for rank, (seqs, starts) in enumerate((([5, 6], [200.0, 700.0]), ([6], [710.0]))):
        events = seq_rank_events(0.0, seqs, starts)
        for e in events:
            e["args"].pop("Seq", None)
        write_trace(plain, events, rank=rank, world=2)
    by_order = collective_skew(load(plain, workers=1))
    assert by_order[["call_index", "skew_us", "overlapping", "matched_by"]].values.tolist() == [
        [0, 510.0, False, "order"]]
    # rank 1 numbers its steps differently: the seq still pairs the calls (step: the earliest)
    shifted = tmp_path / "shifted"
    write_trace(shifted, seq_rank_events(0.0, [5, 6], [200.0, 700.0]), rank=0, world=2)
    write_trace(shifted, seq_rank_events(0.0, [5, 6], [205.0, 720.0], step=7), rank=1, world=2)
    skew = collective_skew(load(shifted, workers=1))
    assert skew[["step", "call_index", "skew_us", "latest_rank", "matched_by"]].values.tolist() == [
        [1, 5, 5.0, 1, "seq"], [1, 6, 20.0, 1, "seq"]]
