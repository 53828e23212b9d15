"""perfreport.hta as a drop-in for HTA: module paths, graph API, save/restore, environment
switches, figures, HTA 0.6's duration filter (HTA's own tests are in tests/hta_upstream)."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfreport.hta as hta
from perfreport.hta import TimeSeriesTypes, TraceAnalysis, _plots
from perfreport.hta.analyzers.critical_path_analysis import restore_cpgraph
from perfreport.hta.cp_types import LAUNCH

from .conftest import TRACES
from .test_steps import cpu, kernel, launch, write_trace

UPSTREAM = Path(__file__).parent / "hta_upstream" / "tests" / "data"
SIMPLE_ADD = UPSTREAM / "critical_path" / "simple_add"
ANNOTATION = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


def _graph(monkeypatch, flag: str):
    monkeypatch.setenv("CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE", flag)
    a = TraceAnalysis(trace_dir=str(SIMPLE_ADD))
    graph, ok = a.critical_path_analysis(rank=0, annotation=ANNOTATION, instance_id=1)
    assert ok
    return a, graph


def test_public_names_of_hta_modules() -> None:
    from perfreport.hta.trace_analysis import CPGraph, Trace, TraceAnalysis as TA  # noqa: F401
    from perfreport.hta.trace_diff import DeviceType, LabeledTrace, TraceDiff, TraceDir, shorten_name  # noqa: F401

    assert TimeSeriesTypes.QUEUE_LENGTH in (TimeSeriesTypes.QUEUE_LENGTH | TimeSeriesTypes.MEMCPY_BANDWIDTH)
    assert hta.common.trace.PHASE_COUNTER == "C" and hta.common.constants.MAX_EVENT_DURATION_US == 7 * 86_400e6
    assert hta.CUDA_MAX_LAUNCH_QUEUE_PER_STREAM == 1024


def test_missing_rank_names_the_ranks_present() -> None:
    a = TraceAnalysis(trace_dir=str(TRACES / "hta_sampled_2of128rank"))
    with pytest.raises(ValueError, match=r"rank 5 is not in the trace; ranks present: \[0, 1\]"):
        a.t.get_trace(5)
    with pytest.raises(ValueError, match="ranks present"):
        a.get_cuda_kernel_launch_stats(ranks=[5], visualize=False)


def test_zero_weight_launch_edges_switch(monkeypatch) -> None:
    """HTA adds 25 zero-weight launch edges on this trace with the switch on; the path is the same."""
    _, off = _graph(monkeypatch, "0")
    _, on = _graph(monkeypatch, "1")
    zero = lambda g: int(((g.arrays.etype == LAUNCH) & (g.arrays.weight == 0)).sum())  # noqa: E731
    assert (off.number_of_edges(), zero(off)) == (415, 0)
    assert (on.number_of_edges(), zero(on)) == (440, 25)
    assert len(off.critical_path_nodes) == len(on.critical_path_nodes) == 315


def test_edge_view_and_networkx(monkeypatch) -> None:
    _, g = _graph(monkeypatch, "0")
    edges = list(g.edges)
    assert len(edges) == len(g.edges) == g.number_of_edges() == len(set(edges))
    u, v = edges[0]
    assert (u, v) in g.edges and (v, u) not in g.edges
    attrs = g.edges[u, v]
    assert attrs["object"].begin == u and attrs["object"].end == v and attrs["weight"] == attrs["object"].weight
    with pytest.raises(KeyError):
        g.edges[v, u]
    assert g.edges(data=True)[0] == (u, v, attrs)
    nx = pytest.importorskip("networkx")
    G = g.to_networkx()
    assert G.number_of_edges() == g.number_of_edges() and G.edges[u, v]["object"] == attrs["object"]
    longest = nx.dag_longest_path_length(G, weight="weight")
    assert longest == pytest.approx(g.critical_path_length())


def test_save_restore_round_trip_and_refusals(monkeypatch, tmp_path: Path) -> None:
    a, g = _graph(monkeypatch, "0")
    path = g.save(out_dir=str(tmp_path / "cp"))
    assert path == str(tmp_path / "cp.zip")
    r = restore_cpgraph(path, a.t, 0)
    assert list(r.edges) == list(g.edges) and r.critical_path_nodes == g.critical_path_nodes
    assert r.critical_path_edges_set == g.critical_path_edges_set
    assert r.summary().round(6).to_dict() == g.summary().round(6).to_dict()
    assert r.critical_path() and r.critical_path_nodes == g.critical_path_nodes
    other = TraceAnalysis(trace_dir=str(UPSTREAM / "critical_path" / "cuda_event_sync"))
    with pytest.raises(ValueError, match="saved from another trace"):
        restore_cpgraph(path, other.t, 0)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a saved critical path graph"):
        restore_cpgraph(str(bad), a.t, 0)


def test_strict_negative_weight_switch(monkeypatch) -> None:
    a, g = _graph(monkeypatch, "0")
    g._weight = g._weight.copy()
    g._weight[0] = -5.0
    monkeypatch.setenv("CRITICAL_PATH_STRICT_NEGATIVE_WEIGHT_CHECKS", "1")
    with pytest.raises(ValueError, match="negative weights"):
        g.critical_path()
    monkeypatch.setenv("CRITICAL_PATH_STRICT_NEGATIVE_WEIGHT_CHECKS", "0")
    assert g.critical_path()


def test_max_event_duration_filter(tmp_path: Path) -> None:
    """HTA 0.6: events longer than max_event_duration_us are dropped as corrupted."""
    events = [cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"), cpu("aten::mm", 10, 50),
              launch(12, corr=1), kernel("gemm", 100, 200, corr=1), kernel("corrupt", 300, 5000, corr=2)]
    for e in events:
        e["ts"] += 1_700_000_000_000_000
    write_trace(tmp_path, events)
    names = lambda a: set(a.t.symbol_table.sym_table[i] for i in a.t.get_trace(0)["name"])  # noqa: E731
    assert "corrupt" in names(TraceAnalysis(trace_dir=str(tmp_path)))
    assert "corrupt" not in names(TraceAnalysis(trace_dir=str(tmp_path), max_event_duration_us=1000))
    assert "gemm" in names(TraceAnalysis(trace_dir=str(tmp_path), max_event_duration_us=1000))


@pytest.mark.parametrize("backend", ["matplotlib", "plotly"])
def test_figures_in_a_script_are_written_and_announced(backend, monkeypatch, tmp_path: Path, capsys) -> None:
    if backend == "plotly":
        pytest.importorskip("plotly")
    else:
        monkeypatch.setattr(_plots, "plotly_available", lambda: False)
    monkeypatch.setenv("PERFREPORT_FIGURES_DIR", str(tmp_path))
    a = TraceAnalysis(trace_dir=str(TRACES / "hta_sampled_2of128rank"))
    _, metrics = a.get_gpu_kernel_breakdown(num_kernels=2)
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".png", ".html"))
    err = capsys.readouterr().err
    assert err.count("perfreport.hta: figure") == len(written) and all(w in err for w in written)
    kinds = metrics["kernel_type"].unique()
    assert any("Kernel_Type_Percentage_Across_All_Ranks" in w for w in written)
    assert sum("kernel_distribution_on_each_rank" in w for w in written) == len(kinds)
    named = metrics[metrics["name"] != "others"]
    bars = len(named.groupby(["kernel_type", "name"])) if backend == "plotly" else len(kinds)
    assert len(written) == 1 + len(kinds) + bars
    if backend == "plotly":  # the pages load plotly.js from their folder: viewable offline
        assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000
        assert all('src="plotly.min.js"' in (tmp_path / w).read_text() for w in written)


def test_pie_figures_carry_percentages_and_ranks(monkeypatch) -> None:
    monkeypatch.setattr(_plots, "plotly_available", lambda: False)
    shown = []
    monkeypatch.setattr(_plots, "emit", lambda fig, title, renderer=None: shown.append((title, fig)) or fig)
    a = TraceAnalysis(trace_dir=str(TRACES / "hta_sampled_2of128rank"))
    df = a.get_gpu_user_annotation_breakdown(use_gpu_annotation=False, num_kernels=3)
    title, fig = shown[0]
    assert title == "User annotation distribution on each rank"
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["Rank 0", "Rank 1"]
    part = df[df["rank"] == 0]
    share = part["sum (us)"] / part["sum (us)"].sum() * 100
    texts = [t.get_text() for t in axes[0].texts if t.get_text().endswith("%")]
    assert texts == [f"{x:.1f}%" for x in share[share > 0]]
    title, fig = shown[1]  # mean per rank with min/max error bars
    ax = fig.axes[0]
    name = ax.get_title()
    rows = df[df["name"].str.startswith(name.rstrip("…"))]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx(rows["mean (us)"].tolist())
    assert ax.get_xlabel() == "Rank" and ax.get_ylabel() == "Mean Duration (us)"


def test_plotly_renderer_is_honoured_in_a_notebook(monkeypatch) -> None:
    pytest.importorskip("plotly")
    import plotly.graph_objects as go

    calls = []
    monkeypatch.setattr(go.Figure, "show", lambda self, renderer=None: calls.append(renderer))
    monkeypatch.setattr(_plots, "in_ipython", lambda: True)
    a = TraceAnalysis(trace_dir=str(TRACES / "hta_sampled_2of128rank"))
    a.get_gpu_kernel_breakdown(num_kernels=1, image_renderer="jupyterlab")
    assert calls and set(calls) == {"jupyterlab"}


def test_every_public_name_of_hta_modules() -> None:
    """The names of HTA 0.5.0's hta.trace_analysis / hta.trace_diff namespaces."""
    import importlib

    names = {"trace_analysis": "defaultdict auto Flag Any Callable Dict List Optional Tuple Union pd "
                               "BreakdownAnalysis CommunicationAnalysis CPGraph CriticalPathAnalysis CudaKernelAnalysis "
                               "CuptiCounterAnalysis find_stragglers_with_late_start_comm_kernels StragglerAnalysis "
                               "TraceCounters CUDA_MAX_LAUNCH_QUEUE_PER_STREAM Trace logger DEFAULT_TRACE_DIR "
                               "TimeSeriesTypes TraceAnalysis",
             "trace_diff": "os random Enum Dict List Optional Union pd Trace logger flatten_column_names shorten_name "
                           "DeviceType TraceDir LabeledTrace TraceDiff"}
    for module, wanted in names.items():
        m = importlib.import_module(f"perfreport.hta.{module}")
        assert [n for n in wanted.split() if not hasattr(m, n)] == []


