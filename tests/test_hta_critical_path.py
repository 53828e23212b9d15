"""perfreport.hta critical path analysis against HTA 0.5.0's outputs, plus hand-built cases.

The oracle tables (tests/data/oracle/<trace>/critical_path__*.csv) were made with the
annotation / instance in results.json["critical_path"]; results.json also records the graph
size, which we check exactly (it pins down HTA's edge rules, not just the final numbers).
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.hta import TraceAnalysis
from perfreport.hta.cp_longest import GraphCycleError, longest_path

DATA = Path(__file__).parent / "data"
SHARED = Path("/work/shared")


def _oracle_cases(root: Path, trace_root: Path) -> list[tuple[Path, Path]]:
    cases = []
    for results in sorted(root.rglob("results.json")):
        if isinstance(json.loads(results.read_text()).get("critical_path"), dict):
            rel = results.parent.relative_to(root)
            cases.append((trace_root / rel, results.parent))
    return cases


LOCAL_CASES = _oracle_cases(DATA / "oracle", DATA / "traces")
SHARED_ONLY = ["param_resnet_rtx2080ti", "pair_hta_trace_diff/control", "pair_hta_trace_diff/test"]

_ANALYZERS: dict[Path, TraceAnalysis] = {}


def analyzer(trace_dir: Path) -> TraceAnalysis:
    if trace_dir not in _ANALYZERS:
        _ANALYZERS[trace_dir] = TraceAnalysis(trace_dir=str(trace_dir))
    return _ANALYZERS[trace_dir]


def _rows(frame: pd.DataFrame) -> list[tuple]:
    """Breakdown rows as comparable tuples (after a CSV round trip, as the oracle was written)."""
    frame = pd.read_csv(io.StringIO(frame.to_csv(index=False)), keep_default_na=False, na_values=[""])
    out = []
    for r in frame.itertuples(index=False):
        out.append((-1.0 if pd.isna(r.event_idx) else float(r.event_idx), r.type,
                    "" if pd.isna(r.s_name) else str(r.s_name), "" if pd.isna(r.bound_by) else r.bound_by,
                    -9.0 if pd.isna(r.stream) else float(r.stream), round(float(r.duration), 6)))
    return sorted(out)


def check_against_oracle(trace_dir: Path, oracle_dir: Path) -> None:
    a = analyzer(trace_dir)
    expected = json.loads((oracle_dir / "results.json").read_text())["critical_path"]
    for rank_s, info in expected.items():
        rank = int(rank_s)
        graph, ok = a.critical_path_analysis(rank=rank, annotation=info["annotation"],
                                             instance_id=info["instance_id"])
        assert ok is info["success"]
        assert graph.number_of_nodes() == info["graph_nodes"]
        assert graph.number_of_edges() == info["graph_edges"]
        assert len(graph.critical_path_nodes) == info["critical_path_nodes"]
        assert graph.critical_path_length() == pytest.approx(info["critical_path_length"], abs=1e-6)

        ours = graph.get_critical_path_breakdown()
        assert list(ours.columns) == ["event_idx", "duration", "type", "s_name", "cat", "pid", "tid",
                                      "stream", "index", "bound_by"]
        hta = pd.read_csv(oracle_dir / f"critical_path__breakdown__rank{rank}.csv")
        assert _rows(ours) == _rows(hta)

        summary = graph.summary()
        hta_summary = pd.read_csv(oracle_dir / f"critical_path__summary__rank{rank}.csv",
                                  keep_default_na=False).set_index("bound_by")["duration"]
        assert summary.index.name == "bound_by" and summary.name == "duration"
        assert list(summary.index) == list(hta_summary.index)
        np.testing.assert_allclose(summary.to_numpy(), hta_summary.to_numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("trace_dir,oracle_dir", LOCAL_CASES,
                         ids=[str(o.relative_to(DATA / "oracle")) for _, o in LOCAL_CASES])
def test_matches_hta_oracle(trace_dir: Path, oracle_dir: Path) -> None:
    check_against_oracle(trace_dir, oracle_dir)


@pytest.mark.parametrize("name", SHARED_ONLY)
def test_matches_hta_oracle_shared_traces(name: str) -> None:
    trace_dir, oracle_dir = SHARED / "traces" / name, SHARED / "oracle" / name
    if not trace_dir.is_dir() or not (oracle_dir / "results.json").is_file():
        pytest.skip(f"{trace_dir} (a shared-only trace) is not present")
    check_against_oracle(trace_dir, oracle_dir)


def test_alexnet_forward_reference_numbers() -> None:
    """The spec's reference run (§12.1): alexnet, forward annotation, instance 1."""
    a = analyzer(DATA / "traces" / "hta_a100_alexnet_benchmark")
    graph, ok = a.critical_path_analysis(0, "[param|pytorch.model.alex_net|0|0|0|measure|forward]", 1)
    assert ok
    assert (graph.number_of_nodes(), graph.number_of_edges(), len(graph.critical_path_nodes)) == (418, 421, 149)
    assert graph.summary().round(2).to_dict() == {
        "": 0.0, "cpu_bound": 89.42, "gpu_compute_bound": 10.36,
        "gpu_kernel_kernel_overhead": 0.14, "gpu_kernel_launch_overhead": 0.08}


