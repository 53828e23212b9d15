"""perfreport.analyses.diff: per-step op/kernel means of two runs and their change.

Hand-built traces give exact expected numbers; a real trace is checked against a brute-force
count from its raw JSON, and HTA's own per-name counts (oracle) over all steps.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.diff import (
    DIFF_COLUMNS, PROFILE_COLUMNS, STEP_COLUMNS, added_removed, normalize_kernel_name, op_steps, ops_diff,
)
from perfreport.analyses.op_profile import op_profile
from perfreport.load import load

from .conftest import ORACLE, TRACES, load_cached


# --- tiny traces ---------------------------------------------------------------------------
class Builder:
    """Kineto-shaped events: steps, CPU ops, and kernels launched by a runtime call."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def step(self, n: int, ts: float, dur: float) -> Builder:
        self.events.append(dict(ph="X", cat="user_annotation", name=f"ProfilerStep#{n}", pid=1, tid=1, ts=ts, dur=dur))
        return self

    def op(self, name: str, ts: float, dur: float) -> Builder:
        self.events.append(dict(ph="X", cat="cpu_op", name=name, pid=1, tid=1, ts=ts, dur=dur))
        return self

    def kernel(self, name: str, launch_ts: float, ts: float, dur: float, cat: str = "kernel") -> Builder:
        return self.graph([name], launch_ts, ts, dur, launch="cudaLaunchKernel", cat=cat)

    def graph(self, names: list[str], launch_ts: float, ts: float, dur: float, launch: str = "cudaGraphLaunch",
              cat: str = "kernel") -> Builder:
        """One launch call and its kernels, back to back from ``ts`` (a CUDA-graph replay)."""
        self.corr += 1
        self.events.append(dict(ph="X", cat="cuda_runtime", name=launch, pid=1, tid=1, ts=launch_ts,
                                dur=1, args={"correlation": self.corr}))
        for i, name in enumerate(names):
            self.events.append(dict(ph="X", cat=cat, name=name, pid=0, tid=7, ts=ts + i * dur, dur=dur,
                                    args={"correlation": self.corr, "stream": 7, "device": 0}))
        return self

    def write(self, folder: Path, rank: int = 0) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        doc = {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": self.events}
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
        return folder


def make_control(root: Path):
    b = Builder().step(1, 0, 100).step(2, 100, 100)
    b.op("aten::add", 10, 5).kernel("void add_kernel<4, float>(float*)", 11, 20, 4)
    b.op("aten::mul", 30, 6).kernel("void mul_kernel<float>(float*)", 31, 40, 10)
    b.op("aten::add", 110, 7).kernel("void add_kernel<4, float>(float*)", 111, 205, 6)  # runs after its step
    b.op("aten::zero_", 250, 3)  # outside every step: not counted
    return load(b.write(root / "control"))


def make_test(root: Path):
    b = Builder().step(1, 0, 100).step(2, 100, 100).step(3, 200, 100)
    for s in (0, 100, 200):
        b.op("aten::add", s + 10, 4).kernel("void add_kernel<8, float>(float*)", s + 11, s + 20, 3)
        b.op("aten::relu", s + 30, 2).kernel("triton_poi_fused_relu_0", s + 31, s + 40, 1)
    return load(b.write(root / "test"))


def row(df: pd.DataFrame, kind: str, key: str) -> pd.Series:
    sel = df[(df["kind"] == kind) & (df["key"] == key)]
    assert len(sel) == 1, (kind, key, df[["kind", "key"]])
    return sel.iloc[0]


def test_profile_and_steps_by_hand(tmp_path: Path) -> None:
    c = make_control(tmp_path)
    prof = op_profile(c)
    assert list(prof.columns) == list(PROFILE_COLUMNS) and len(prof) == 4
    add = row(prof, "cpu_op", "aten::add")
    assert (add["samples"], add["count_per_step"], add["dur_per_step_us"], add["dur_per_call_us"]) == (2, 1.0, 6.0, 6.0)
    k = row(prof, "gpu", "add_kernel<float>")
    assert (k["count_per_step"], k["dur_per_step_us"], k["names"]) == (1.0, 5.0, 1)
    mul = row(prof, "gpu", "mul_kernel<float>")
    assert (mul["count_per_step"], mul["dur_per_step_us"]) == (0.5, 5.0)
    steps = op_steps(c)
    assert list(steps.columns) == list(STEP_COLUMNS)
    # the second add kernel ran at 205 µs, after step 2 ended, but was launched in step 2
    gpu_add = steps[(steps["kind"] == "gpu") & (steps["key"] == "add_kernel<float>")]
    assert gpu_add[["step", "count", "dur_us"]].values.tolist() == [[1, 1, 4.0], [2, 1, 6.0]]
    assert "aten::zero_" not in set(steps["key"]) and "cudaLaunchKernel" not in set(steps["key"])
    assert not steps["key"].str.startswith("ProfilerStep").any()


def test_diff_by_hand(tmp_path: Path) -> None:
    d = ops_diff(make_control(tmp_path), make_test(tmp_path))
    assert list(d.columns) == list(DIFF_COLUMNS) and len(d) == 6
    add = row(d, "cpu_op", "aten::add")
    assert add["control_dur_per_step_us"] == 6.0 and add["test_dur_per_step_us"] == 4.0
    assert add["delta_dur_per_step_us"] == -2.0 and add["count_change"] == "same"
    assert add["delta_dur_pct"] == pytest.approx(-100 / 3)
    # cpu_op total delta = -2 (add) - 3 (mul) + 2 (relu) = -3
    assert add["delta_share_pct"] == pytest.approx(200 / 3)
    mul = row(d, "cpu_op", "aten::mul")
    assert (mul["count_change"], mul["test_count_per_step"], mul["delta_share_pct"]) == ("removed", 0.0, 100.0)
    assert np.isnan(mul["test_dur_per_call_us"]) and mul["control_dur_per_call_us"] == 6.0
    relu = row(d, "cpu_op", "aten::relu")
    assert relu["count_change"] == "added" and np.isnan(relu["delta_dur_pct"])
    assert relu["delta_share_pct"] == pytest.approx(-200 / 3)
    # kernels: the <4, float> and <8, float> builds of add_kernel are one kernel; total delta -6
    k = row(d, "gpu", "add_kernel<float>")
    assert (k["control_dur_per_step_us"], k["test_dur_per_step_us"], k["names"]) == (5.0, 3.0, 2)
    assert k["delta_share_pct"] == pytest.approx(100 / 3)
    assert row(d, "gpu", "mul_kernel<float>")["delta_dur_per_step_us"] == -5.0
    tri = row(d, "gpu", "triton_poi_fused_relu")
    assert (tri["count_change"], tri["test_count_per_step"], tri["test_dur_per_step_us"]) == ("added", 1.0, 1.0)
    # largest change first within each kind
    assert d["kind"].tolist() == ["cpu_op"] * 3 + ["gpu"] * 3
    assert d["key"].tolist()[3] == "mul_kernel<float>"
    assert added_removed(d) == {"added_ops": ["aten::relu"], "added_kernels": ["triton_poi_fused_relu"],
                                "removed_ops": ["aten::mul"], "removed_kernels": ["mul_kernel<float>"]}


def test_exact_names_keep_builds_apart(tmp_path: Path) -> None:
    d = ops_diff(make_control(tmp_path), make_test(tmp_path), exact=True)
    changes = d.set_index("key")["count_change"]
    assert changes["void add_kernel<4, float>(float*)"] == "removed"
    assert changes["void add_kernel<8, float>(float*)"] == "added"
    assert changes["triton_poi_fused_relu_0"] == "added"
    assert (d["names"] == 1).all()


def test_cuda_graph_replays_match_eager_launches(tmp_path: Path) -> None:
    eager = Builder().step(1, 0, 100).step(2, 100, 100)
    for s in (0, 100):
        eager.kernel("void gemm<float, 128>(float*)", s + 1, s + 10, 5)
        eager.kernel("void relu<float>(float*)", s + 2, s + 20, 1)
    graphed = Builder().step(1, 0, 100).step(2, 100, 100)
    for s in (0, 100):  # the whole step replayed by one cudaGraphLaunch, running past the step's end
        graphed.graph(["void gemm<float, 256>(float*)", "void relu<float>(float*)"], s + 1, s + 95, 4)
    d = ops_diff(load(eager.write(tmp_path / "eager")), load(graphed.write(tmp_path / "graphed")))
    assert d["key"].tolist() == ["relu<float>", "gemm<float>"]  # largest |delta| first
    assert d["count_change"].tolist() == ["same", "same"]
    assert d["delta_dur_per_step_us"].tolist() == [3.0, -1.0]
    assert d["test_count_per_step"].tolist() == [1.0, 1.0]


def test_common_steps_over_ranks_and_traces_without_steps(tmp_path: Path) -> None:
    Builder().step(1, 0, 100).step(2, 100, 100).op("aten::add", 10, 5).op("aten::add", 110, 7).write(
        tmp_path / "job", rank=0)
    Builder().step(2, 100, 100).op("aten::add", 120, 9).op("aten::add", 10, 50).write(tmp_path / "job", rank=1)
    job = load(tmp_path / "job")
    steps = op_steps(job)
    assert steps[["rank", "step", "count", "dur_us"]].values.tolist() == [[0, 2, 1, 7.0], [1, 2, 1, 9.0]]
    add = row(op_profile(job), "cpu_op", "aten::add")
    assert (add["samples"], add["count_per_step"], add["dur_per_step_us"]) == (2, 1.0, 8.0)
    # no ProfilerStep at all: each rank's whole trace is one sample (step -1)
    flat = load(Builder().op("aten::add", 10, 5).op("aten::add", 50, 3).kernel("k", 11, 20, 2).write(tmp_path / "f"))
    assert op_steps(flat)["step"].unique().tolist() == [-1]
    p = op_profile(flat)
    assert row(p, "cpu_op", "aten::add")[["samples", "count_per_step", "dur_per_step_us"]].tolist() == [1, 2.0, 8.0]
    assert row(p, "gpu", "k")["dur_per_step_us"] == 2.0


def test_no_gpu_and_empty_traces(tmp_path: Path) -> None:
    cpu_only = load(Builder().step(1, 0, 100).op("aten::add", 10, 5).write(tmp_path / "cpu"))
    assert set(op_profile(cpu_only)["kind"]) == {"cpu_op"}
    empty = load(Builder().write(tmp_path / "empty"))
    assert op_profile(empty).empty and list(op_profile(empty).columns) == list(PROFILE_COLUMNS)
    assert op_steps(empty).empty and list(op_steps(empty).columns) == list(STEP_COLUMNS)
    assert ops_diff(empty, empty).empty and list(ops_diff(empty, empty).columns) == list(DIFF_COLUMNS)
    d = ops_diff(empty, cpu_only)
    assert d["count_change"].tolist() == ["added"] and np.isnan(d["delta_dur_pct"]).all()
    d = ops_diff(cpu_only, cpu_only)
    assert d["count_change"].tolist() == ["same"] and np.isnan(d["delta_share_pct"]).all()  # total delta 0


def test_kernel_name_normalisation() -> None:
    n = normalize_kernel_name
    a = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
    b = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
    mul = ("void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int)")
    assert n(a) == n(b) == "at::native::vectorized_elementwise_kernel<at::native::CUDAFunctor_add>"
    assert n(mul) == "at::native::vectorized_elementwise_kernel<at::native::BUnaryFunctor>"
    lam = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
           "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::operator()() const::"
           "{lambda(double)#1}, at::detail::Array<char*, 2> >(int)")
    assert n(lam) == ("at::native::vectorized_elementwise_kernel<at::native::(anonymous namespace)::"
                      "launch_clamp_scalar>")
    assert n("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>("
             "cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4::Params)") == \
        "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>"
    assert n("void cub::DeviceScanKernel<cub::AgentScanPolicy<128, 15, long, (cub::BlockLoadAlgorithm)3>, long*>"
             "(long*)") == "cub::DeviceScanKernel<cub::AgentScanPolicy>"
    assert n("void foo<(cub::X)3, true, 16ul>(int)") == "foo"  # only literals: no identity
    assert n("triton_red_fused_sum_12") == n("triton_red_fused_sum_3") == "triton_red_fused_sum"
    assert n("triton_poi_fused_add_0_a1b2c3d4e5f60789") == "triton_poi_fused_add"
    assert n("triton__0d1d2d3de") == "triton__0d1d2d3de"  # argument specialisation, not a hash
    assert n("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD (Pinned -> Device)"
    assert n("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert n("volta_sgemm_128x64_tn") == "volta_sgemm_128x64_tn"
    assert n("my_kernel<int") == "my_kernel<int>"  # a truncated name still gives a key


# --- real traces ---------------------------------------------------------------------------
def brute_force_profile(path: Path) -> dict[tuple[str, str], tuple[int, float]]:
    """(kind, raw name) -> (count, total dur) over the ProfilerSteps, from the raw JSON."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in complete if e["name"].startswith("ProfilerStep#")]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    gpu_side = gpu_cats | {"cuda_sync", "gpu_user_annotation", "cuda_profiler_range"}

    def in_step(ts: float) -> bool:
        return any(s <= ts < e for s, e in steps)

    launch_in_step = {}
    for e in complete:
        corr = e.get("args", {}).get("correlation", -1)
        if e["cat"] not in gpu_side and corr >= 0:
            launch_in_step[corr] = in_step(e["ts"])
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for e in complete:
        if e["cat"] == "cpu_op" and in_step(e["ts"]):
            key = ("cpu_op", e["name"])
        elif e["cat"] in gpu_cats and launch_in_step.get(e.get("args", {}).get("correlation", -1), False):
            key = ("gpu", e["name"])
        else:
            continue
        count, dur = out.get(key, (0, 0.0))
        out[key] = (count + 1, dur + e["dur"])
    return out


def test_profile_matches_brute_force_on_nccl_trace() -> None:
    folder = TRACES / "hta_a100_nccl_rank0of2"
    (path,) = folder.glob("*.json.gz")
    want = brute_force_profile(path)
    prof = op_profile(load_cached(str(folder)), exact=True)
    assert (prof["samples"] == 3).all()
    got = {(k, n): (c, d) for k, n, c, d in zip(prof["kind"], prof["key"], prof["count_per_step"] * 3,
                                                  prof["dur_per_step_us"] * 3)}
    assert set(got) == set(want) and len(got) > 100
    for key, (count, dur) in want.items():
        assert got[key][0] == pytest.approx(count) and got[key][1] == pytest.approx(dur, abs=1e-6), key
    # every kernel, memcpy and memset of this trace (2700 + 960 + 114) was launched inside a step
    assert sum(c for (k, _), (c, _) in want.items() if k == "gpu") == 3774


def test_counts_agree_with_hta_over_all_steps() -> None:
    """HTA's ops_summary over every step of the tiny pair counts the same cpu_op and kernel events."""
    for side, label in (("base", "control"), ("test", "test")):
        prof = op_profile(load_cached(str(TRACES / "pair_hta_trace_compare_tiny" / side)), exact=True)
        hta = pd.read_csv(ORACLE / "pair_hta_trace_compare_tiny" / "diff" / f"ops_summary__{label}__all_iterations.csv")
        hta = hta[hta["cat"].isin(["cpu_op", "kernel"])]
        kinds = hta["cat"].map({"cpu_op": "cpu_op", "kernel": "gpu"})
        want = {(k, n): (c, d) for k, n, c, d in zip(kinds, hta["name"], hta["counts"], hta["total_duration"])}
        got = {(k, n): (c * s, d * s) for k, n, c, d, s in zip(prof["kind"], prof["key"], prof["count_per_step"],
                                                                prof["dur_per_step_us"], prof["samples"])}
        assert set(got) == set(want) and len(got) == (3 if side == "base" else 6)
        for key, (count, dur) in want.items():
            assert got[key][0] == pytest.approx(count) and got[key][1] == pytest.approx(dur), key


def test_diff_of_real_pair_is_consistent() -> None:
    folder = TRACES / "pair_tracelens_h100_vs_mi300x_bert_small"
    c, t = load_cached(str(folder / "h100")), load_cached(str(folder / "mi300x"))
    d = ops_diff(c, t)
    pc, pt = op_profile(c), op_profile(t)
    for kind in ("cpu_op", "gpu"):
        sel = d[d["kind"] == kind]
        assert sel["delta_share_pct"].sum() == pytest.approx(100.0)
        assert sel["control_dur_per_step_us"].sum() == pytest.approx(pc[pc["kind"] == kind]["dur_per_step_us"].sum())
        assert sel["test_dur_per_step_us"].sum() == pytest.approx(pt[pt["kind"] == kind]["dur_per_step_us"].sum())
    ar = added_removed(d)
    assert "attn_fwd" in ar["added_kernels"] and (
        "pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits>" in ar["removed_kernels"])
    assert ar["added_ops"] == ar["removed_ops"] == []


def test_graph_replayed_kernels_count_in_their_launch_step() -> None:
    """On a real CUDA-graph trace, the kernels each cudaGraphLaunch replays are counted in the
    step of the launch, with the same names as eager launches (brute force over the raw JSON)."""
    folder = TRACES / "hta_a100_rank0of16_cudagraph_triton"
    (path,) = folder.glob("*.json.gz")
    want = brute_force_profile(path)
    samples = 5  # ProfilerStep#550..554, all kept by op_profile
    prof = op_profile(load_cached(str(folder)), exact=True)
    assert (prof["samples"] == samples).all()
    got = {(k, n): (c * samples, d * samples) for k, n, c, d in zip(prof["kind"], prof["key"], prof["count_per_step"],
                                                                    prof["dur_per_step_us"])}
    assert set(got) == set(want)
    for key, (count, dur) in want.items():
        assert got[key][0] == pytest.approx(count) and got[key][1] == pytest.approx(dur, abs=1e-6), key
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    graph_corr = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    replayed = {e["name"] for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in graph_corr}
    assert len(replayed) >= 10 and all(("gpu", n) in got for n in replayed)
    normalised = op_profile(load_cached(str(folder)))
    assert {normalize_kernel_name(n) for n in replayed} <= set(normalised.loc[normalised["kind"] == "gpu", "key"])
