"""Facts of the H100 recordings in tests/data/recorded (see its README): what each file holds and
the effects the known changes must show. These are properties of the data as perfreport reads it,
not verdicts of the gate (benchmarks/gate_accuracy.py judges those)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfreport.analyses.step_metrics import step_metrics
from tests.conftest import DATA, load_cached

RECORDED = DATA / "recorded"
INDEX = json.loads((RECORDED / "recordings.json").read_text())
H100 = "NVIDIA H100 80GB HBM3"


def metrics(run: str):
    """Per-step metrics of one recorded run (last step dropped, as the gate does)."""
    return step_metrics(load_cached(str(RECORDED / run)))


def per_step(run: str, column: str) -> float:
    return float(metrics(run)[column].median())


def host_gap_ms(run: str) -> float:
    """Median over steps of step time minus GPU busy time (ms): the step's GPU idle time,
    including the wait before the first kernel that the in-window ``idle_us`` leaves out."""
    m = metrics(run)
    return float((m["step_time_us"] - m["gpu_busy_us"]).median() / 1000)


def test_index_matches_folders():
    folders = {p.parent.relative_to(RECORDED).as_posix() for p in RECORDED.glob("*/*/rank*.pt.trace.json.gz")}
    assert folders == set(INDEX)
    assert len(INDEX) == 23
    assert {m["gpu"] for m in INDEX.values()} == {H100}
    assert {m["torch"] for m in INDEX.values()} == {"2.11.0+cu130"}


@pytest.mark.parametrize("run", sorted(INDEX))
def test_each_run_loads_with_its_ranks_steps_and_gpu(run):
    settings = INDEX[run]["settings"]
    traces = load_cached(str(RECORDED / run))
    world = max(settings["world"], 1)
    assert sorted(t.rank for t in traces) == list(range(world))
    for t in traces:
        assert t.meta.gpu_name() == H100
        # distributedInfo is written when a process group exists, and only then
        assert (t.meta.world_size == settings["world"]) if settings["world"] else t.meta.world_size is None
    m = step_metrics(traces)
    steps_per_rank = settings["active"] - 1 if settings["active"] > 1 else 1  # the last step is dropped
    assert (m.groupby("rank").size() == steps_per_rank).all()
    assert (m["kernels"] > 150).all()


def test_repeats_do_the_same_gpu_work():
    kernels = [per_step(f"repeat_base/run{i}", "kernels") for i in range(1, 5)]
    busy = [per_step(f"repeat_base/run{i}", "gpu_busy_us") for i in range(1, 5)]
    assert 335 <= min(kernels) and max(kernels) <= 345
    assert max(busy) / min(busy) < 1.05
    gpu = [per_step(f"gpu_bound_repeat/run{i}", "step_time_us") for i in range(1, 4)]
    assert max(gpu) / min(gpu) < 1.02  # a GPU-bound job drifts by under 2 %
    host = [per_step(f"repeat_base/run{i}", "step_time_us") for i in range(1, 5)]
    assert max(host) / min(host) > 1.1  # a host-bound one by more than 10 %


def test_workers0_waits_longer_for_the_host_with_the_same_gpu_work():
    base = max(host_gap_ms(f"repeat_base/run{i}") for i in range(1, 5))
    for run in ("workers0/run1", "workers0/run2"):
        assert host_gap_ms(run) > base + 8  # ≥ 8 ms more GPU idle per step than any repeat
        assert per_step(run, "kernels") == pytest.approx(per_step("repeat_base/run1", "kernels"), abs=5)


def test_sync_and_item_add_syncs_and_copies():
    assert per_step("repeat_base/run1", "syncs") == 0
    assert per_step("sync_each_step/run1", "syncs") == 1
    assert per_step("sync_each_step/run1", "memcpy_dtoh_count") == 0
    assert per_step("loss_item_each_step/run1", "syncs") == 1
    assert per_step("loss_item_each_step/run1", "memcpy_dtoh_count") == 1


def test_gpu_side_changes_add_gpu_time():
    base = per_step("repeat_base/run1", "gpu_busy_us")
    assert per_step("no_channels_last/run1", "gpu_busy_us") > 1.3 * base
    assert per_step("fp32_no_amp/run1", "gpu_busy_us") > 1.1 * base
    gpu_base = np.median([per_step(f"gpu_bound_repeat/run{i}", "step_time_us") for i in range(1, 4)])
    assert 1.08 < per_step("gpu_bound_seq1152/run1", "step_time_us") / gpu_base < 1.16
    assert per_step("gpu_bound_tf32_no_amp/run1", "step_time_us") / gpu_base > 2


def test_two_rank_setups_communicate_through_the_host():
    # gloo on one GPU: each DDP step copies gradient buckets to the host, FSDP copies every shard
    assert per_step("setups/ddp_w2_gloo", "memcpy_dtoh_count") >= 2
    assert per_step("setups/fsdp_full_w2_gloo", "memcpy_dtoh_count") >= 20
    assert per_step("setups/single_w1", "memcpy_dtoh_count") == 0
