"""benchmarks/trace_edit.py, the trace edits the gate's calibration relies on: each edit must
show up through perfreport's own loader as exactly the change it claims, and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfreport.analyses.step_metrics import step_metrics
from perfreport.load import load
from tests.conftest import DATA

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trace_edit import add_per_step, cpu_steps, keep_steps, read_trace, scale_kernels, write_trace  # noqa: E402

SOURCE = DATA / "recorded" / "repeat_base" / "run1" / "rank0.pt.trace.json.gz"


def metrics_of(doc: dict, tmp_path: Path, name: str):
    path = write_trace(doc, tmp_path / name / "rank0.pt.trace.json.gz")
    return step_metrics(load(str(path.parent), workers=1)).set_index("step")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return metrics_of(read_trace(SOURCE), tmp_path_factory.mktemp("orig"), "orig")


def test_scale_kernels_lengthens_every_kernel_and_the_step_by_the_time_added(original, tmp_path):
    scaled = metrics_of(scale_kernels(read_trace(SOURCE), 1.2), tmp_path, "scaled")
    assert list(scaled.index) == list(original.index)
    assert (scaled["kernels"] == original["kernels"]).all()
    assert (scaled["compute_us"] / original["compute_us"]).between(1.19, 1.21).all()
    # the host waits for the added GPU time: each step grows by about the kernel time added in it
    grown = scaled["step_time_us"] - original["step_time_us"]
    assert (grown > 0.1 * original["compute_us"]).all()
    assert (grown < 0.3 * original["compute_us"] + 50).all()


def test_add_per_step_adds_one_copy_or_sync_to_every_step(original, tmp_path):
    dtoh = metrics_of(add_per_step(read_trace(SOURCE), "dtoh"), tmp_path, "dtoh")
    sync = metrics_of(add_per_step(read_trace(SOURCE), "sync"), tmp_path, "sync")
    assert (original["memcpy_dtoh_count"] == 0).all() and (original["syncs"] == 0).all()
    assert (dtoh["memcpy_dtoh_count"] == 1).all() and (dtoh["syncs"] == 0).all()
    assert (sync["syncs"] == 1).all() and (sync["memcpy_dtoh_count"] == 0).all()
    assert (dtoh["kernels"] == original["kernels"]).all()


def test_keep_steps_keeps_those_steps_whole(original, tmp_path):
    doc = read_trace(SOURCE)
    steps = [s for s, *_ in cpu_steps(doc)]
    assert steps == list(range(2, 10))
    first = metrics_of(keep_steps(doc, set(steps[:4])), tmp_path, "first")
    second = metrics_of(keep_steps(doc, set(steps[4:])), tmp_path, "second")
    # each half drops its own last step, as the gate does
    assert list(first.index) == [2, 3, 4] and list(second.index) == [6, 7, 8]
    for half in (first, second):
        assert (half["kernels"] == original.loc[half.index, "kernels"]).all()
        assert half["step_time_us"].to_numpy() == pytest.approx(original.loc[half.index, "step_time_us"].to_numpy())
