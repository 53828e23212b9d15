"""Profiler steps and per-rank step times, cross-checked by brute force and on hand-built traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.steps import STEP_COLUMNS, STEP_TIME_COLUMNS, profiler_steps, step_times
from perfreport.load import load

from .conftest import TRACES, brute_union_length, load_cached


def write_trace(path: Path, events: list[dict], rank: int = 0, world: int = 1) -> Path:
    """A minimal Kineto trace file with ``events`` (a rank's folder is ``path``)."""
    path.mkdir(parents=True, exist_ok=True)
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}
    f = path / f"rank{rank}.json.gz"
    with gzip.open(f, "wt") as fh:
        json.dump(doc, fh)
    return f


def cpu(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts: float, corr: int, dur: float = 2.0, tid: int = 1) -> dict:
    return cpu("cudaLaunchKernel", ts, dur, cat="cuda_runtime", tid=tid, correlation=corr)


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "device": 0}}



def test_steps_on_nccl_trace_match_brute_force() -> None:
    traces = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))
    df = profiler_steps(traces)
    assert df["step"].tolist() == [4, 5, 6] and df["rank"].tolist() == [0, 0, 0]
    t = traces[0]
    names = t.decode(t.name)
    for _, row in df.iterrows():
        # the CPU ProfilerStep span, found by plain iteration over the events
        span = [(t.ts[i], t.ts[i] + t.dur[i]) for i in range(t.n_events)
                if names[i] == f"ProfilerStep#{int(row['step'])}" and t.cat[i] != t.code("gpu_user_annotation")
                and t.ph[i] == t.code("X")]
        assert len(span) == 1
        assert row["start_us"] == span[0][0] and row["end_us"] == span[0][1]
        assert row["wall_us"] == pytest.approx(span[0][1] - span[0][0])
        gpu = [i for i in np.flatnonzero(t.gpu_activity()) if t.iteration[i] == row["step"]]
        assert row["gpu_events"] == len(gpu) == 1258
        assert row["gpu_busy_us"] == pytest.approx(brute_union_length([t.ts[i] for i in gpu],
                                                               [t.ts[i] + t.dur[i] for i in gpu]))
    assert df["wall_us"].round(3).tolist() == [222442.191, 219726.905, 224936.243]
    assert df["gpu_busy_us"].round(3).tolist() == [49438.921, 49728.926, 58332.167]


def test_step_times_per_rank_on_two_rank_trace() -> None:
    df = step_times(load_cached(str(TRACES / "hta_sampled_2of128rank")))
    assert list(df.columns) == list(STEP_TIME_COLUMNS)
    assert df["rank"].tolist() == [0, 1] and df["steps"].tolist() == [2, 2]
    assert df["first_step"].tolist() == [551, 551] and df["last_step"].tolist() == [552, 552]
    assert df["wall_us_mean"].tolist() == [615120.0, 619271.5]
    assert df.loc[0, "wall_us_std"] == pytest.approx(np.std([607312.0, 622928.0], ddof=1))
    assert df.loc[0, "gpu_busy_pct"] == pytest.approx(100 * (278680.0 + 268976.0) / (607312.0 + 622928.0))


def test_hand_built_steps(tmp_path: Path) -> None:
    events = [
        cpu("ProfilerStep#3", 0, 100, cat="user_annotation"),
        launch(10, corr=1), kernel("k1", 20, 30, corr=1),
        launch(15, corr=2), kernel("k2", 40, 20, corr=2, stream=8),  # overlaps k1: busy is the union
        cpu("ProfilerStep#4", 100, 50, cat="user_annotation"),
        launch(110, corr=3), kernel("k3", 160, 10, corr=3),  # runs after the step's CPU span
        # the GPU copy of the annotation is not a step
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7, "ts": 20,
         "dur": 40, "args": {}},
    ]
    df = profiler_steps(load(write_trace(tmp_path / "a", events)))
    assert df["step"].tolist() == [3, 4]
    assert df["wall_us"].tolist() == [100.0, 50.0]
    assert df["gpu_events"].tolist() == [2, 1]
    assert df["gpu_busy_us"].tolist() == [40.0, 10.0]  # [20, 60) union; k3 alone
    assert df["gpu_start_us"].tolist() == [20.0, 160.0] and df["gpu_end_us"].tolist() == [60.0, 170.0]


