"""The report's time series against the raw events: a downsampled steps-post line is non-zero
for the time the raw data is (within 1 %), draws no plateau, and keeps its peak in its band;
one-step jobs get no per-step line plot; every line plot names its lines; no empty plot."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.queue import queue_length_series
from perfreport.analyses.series import MAX_POINTS, _per_bucket, steps_downsample, time_series
from perfreport.documents.jsondoc import json_text
from perfreport.pipeline import run_jobs, summary_document, trace_jobs
from perfreport.report import build_report
from perfreport.report.blocks import has_data
from perfreport.report.html import render_html
from perfreport.report.model import LineFigure

from .conftest import DATA, brute_union_length, load_cached

RECORDED = DATA / "recorded"
JOBS = [RECORDED / "setups" / "ddp_w2_gloo", RECORDED / "setups" / "fsdp_full_w2_gloo",
        Path(__file__).resolve().parents[1] / "examples" / "resnet50-workers0"]


def busy_ms(x, y) -> float:
    """Time a steps-post line (value holds until the next point) is non-zero."""
    x = np.asarray(x, dtype=np.float64)
    y = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
    on = np.isfinite(y[:-1]) & (y[:-1] != 0)
    return float(np.diff(x)[on].sum())


def raw_copies(job: Path) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """(rank, direction) -> [(start µs, end µs)] of the memcpy/memset events with a bandwidth
    (bytes and a duration), read straight from the rank files."""
    out: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for path in sorted(job.glob("*.json*")):
        with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
            doc = json.load(f)
        rank = int((doc.get("distributedInfo") or {}).get("rank", 0))
        for e in doc["traceEvents"]:
            cat = str(e.get("cat", "")).lower()
            if e.get("ph") != "X" or cat not in ("gpu_memcpy", "gpu_memset", "memcpy", "memset"):
                continue
            if not e.get("dur") or not (e.get("args") or {}).get("bytes"):
                continue
            m = re.match(r"Memcpy ([A-Za-z]to[A-Za-z])\b", e["name"])
            direction = "Memset" if cat.endswith("memset") else f"Memcpy {m.group(1)}" if m else "Memcpy"
            out.setdefault((rank, direction), []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return out


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_copy_bandwidth_is_non_zero_as_long_as_the_copies_ran(job) -> None:
    lines = time_series(load_cached(str(job)))["memory_bw"]["lines"]
    raw = raw_copies(job)
    merged = 0
    for line in lines:
        spans = raw[(line["rank"], line["label"])]
        expected = brute_union_length(*zip(*spans)) / 1e3
        assert busy_ms(line["x"], line["y"]) == pytest.approx(expected, rel=0.01), (line["rank"], line["label"])
        assert len(line["x"]) <= MAX_POINTS
        merged += "band" in line
    assert merged or job.name == "fsdp_full_w2_gloo"  # the DtoD/Memset lines of 1,220 and 624 points are merged


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_queue_length_keeps_its_busy_time_area_and_peak(job) -> None:
    traces = load_cached(str(job))
    lines = time_series(traces)["queue_length"]["lines"]
    raw = queue_length_series(traces)
    for line in lines:
        g = raw[(raw["rank"] == line["rank"]) & (raw["stream"].astype(str) == line["label"].removeprefix("stream "))]
        x, y = g["ts_us"].to_numpy() / 1e3, g["queue_length"].to_numpy(dtype=np.float64)
        assert busy_ms(line["x"], line["y"]) == pytest.approx(busy_ms(x, y), rel=0.01)
        area = float(np.sum(np.diff(x) * y[:-1]))
        lx, ly = np.asarray(line["x"]), np.array([0 if v is None else v for v in line["y"]], dtype=float)
        assert float(np.sum(np.diff(lx) * ly[:-1])) == pytest.approx(area, rel=0.01)
        peak = max([v for v in [*line["y"], *(line.get("band") or {}).get("hi", [])] if v is not None])
        assert peak == y.max()


def test_a_burst_of_pulses_is_no_plateau() -> None:
    # 2,000 copies of 1 µs at 322 GB/s, one every 100 µs: busy 2 ms of 200 ms
    starts = np.arange(2000) * 100.0
    x = np.ravel(np.column_stack([starts, starts + 1.0]))
    y = np.ravel(np.column_stack([np.full(2000, 322.0), np.zeros(2000)]))
    xs, ys, band = steps_downsample(x, y, 500)
    assert len(xs) <= 500 and busy_ms(xs, ys) == pytest.approx(2000.0, rel=1e-9)
    assert float(np.sum(np.diff(xs) * ys[:-1])) == pytest.approx(322.0 * 2000, rel=1e-9)
    assert np.nanmax(band["hi"]) == 322.0 and np.nanmin(band["lo"]) == 0.0
    assert ys.max() == 322.0  # each merged bucket's busy mean: every copy ran at 322 GB/s
    # the longest time the line holds a non-zero value is one bucket's busy time, not a bucket
    widths = np.diff(xs)[ys[:-1] != 0]
    assert widths.max() <= 2000.0 / (len(band["hi"]) - 1) * 1.5
    # a sparse line keeps every point
    same = steps_downsample(x[:400], y[:400], 500)
    assert same[0].tolist() == x[:400].tolist() and same[2] is None


@pytest.fixture(scope="module")
def one_step_report():
    analysis = run_jobs(trace_jobs(RECORDED / "short_multirank" / "ddp_w2_gloo_1step_run1"), "one step", workers=1)
    return build_report(json.loads(json_text(summary_document(analysis))))


def test_one_step_jobs_get_no_per_step_line_plot(one_step_report) -> None:
    steps = {r["rank"]: r["steps"] for r in one_step_report.document["summary"]}
    assert steps == {0: 1, 1: 1}
    figures = [*one_step_report.overview, *(f for s in one_step_report.sections for f in s.figures)]
    assert figures and not [f.id for f in figures if isinstance(f, LineFigure) and f.x_unit == "step"]


def test_every_line_plot_has_a_legend_and_no_plot_is_empty(one_step_report) -> None:
    analysis = run_jobs(trace_jobs(RECORDED / "setups" / "ddp_w2_gloo"), "ddp", workers=1)
    report = build_report(json.loads(json_text(summary_document(analysis))))
    for r in (report, one_step_report):
        figures = [*r.overview, *(f for s in r.sections for f in s.figures)]
        assert all(has_data(f) for f in figures)
        html = render_html(r)
        for f in figures:
            if isinstance(f, LineFigure) and sum(len(p.lines) for p in f.panels) > 1:
                svg = re.search(rf'<figure id="fig-{f.id}">(.*?)</figure>', html, re.S).group(1)
                assert 'id="fig-' + f.id + '-legend_1"' in svg, f.id
    queue = next(f for s in report.sections for f in s.figures if f.id == "queue_length")
    assert sum(len(p.lines) for p in queue.panels) > 16  # two columns, still every line named


@pytest.mark.parametrize("seed", range(4))
def test_per_bucket_reductions_equal_ufunc_at(seed):
    """A bucket's lowest and highest value and its first busy start, as the pulse line reads
    them: one reduceat over each run of ascending buckets gives what ``ufunc.at`` gives,
    empty buckets and no values at all included, and a zero as +0.0 whatever the signs of the
    zeros it is the minimum or maximum of (the sign numpy gives such a zero depends on the
    machine's SIMD loop: a report must not)."""
    rng = np.random.default_rng(seed)
    n, buckets = int(rng.integers(0, 2000)), int(rng.integers(1, 50))
    bucket = np.sort(rng.integers(0, buckets, n))
    values = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, 7.25, 1e300]), n)
    for ufunc, empty in ((np.minimum, np.inf), (np.maximum, -np.inf)):
        want = np.full(buckets, empty)
        ufunc.at(want, bucket, values)
        got = _per_bucket(ufunc, bucket, values, buckets, empty)
        assert np.array_equal(got, want) and not np.signbit(got[got == 0]).any()
