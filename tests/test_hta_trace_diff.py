"""perfreport.hta.trace_diff against HTA 0.5.0's TraceDiff outputs (oracle CSVs), plus its
argument handling, the documented deviations, and the plots."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.hta.trace import HtaTrace
from perfreport.hta.trace_diff import DeviceType, LabeledTrace, ParsedTrace, TraceDiff, shorten_name

from .conftest import ORACLE, SHARED_ORACLE, SHARED_TRACES, TRACES

TINY = "pair_hta_trace_compare_tiny"
BERT = "pair_tracelens_h100_vs_mi300x_bert_small"


def _lt(trace_dir: Path, label: str) -> LabeledTrace:
    return LabeledTrace(label=label, trace_dir=str(trace_dir))


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False)


def _kwargs(table: str, ci: list[int], ti: list[int]) -> dict:
    """The call that produced an oracle compare_traces table (see the oracle README)."""
    if table == "compare_traces__first_iteration":
        return {}
    kw = dict(control_iteration=ci, test_iteration=ti)
    if table.endswith("__gpu"):
        kw["device_type"] = DeviceType.GPU
    elif table.endswith("__cpu"):
        kw["device_type"] = DeviceType.CPU
    elif table.endswith("__short_name"):
        kw["use_short_name"] = True
    elif m := re.fullmatch(r"compare_traces__iteration_pair\d+_(\d+)_vs_(\d+)", table):
        kw = dict(control_iteration=int(m.group(1)), test_iteration=int(m.group(2)))
    return kw


def _assert_table(ours: pd.DataFrame, oracle: pd.DataFrame, key: list[str]) -> None:
    """Same keys and columns; counts exact; µs within rel 1e-3 or abs 1."""
    ours = ours.reset_index() if ours.index.name else ours.reset_index(drop=True)
    assert list(ours.columns) == list(oracle.columns)
    ours = ours.astype({k: str for k in key}).set_index(key).sort_index()
    oracle = oracle.astype({k: str for k in key}).set_index(key).sort_index()
    assert ours.index.equals(oracle.index), set(ours.index) ^ set(oracle.index)
    for col in oracle.columns:
        if col in ("cat_id", "name_id"):  # HTA's ids depend on string hashing
            continue
        o, h = ours[col], oracle[col]
        if not (pd.api.types.is_numeric_dtype(o) and pd.api.types.is_numeric_dtype(h)):
            assert (o.astype(str) == h.astype(str)).all(), col
        elif col.endswith("counts"):
            assert (o.to_numpy(dtype=float) == h.to_numpy(dtype=float)).all(), col
        else:
            want, got = h.to_numpy(dtype=float), o.to_numpy(dtype=float)
            assert (np.abs(got - want) <= np.maximum(1.0, 1e-3 * np.abs(want))).all(), col


def _check_pair(oracle_dir: Path, control: LabeledTrace, test: LabeledTrace) -> int:
    results = json.loads((oracle_dir / "results.json").read_text())
    ci, ti = results["control_iterations"], results["test_iterations"]
    assert control.iterations() == ci and test.iterations() == ti
    assert control.ranks() == results["control_ranks"] and test.ranks() == results["test_ranks"]
    checked = 0
    for csv in sorted(oracle_dir.glob("compare_traces__*.csv")):
        ours = TraceDiff.compare_traces(control, test, **_kwargs(csv.stem, ci, ti))
        key = ["short_name"] if csv.stem.endswith("short_name") else ["name"]
        _assert_table(ours, _read(csv), key)
        checked += 1
    for lt, its in ((control, ci), (test, ti)):
        ours = lt.get_ops_summary(lt.extract_ops(iteration=its))
        _assert_table(ours, _read(oracle_dir / f"ops_summary__{lt.label}__all_iterations.csv"), ["cat", "name"])
        checked += 1
    for name, kw in (("ops_diff__first_iteration", {}),
                     ("ops_diff__all_iterations", dict(control_iteration=ci, test_iteration=ti))):
        got = TraceDiff.ops_diff(control, test, **kw)
        assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in results[name].items()}
        checked += 1
    return checked


def test_tiny_pair_matches_oracle() -> None:
    control = _lt(TRACES / TINY / "base", "control")
    test = _lt(TRACES / TINY / "test", "test")
    assert _check_pair(ORACLE / TINY / "diff", control, test) == 11
    # the reference values of the spec: rank 1, iteration 1010, CPU, short names
    df = TraceDiff.compare_traces(control, test, 1, 1, 1010, 1010, DeviceType.CPU, use_short_name=True)
    assert df["counts_change_categories"].value_counts().to_dict() == {"=": 5, "+": 3, "-": 1}
    ops = TraceDiff.ops_diff(control, test, 1, 1, 1010, 1010, DeviceType.CPU)
    assert ops["added"] == ["AddmmBackward0", "All2All_Pooled_Req", "CatBackward0"]
    assert ops["deleted"] == ["nccl:all_reduce"]


def _hta_rounded_dur(trace_dir: Path, index: np.ndarray) -> np.ndarray:
    """HTA's ns rounding of the raw events at ``index``, unclamped: floor(ts + dur) - ceil(ts)."""
    (path,) = trace_dir.glob("*.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return np.array([math.floor(events[i]["ts"] + events[i]["dur"]) - math.ceil(events[i]["ts"]) for i in index])


def test_bert_pair_matches_oracle_except_clamped_durations() -> None:
    """HTA lets ns rounding give dur = -1 for sub-µs events straddling a µs boundary; we
    give 0. Every duration difference from the oracle must be exactly those -1s."""
    control = _lt(TRACES / BERT / "h100", "control")
    test = _lt(TRACES / BERT / "mi300x", "test")
    oracle_dir = ORACLE / BERT / "diff"
    n_negative = 0
    for lt, side in ((control, "h100"), (test, "mi300x")):
        ops = lt.extract_ops(iteration=lt.iterations())
        assert (ops["dur"] >= 0).all()
        hta_dur = _hta_rounded_dur(TRACES / BERT / side, ops["index"].to_numpy())
        n_negative += int((hta_dur < 0).sum())
        assert set(hta_dur[hta_dur < 0]) <= {-1}
        shift = pd.Series(ops["dur"].to_numpy() - hta_dur, index=ops["name"]).groupby(level=0).sum()
        names = pd.Series(lt.t.symbol_table.sym_table)
        shift.index = names[shift.index].to_numpy()

        ours = lt.get_ops_summary(ops)
        oracle = _read(oracle_dir / f"ops_summary__{lt.label}__all_iterations.csv")
        merged = ours.merge(oracle, on=["cat", "name"], suffixes=("", "_hta"))
        assert len(merged) == len(ours) == len(oracle)
        assert (merged["counts"] == merged["counts_hta"]).all()
        expected = merged["total_duration_hta"] + merged["name"].map(shift).fillna(0)
        assert np.allclose(merged["total_duration"], expected)
    assert n_negative == 1373  # the deviation is exercised
    # counts of every compare_traces table are exact
    results = json.loads((oracle_dir / "results.json").read_text())
    ci, ti = results["control_iterations"], results["test_iterations"]
    for csv in sorted(oracle_dir.glob("compare_traces__*.csv")):
        ours = TraceDiff.compare_traces(control, test, **_kwargs(csv.stem, ci, ti))
        oracle = _read(csv).set_index(ours.index.name)
        oracle.index = oracle.index.astype(str)
        assert set(ours.index) == set(oracle.index)
        for col in ("control_counts", "test_counts", "diff_counts"):
            assert (ours[col] == oracle.loc[ours.index, col].to_numpy()).all()
    got = TraceDiff.ops_diff(control, test)
    assert {k: sorted(v) for k, v in got.items()} == results["ops_diff__first_iteration"]


@pytest.mark.parametrize("pair,control,test", [
    ("pair_hta_trace_diff", "control", "test"),
    ("pair_kineto_resnet50_v100_dataloader", "workers4", "workers0"),
])
def test_shared_pairs_match_oracle(pair: str, control: str, test: str) -> None:
    if not (SHARED_TRACES / pair).exists() or not (SHARED_ORACLE / pair / "diff").exists():
        pytest.skip(f"{pair} is only in the shared trace collection, which is not next to the repo")
    c, t = _lt(SHARED_TRACES / pair / control, "control"), _lt(SHARED_TRACES / pair / test, "test")
    assert _check_pair(SHARED_ORACLE / pair / "diff", c, t) >= 15
    if pair == "pair_hta_trace_diff":  # the spec's reference: rank 3 vs rank 1, iteration 1009, GPU
        ops = TraceDiff.ops_diff(c, t, 3, 1, 1009, 1009, DeviceType.GPU)
        assert {k: len(v) for k, v in ops.items()} == dict(added=27, deleted=66, increased=15, decreased=9,
                                                           unchanged=84)
        assert len(TraceDiff.compare_traces(c, t, 3, 1, 1009, 1009)) == 432


def test_trace_dirs_as_strings_get_default_labels() -> None:
    df = TraceDiff.compare_traces(str(TRACES / TINY / "base"), str(TRACES / TINY / "test"))
    assert list(df.columns) == ["Control_counts", "Control_total_duration", "Test_counts", "Test_total_duration",
                                "diff_counts", "diff_duration", "counts_change_categories"]
    assert df.index.name == "name" and len(df) == 7
    ops = TraceDiff.ops_diff(str(TRACES / TINY / "base"), str(TRACES / TINY / "base"))
    assert ops["added"] == ops["deleted"] == [] and len(ops["unchanged"]) == 7


def test_identical_labels_name_test_columns_without_renaming_the_trace() -> None:
    lt = _lt(TRACES / TINY / "base", "run")
    df = TraceDiff.compare_traces(lt, lt)
    assert list(df.columns[:4]) == ["run_counts", "run_total_duration", "run_control_test_counts",
                                    "run_control_test_total_duration"]
    assert lt.label == "run"  # HTA renames the test LabeledTrace in place; we do not
    assert (df["diff_counts"] == 0).all() and (df["counts_change_categories"] == "=").all()
    assert TraceDiff.ops_diff(lt, lt)["unchanged"] == sorted(df.index)


def test_labeled_trace_from_trace_objects_is_unfiltered() -> None:
    """A TraceAnalysis-style Trace (aligned, last step dropped) gives the same unfiltered
    frames as the trace dir; HTA re-parses it the same way."""
    trace_dir = TRACES / "hta_a100_nccl_rank0of2"
    aligned = HtaTrace(trace_dir=str(trace_dir))
    assert aligned.get_iterations() == [4, 5]
    from_dir = _lt(trace_dir, "a")
    for t in (aligned, aligned.traceset, ParsedTrace(aligned.traceset)):
        lt = LabeledTrace(label="b", t=t)
        assert lt.iterations() == from_dir.iterations() == [4, 5, 6]
        assert lt.ranks() == [0]
        pd.testing.assert_frame_equal(lt.t.get_trace(0), from_dir.t.get_trace(0))
    frame = from_dir.t.get_trace(0)
    (path,) = trace_dir.glob("*.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kept = [e for e in events if "dur" in e and "cat" in e and e["cat"] != "Trace"]
    assert len(frame) == len(kept)
    assert frame["ts"].min() == math.ceil(min(e["ts"] for e in kept))  # HTA's rounding, no rebasing
    assert (frame["end"] == frame["ts"] + frame["dur"]).all()
    assert list(from_dir.iteration_df.columns) == ["symbol", "id", "iteration"]
    assert sorted(from_dir.iteration_df["symbol"]) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]


def test_extract_ops_arguments_and_errors() -> None:
    lt = _lt(TRACES / "hta_sampled_2of128rank", "s")
    assert lt.ranks() == [0, 1]
    its = lt.iterations()
    both = lt.extract_ops(rank=[1, 0], iteration=its)
    one = [lt.extract_ops(rank=r, iteration=its) for r in (0, 1)]
    assert len(both) == len(one[0]) + len(one[1])
    # each block carries its own rank number (HTA labels them by the first ranks of the trace)
    assert both["rank"].tolist() == [1] * len(one[1]) + [0] * len(one[0])
    assert (lt.extract_ops(device_type=DeviceType.CPU)["stream"] == -1).all()
    assert (lt.extract_ops(device_type=DeviceType.GPU)["stream"] != -1).all()
    first = lt.extract_ops()
    assert set(first["iteration"]) == {its[0]} and len(first) == len(lt.extract_ops(0, its[0]))
    with pytest.raises(ValueError, match="rank=5"):
        lt.extract_ops(rank=5)
    with pytest.raises(ValueError, match="iteration=99999"):
        lt.extract_ops(iteration=[its[0], 99999])
    with pytest.raises(ValueError, match="Invalid type"):
        lt.extract_ops(rank="0")
    with pytest.raises(ValueError, match="valid trace dir"):
        LabeledTrace(label="x", trace_dir=str(TRACES / "no_such_dir"))
    with pytest.raises(ValueError, match="Invalid argument type"):
        TraceDiff.compare_traces(42, lt)
    no_steps = _lt(TRACES / "odd_tiny_old_format_rank1", "o")
    assert no_steps.iterations() == [] and no_steps.ranks() == [1]
    with pytest.raises(ValueError, match="doesn't have any iteration"):
        no_steps.extract_ops()


def test_shorten_name_matches_hta() -> None:
    assert shorten_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<int>, "
                        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<int>)") == \
        "at::native::vectorized_elementwise_kernel"
    assert shorten_name("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD (Pinned -> Device)"
    assert shorten_name("nn.Module: Linear_0") == "nn.Module: Linear_0"  # no brackets: unchanged
    assert shorten_name("torch/_VF.py(27): __getattr__") == "__getattr__"
    assert shorten_name("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") == \
        "enumerate#_SingleProcessDataLoaderIter.__next__"
    assert shorten_name("x(a>b)c") == "c"  # an unmatched ">" pops back to the start, as in HTA
    assert shorten_name("f<a(b>c)d") == "d"


def test_visualize_exports_png_and_svg(tmp_path: Path) -> None:
    df = TraceDiff.compare_traces(_lt(TRACES / TINY / "base", "c"), _lt(TRACES / TINY / "test", "t"),
                                  control_iteration=[1009, 1010], test_iteration=[1009, 1010])
    png, svg = tmp_path / "counts.png", tmp_path / "dur.svg"
    assert TraceDiff.visualize_counts_diff(df, show_image=True, export_image_path=str(png)) is None
    TraceDiff.visualize_duration_diff(df, show_image=False, export_image_path=str(svg))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert "<svg" in text and "Ops Duration Comparison" in text and "AddmmBackward0" in text
    with pytest.raises(ValueError):
        TraceDiff.visualize_counts_diff(df[["diff_counts"]])
