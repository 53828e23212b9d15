"""An improvement must not fail: on real H100 recordings, DataLoader workers 0 -> 4 makes the
step faster while GPU idle grows inside the (shorter) GPU window — the data wait moves from
before the step's first kernel to between kernels. The idle checks then warn, naming the faster
step; the regression the other way still fails on step time."""

from __future__ import annotations

from pathlib import Path

from perfreport.config import Config
from perfreport.pipeline import compare

RECORDED = Path(__file__).resolve().parent / "data" / "recorded"


def _check(result, check_id: str) -> dict:
    return next(c for c in result.verdict.checks if c.id == check_id)


def test_faster_step_turns_idle_failures_into_warnings():
    improved = compare(RECORDED / "workers0" / "run2", RECORDED / "repeat_base" / "run2", config=Config(), workers=1)
    step = _check(improved, "relative.step_time")
    assert step.candidate_value < 0.8 * step.baseline_value  # 33.9 -> 21.8 ms: a real improvement
    idle_pct = _check(improved, "relative.idle_pct")
    assert idle_pct.delta > 5.0 and idle_pct.status == "warn"  # beyond +5 points, but the step got faster
    assert "the step got faster" in idle_pct.message
    assert improved.verdict.status == "warn"
    regressed = compare(RECORDED / "repeat_base" / "run2", RECORDED / "workers0" / "run2", config=Config(), workers=1)
    assert _check(regressed, "relative.step_time").status == "fail" and regressed.verdict.status == "fail"
    assert "the step got faster" not in _check(regressed, "relative.idle_pct").message