def test_analyzer_classes_forward_to_trace_analysis() -> None:
    from perfreport.hta.trace_analysis import (BreakdownAnalysis, StragglerAnalysis, TraceCounters,
                                               find_stragglers_with_late_start_comm_kernels)

    a = TraceAnalysis(trace_dir=str(TRACES / "hta_sampled_2of128rank"))
    assert StragglerAnalysis.get_profiler_steps(a.t) == a.get_profiler_steps()
    assert StragglerAnalysis.get_potential_stragglers(
        a.t, straggler_identification_impl=find_stragglers_with_late_start_comm_kernels) == \
        a.get_potential_stragglers()
    assert TraceCounters.get_queue_length_summary(a.t, ranks=[1]).equals(a.get_queue_length_summary(ranks=[1]))
    idle, _ = BreakdownAnalysis.get_idle_time_breakdown(a.t, 30, rank=1, visualize=False)
    assert idle.equals(a.get_idle_time_breakdown(ranks=[1], visualize=False)[0])


def test_collectives_matched_by_seq_num_on_the_hta_api(tmp_path: Path) -> None:
    from .test_collectives import seq_rank_events

    root = tmp_path / "job"
    write_trace(root, seq_rank_events(0.0, [5, 6], [200.0, 700.0]), rank=0, world=2)
    write_trace(root, seq_rank_events(0.0, [6], [710.0]), rank=1, world=2)
    a = TraceAnalysis(trace_dir=str(root))
    assert a.get_collectives()["seq"].tolist() == [5, 6, 6]
    skew = a.get_collective_skew()
    assert skew[["call_index", "skew_us", "matched_by"]].values.tolist() == [[6, 10.0, "seq"]]