# ---------------------------------------------------------------------------- hand-built traces
def _x(name, cat, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(tmp_path: Path, events: list[dict]) -> TraceAnalysis:
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    return TraceAnalysis(trace_dir=str(tmp_path))


def _launch_trace(op="cpu_op", runtime="cuda_runtime", kernel="kernel"):
    # aten::foo [0,100] launches kern (stream 7, [50,250]) at 10; aten::bar [120,140] follows.
    return [_x("aten::foo", op, 0, 100), _x("cudaLaunchKernel", runtime, 10, 10, correlation=1),
            _x("kern", kernel, 50, 200, pid=0, tid=7, stream=7, correlation=1, device=0),
            _x("aten::bar", op, 120, 20)]


def _compact(graph) -> list[tuple]:
    bd = graph.get_critical_path_breakdown()
    return [("" if pd.isna(r.s_name) else r.s_name, r.duration, r.bound_by) for r in bd.itertuples()]


def test_launch_delay_path(tmp_path: Path) -> None:
    """foo.start -10-> launch.start -40 (launch delay)-> kern.start -200-> kern.end = 250 µs,
    longer than the CPU chain (10 + 10 + 80 + 0 + 20 = 120 µs)."""
    graph, ok = _write(tmp_path, _launch_trace()).critical_path_analysis(0, "", None)
    assert ok
    assert graph.number_of_edges() == 7  # 5 CPU edges, kernel span, launch
    assert _compact(graph) == [("aten::foo", 10.0, "cpu_bound"), ("", 40.0, "gpu_kernel_launch_overhead"),
                               ("kern", 200.0, "gpu_compute_bound")]
    assert graph.summary().to_dict() == {"cpu_bound": 4.0, "gpu_compute_bound": 80.0,
                                         "gpu_kernel_launch_overhead": 16.0}
    assert graph.critical_path_length() == 250


def test_legacy_categories_are_nodes(tmp_path: Path) -> None:
    """Deviation: pre-2022 Kineto names ("Operator", "Runtime") count like cpu_op/cuda_runtime.
    HTA 0.5.0 makes no CPU nodes for them and stops with an AssertionError at the launch."""
    graph, ok = _write(tmp_path, _launch_trace("Operator", "Runtime", "Kernel")).critical_path_analysis(0, "", None)
    assert ok
    assert _compact(graph) == [("aten::foo", 10.0, "cpu_bound"), ("", 40.0, "gpu_kernel_launch_overhead"),
                               ("kern", 200.0, "gpu_compute_bound")]


def test_stream_sync_and_blocking_call(tmp_path: Path) -> None:
    """A Stream Sync makes the host wait for the kernel: kern.end -0 (sync)-> sync call end,
    whose own span weighs 0 (blocking call); then aten::baz (30 µs) follows."""
    events = _launch_trace() + [
        _x("cudaStreamSynchronize", "cuda_runtime", 150, 110, correlation=2),
        _x("Stream Sync", "cuda_sync", 150, 110, pid=0, tid=7, stream=7, correlation=2, device=0),
        _x("aten::baz", "cpu_op", 270, 30)]
    graph, ok = _write(tmp_path, events).critical_path_analysis(0, "", None)
    assert ok
    assert _compact(graph) == [("aten::foo", 10.0, "cpu_bound"), ("", 40.0, "gpu_kernel_launch_overhead"),
                               ("kern", 200.0, "gpu_compute_bound"), ("", 0.0, ""), ("", 0.0, ""),
                               ("aten::baz", 30.0, "cpu_bound")]
    assert graph.critical_path_length() == 280
    assert graph.summary()["gpu_compute_bound"] == pytest.approx(200 / 280 * 100)


def test_partial_overlap_nests_and_keeps_negative_weight(tmp_path: Path) -> None:
    """B [5,15] starts inside A [0,10] and outlives it: the stack nests B under A, so the
    edge B.end -> A.end weighs -5. It counts 0 in the search (HTA) but keeps -5 in the table;
    C [20,30] follows A, so the path runs through A's end."""
    events = [_x("A", "cpu_op", 0, 10), _x("B", "cpu_op", 5, 10), _x("C", "cpu_op", 20, 10)]
    graph, ok = _write(tmp_path, events).critical_path_analysis(0, "", None)
    assert ok
    assert _compact(graph) == [("A", 5.0, "cpu_bound"), ("B", 10.0, "cpu_bound"), ("A", -5.0, "cpu_bound"),
                               ("", 0.0, ""), ("C", 10.0, "cpu_bound")]
    assert graph.critical_path_length() == 25
    assert graph.summary().to_dict() == {"": 0.0, "cpu_bound": 100.0}


def test_data_load_events(tmp_path: Path) -> None:
    graph, ok = _write(tmp_path, _launch_trace()).critical_path_analysis(0, "", None, data_load_events=["foo$"])
    assert ok
    assert graph.summary().to_dict() == {"data_loading": 4.0, "gpu_compute_bound": 80.0,
                                         "gpu_kernel_launch_overhead": 16.0}


def test_region_arguments(tmp_path: Path) -> None:
    a = _write(tmp_path, _launch_trace())
    assert a.critical_path_analysis(0, "no such annotation", 0) is None
    assert a.critical_path_analysis(0, "aten::foo", "first") is None  # unexpected instance type
    graph, ok = a.critical_path_analysis(0, "aten::foo", 0)  # window [0, 100]: aten::bar is out
    assert ok and graph.number_of_nodes() == 6
    graph, ok = a.critical_path_analysis(0, "aten::foo", 5)  # no such instance: empty region
    assert not ok
    assert graph.get_critical_path_breakdown() is None
    assert graph.summary().empty


def test_no_graph_events(tmp_path: Path) -> None:
    """Only python functions and annotations: no nodes, no edges, no path (HTA asserts)."""
    events = [_x("f", "python_function", 0, 10), _x("ann", "user_annotation", 1, 5)]
    graph, ok = _write(tmp_path, events).critical_path_analysis(0, "", None)
    assert not ok
    assert graph.number_of_nodes() == 0 and graph.get_critical_path_breakdown() is None


def test_cpu_only_trace() -> None:
    """Deviation: HTA 0.5.0 raises TypeError (no queue-length series) on traces without GPU
    launches; we return the CPU critical path."""
    a = analyzer(DATA / "traces" / "odd_cpu_only_rank34of300_trimmed")
    frame = a.t.get_trace(34)
    graph, ok = a.critical_path_analysis(34, "", None)
    assert ok
    bd = graph.get_critical_path_breakdown()
    longest = frame[(frame["stream"] == -1) & (frame["dur"] > 0)
                    & frame["cat"].isin([a.t.symbol_table.sym_index["cpu_op"]])]["dur"].max()
    assert bd["duration"].sum() == longest
    assert graph.summary().to_dict() == {"cpu_bound": 100.0}


def test_overlay_trace(tmp_path: Path) -> None:
    events = _launch_trace()
    (tmp_path / "in").mkdir()
    a = _write(tmp_path / "in", events)
    graph, ok = a.critical_path_analysis(0, "", None)
    out = a.overlay_critical_path_analysis(0, graph, str(tmp_path / "out"))
    assert Path(out) == tmp_path / "out" / "overlaid_critical_path_rank0.json"
    data = json.loads(gzip.decompress(Path(out).read_bytes()))
    flows = [e for e in data["traceEvents"] if e.get("name") == "critical_path"]
    # only the launch edge is drawn by default; its arrow runs launch.start -> kern.start
    assert [(f["ph"], f["ts"], f["cat"], f["args"]) for f in flows] == [
        ("s", 10, "critical_path_kernel_launch_delay", {"weight": 40, "critical": True}),
        ("f", 50, "critical_path_kernel_launch_delay", {"weight": 40, "critical": True})]
    critical = [e["name"] for e in data["traceEvents"] if e["ph"] == "X" and e.get("args", {}).get("critical") == 1]
    assert critical == ["aten::foo", "cudaLaunchKernel", "kern"]  # aten::bar is dropped
    out = a.overlay_critical_path_analysis(0, graph, str(tmp_path / "all"), only_show_critical_events=False,
                                           show_all_edges=True)
    data = json.loads(gzip.decompress(Path(out).read_bytes()))
    flows = [e for e in data["traceEvents"] if e.get("name") == "critical_path"]
    assert len(flows) == 2 * graph.number_of_edges()
    assert sum(f["args"]["critical"] for f in flows) == 2 * (len(graph.critical_path_nodes) - 1)
    assert len(data["traceEvents"]) == len(events) + len(flows)
    (tmp_path / "file").write_text("x")
    assert a.overlay_critical_path_analysis(0, graph, str(tmp_path / "file")) == ""


# ---------------------------------------------------------------------------- longest path
def _brute_force(n: int, edges: list[tuple[int, int, float]]) -> float:
    best = 0.0
    succ = {u: [(v, w) for a, v, w in edges if a == u] for u in range(n)}

    def walk(u: int, length: float) -> None:
        nonlocal best
        best = max(best, length)
        for v, w in succ[u]:
            walk(v, length + w)

    for u in range(n):
        walk(u, 0.0)
    return best


def test_longest_path_matches_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 8)
        pairs = [(u, v) for u, v in itertools.combinations(range(n), 2) if rng.random() < 0.4]
        if not pairs:
            continue
        rng.shuffle(pairs)
        edges = [(u, v, float(rng.choice([0, 0, 1, 2, 5]))) for u, v in pairs]
        # number nodes by first appearance, as the graph does
        seen = list(dict.fromkeys(x for u, v, _ in edges for x in (u, v)))
        rank = {x: i for i, x in enumerate(seen)}
        src = np.array([rank[u] for u, _, _ in edges])
        dst = np.array([rank[v] for _, v, _ in edges])
        w = np.array([x for _, _, x in edges])
        path = longest_path(len(seen), src, dst, w)
        lookup = {(s, d): x for s, d, x in zip(src.tolist(), dst.tolist(), w.tolist())}
        length = sum(lookup[(u, v)] for u, v in zip(path, path[1:]))
        assert length == _brute_force(len(seen), list(zip(src.tolist(), dst.tolist(), w.tolist())))


def test_longest_path_ties_follow_networkx() -> None:
    # 0->1, 0->2 (5 each), 1->3, 2->3 (0 each): node 3 keeps its first predecessor (1), and the
    # path ends at the first node of largest distance in topological order (1, not 3).
    path = longest_path(4, np.array([0, 0, 1, 2]), np.array([1, 2, 3, 3]), np.array([5.0, 5.0, 0.0, 0.0]))
    assert path == [0, 1]
    # all-zero weights: networkx returns the first node alone
    assert longest_path(2, np.array([0]), np.array([1]), np.array([0.0])) == [0]
    with pytest.raises(GraphCycleError):
        longest_path(2, np.array([0, 1]), np.array([1, 0]), np.array([1.0, 1.0]))