def test_edge_cases_no_steps_one_step_no_gpu(tmp_path: Path) -> None:
    none = profiler_steps(load(write_trace(tmp_path / "none", [cpu("aten::mm", 0, 5)])))
    assert none.empty and list(none.columns) == list(STEP_COLUMNS)
    assert step_times(load(write_trace(tmp_path / "none2", [cpu("aten::mm", 0, 5)]))).empty
    one = load(write_trace(tmp_path / "one", [cpu("ProfilerStep#7", 0, 10, cat="user_annotation"),
                                              cpu("aten::mm", 1, 5)]))
    df = profiler_steps(one)
    assert df["step"].tolist() == [7] and df["gpu_events"].tolist() == [0]
    assert np.isnan(df.loc[0, "gpu_busy_us"])  # no GPU at all: NaN, not 0
    st = step_times(one)
    assert st.loc[0, "steps"] == 1 and np.isnan(st.loc[0, "wall_us_std"]) and st.loc[0, "wall_us_mean"] == 10.0



def test_gpu_busy_share_of_a_step_stays_within_100_pct():
    """A deeply asynchronous real trace: the GPU work each step launches runs long past the step's
    end, so the launched work's union exceeds the wall time (119.9 %). The share of the step the
    GPU was busy counts the GPU work inside the step windows, whichever step launched it."""
    import perfreport
    from perfreport.analyses.steps import profiler_steps, step_times

    (path,) = sorted(Path(__file__).parent.joinpath("data", "traces").rglob("rank-0.Apr_03_18_51_38*"))
    traces = perfreport.load(path)
    steps = profiler_steps(traces)
    assert steps["gpu_busy_us"].sum() > 1.15 * steps["wall_us"].sum()  # launched work runs past the steps
    assert (steps["gpu_busy_in_step_us"] <= steps["wall_us"] + 1e-6).all()
    share = step_times(traces)["gpu_busy_pct"].iloc[0]
    assert share == pytest.approx(100 * steps["gpu_busy_in_step_us"].sum() / steps["wall_us"].sum())
    assert 95.0 < share <= 100.0  # saturated GPU: 97.4 %


def test_string_codes_answer_as_the_dict_of_every_string():
    """model.StringCodes (a rank's text -> code, step names looked up on demand) answers every
    question the plain dict of the string table does, before and after a code is added."""
    from perfreport.model import StringCodes, step_name_table

    strings = ["X", "ProfilerStep#3", "cudaLaunchKernel", "ProfilerStep#10", "ProfilerStepX", "ProfilerStep #4", "i"]
    plain = {s: i for i, s in enumerate(strings)}
    codes = StringCodes(np.array(strings, dtype=object), step_name_table(strings))
    asked = [*strings, "ProfilerStep#5", "nope", "", "ProfilerStep#03"]
    assert [codes.get(t, -1) for t in asked] == [plain.get(t, -1) for t in asked]
    assert [t in codes for t in asked] == [t in plain for t in asked]
    assert len(codes) == len(plain) and sorted(codes) == sorted(plain) and dict(codes) == plain
    with pytest.raises(KeyError):
        codes["ProfilerStep#5"]
    codes["ProfilerStep#5"] = plain["ProfilerStep#5"] = len(strings)  # a restarted numbering adds a name
    assert codes["ProfilerStep#5"] == 7 and len(codes) == 8 and dict(codes) == plain
    no_steps = StringCodes(np.array(["a", "b"], dtype=object), step_name_table(["a", "b"]))
    assert dict(no_steps) == {"a": 0, "b": 1} and no_steps.get("ProfilerStep#1") is None


def test_a_loaded_rank_finds_its_step_names():
    trace = next(iter(load_cached(str(TRACES / "odd_a100_triton_example"))))  # a step name per step
    names = [t for t in trace.strings.tolist() if t.startswith("ProfilerStep#")]
    assert names and all(trace.code(t) == trace.strings.tolist().index(t) for t in names)
    assert trace.code("ProfilerStep#999999") == -1 and trace.code("X") == trace.strings.tolist().index("X")
