"""Grouped findings (perfreport.report.findings): one row per finding across ranks, on the demo
comparison and on a synthetic 8-rank check list built with the gate's own check records."""

from __future__ import annotations

import functools
import gzip
import json

import numpy as np
import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.gate.checks import Evidence, Threshold, make_check
from perfreport.gate.metrics import METRICS, Metric
from perfreport.report.findings import FindingGroup, group_findings, ranks_text
from perfreport.report.json_report import check_record

from .conftest import shared_trace


@functools.lru_cache(maxsize=None)
def demo_document() -> dict:
    from perfreport.pipeline import compare, report_document

    pair = shared_trace("pair_kineto_resnet50_v100_dataloader")
    return json.loads(json_text(report_document(compare(pair / "workers4", pair / "workers0", workers=1))))


def count_check(name: str, column: str, rank: int, b: float, c: float, status: str, subject: str | None) -> dict:
    return check_record(make_check(
        family="structural", name=name, metric=METRICS[column], subject=subject, rank=rank, aggregation="each",
        level="fail", status=status, threshold=Threshold("max_change", 0.0), b=np.full(4, b), c=np.full(4, c),
        evidence=Evidence("median count per step", 4, 4), message=f"{column} per step {b:g} → {c:g}"))


def kernel_time_check(rank: int, b_us: float, c_us: float, status: str) -> dict:
    return check_record(make_check(
        family="relative", name="kernel_time", metric=METRICS["dur_us"], subject="volta_sgemm_128x64_nn", rank=rank,
        aggregation="each", level="warn", status=status, threshold=Threshold("max_increase_pct", 10.0),
        b=np.full(5, b_us), c=np.full(5, c_us), evidence=Evidence("mann-whitney-u", 5, 5, p_value=0.008),
        message="kernel time"))


def synthetic_8_rank_checks() -> list[dict]:
    """A new D2H copy on ranks 0-7 (counted per rank: copies 2 -> 3, D2H 0 -> 1, the copy kind
    added), rank 7 also copying twice; a kernel slower on every rank by 12-19 %; counts passing."""
    added = Metric("count", "kernels", "count", "higher")
    out = []
    for r in range(8):
        out.append(count_check("memcpy", "memcpy_count", r, 2, 3 if r < 7 else 4, "fail", "memcpy_count"))
        out.append(count_check("memcpy", "memcpy_dtoh_count", r, 0, 1, "fail", "memcpy_dtoh_count"))
        out.append(check_record(make_check(
            family="structural", name="memcpy", metric=added, subject="added: Memcpy DtoH (Device -> Pageable)",
            rank=r, aggregation="each", level="fail", status="fail", threshold=Threshold("max_change", 0.0),
            b=np.zeros(4), c=np.ones(4), evidence=Evidence("median count per step", 4, 4), message="added")))
        out.append(kernel_time_check(r, 1000.0, 1120.0 + 10 * r, "warn"))
        out.append(count_check("syncs", "syncs", r, 2, 2, "pass", None))
    return out


def test_ranks_text_ranges_lists_and_single_ranks() -> None:
    assert ranks_text(range(8)) == "ranks 0–7"
    assert ranks_text([5, 0, 2]) == "ranks 0, 2, 5"
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([]) == ""
    assert ranks_text([0, 1, 2, 3, 6]) == "ranks 0–3, 6"
    assert ranks_text(list(range(0, 40, 2)), max_parts=3) == "ranks 0, 2, 4 and 17 more"


def test_eight_ranks_become_one_row_per_finding() -> None:
    checks = synthetic_8_rank_checks()
    groups = group_findings(checks)
    assert sum(len(g.checks) for g in groups) == len(checks) == 40
    assert [g.status for g in groups] == ["fail", "fail", "fail", "fail", "warn", "pass"]
    by_summary = {g.summary: g for g in groups}
    dtoh = by_summary["device-to-host copies per step 0 → 1 on ranks 0–7"]
    assert dtoh.ranks == tuple(range(8)) and dtoh.ranks_text == "ranks 0–7" and len(dtoh.check_ids) == 8
    assert dtoh.check_ids[0] == "structural.memcpy[memcpy_dtoh_count]@rank0"
    # the same count with another change stays its own finding
    assert "memory copies per step 2 → 3 on ranks 0–6" in by_summary
    assert "memory copies per step 2 → 4 on rank 7" in by_summary
    added = next(g for g in groups if g.subject == "added: Memcpy DtoH (Device -> Pageable)")
    assert added.title == "copy kind added: Memcpy DtoH (Device -> Pageable)" and added.ranks_text == "ranks 0–7"
    kernel = next(g for g in groups if g.name == "kernel_time")
    assert kernel.status == "warn" and kernel.ranks == tuple(range(8))
    assert kernel.summary == ("kernel time [volta_sgemm_128x64_nn] +12.0 % to +19.0 % (1.00 → 1.12–1.19 ms/step) "
                              "on ranks 0–7")
    assert groups[-1].summary == "synchronisations per step 2 → 2 on ranks 0–7"
    # deterministic: any input order gives the same groups
    again = group_findings(list(reversed(checks)))
    assert [g.summary for g in again] == [g.summary for g in groups]
    assert [sorted(g.check_ids) for g in again] == [sorted(g.check_ids) for g in groups]


def test_added_kernels_fold_into_one_finding_per_rank_set() -> None:
    added = Metric("count", "kernels", "count", "higher")
    checks = []
    for r in range(8):
        for name, calls in (("gemm_a", 1), ("gemm_b", 3)):
            checks.append(check_record(make_check(
                family="structural", name="kernels", metric=added, subject=f"added: {name}", rank=r,
                aggregation="each", level="warn", status="warn", threshold=Threshold("max_change", 0.0),
                b=np.zeros(3), c=np.full(3, float(calls)), evidence=Evidence("median count per step", 3, 3),
                message="added")))
    [group] = group_findings(checks)
    assert group.title == "kernels added" and group.subject == "added" and len(group.checks) == 16
    assert group.summary == "2 kernels added on ranks 0–7: gemm_b (3/step), gemm_a (1/step)"


def test_demo_findings_with_real_numbers() -> None:
    doc = demo_document()
    groups = group_findings(doc["checks"])
    assert all(isinstance(g, FindingGroup) for g in groups)
    assert sum(len(g.checks) for g in groups) == len(doc["checks"])
    first = groups[0]
    step = next(c for c in doc["checks"] if c["id"] == "relative.step_time")
    assert first.name == "step_time" and first.status == step["status"] == "fail" and first.ranks == ()
    assert first.summary == (f"step time {step['delta_pct']:+.1f} % ({step['baseline_value'] / 1e3:.2f} → "
                             f"{step['candidate_value'] / 1e3:.2f} ms/step, p = {step['evidence']['p_value']:.2g})")
    assert first.summary.startswith("step time +39.4 % (126.55 → 176.47 ms/step")
    # cuDNN's other convolution kernels (volta_scudnn_128x128_stridedB_interior_nn_v1 3/step, ...) with
    # their GPU time unchanged: a note and a passing timing check of the family, no "kernels added" finding
    assert not any(g.title in ("kernels added", "kernels removed") for g in groups)
    family = next(c for c in doc["checks"] if c["id"] == "relative.kernel_time[cuDNN convolution]")
    assert family["status"] == "pass" and abs(family["delta_pct"]) < 10
    assert "and 4 more instead of volta_scudnn_128x32_sliced1x4_ldg4_relu_exp_small_nhwc_tn_v1" in family["message"]
    note = next(n["message"] for n in doc["notes"] if n["kind"] == "kernels")
    assert note.startswith("cuDNN picked other convolution kernels: no time change (")
    assert f"{family['delta_pct']:+.1f} %" in note
    # every timing check says what it could have detected
    assert step["evidence"]["min_detectable_pct"] >= 5.0 and step["evidence"]["min_detectable_text"].startswith("+")
    statuses = [g.status for g in groups]
    assert statuses == sorted(statuses, key=["fail", "warn", "inconclusive", "pass"].index)
    assert statuses.count("fail") == 1 and statuses.count("warn") == 0


# --- the analyze report: headline and suggestions from the numbers -------------------------------------
def test_analysis_headline_and_suggestions_point_at_evidence() -> None:
    from perfreport.pipeline import analyze, summary_document
    from perfreport.report import build_report

    doc = json.loads(json_text(summary_document(analyze(shared_trace("pair_kineto_resnet50_v100_dataloader")
                                                        / "workers0", workers=1))))
    report = build_report(doc)
    temporal = doc["temporal_breakdown"][0]
    # the step time of the steps the diagnosis judged (the last, cut-short one left out): one value
    (path,) = (shared_trace("pair_kineto_resnet50_v100_dataloader") / "workers0").glob("*.json.gz")
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    judged = [e["dur"] for e in sorted((e for e in raw if str(e.get("name", "")).startswith("ProfilerStep#")
                                        and e.get("cat") != "gpu_user_annotation"),
                                       key=lambda e: int(e["name"].split("#")[1]))][:-1]
    assert doc["diagnosis"]["step_us_median"] == pytest.approx(float(np.median(judged)), rel=1e-9)
    assert report.headline.text.startswith(f"step time {np.median(judged) / 1e3:.2f} ms (median of the "
                                           f"{len(judged)} judged steps), GPU idle {temporal['idle_pct']:.1f} % of its "
                                           f"span on rank 0; most of the step: ")
    # the causes and suggestions are the document's diagnosis, in its order (the time at stake)
    where = doc["diagnosis"]["where_the_time_goes"]
    assert [c.delta_us for c in report.headline.causes] == [c["us_per_step"] for c in where]
    assert report.headline.share_of == "the step" and report.headline.per_step
    # the DataLoader run: compute first, then the GPU waiting for the input pipeline
    texts = [s.text for s in report.suggestions]
    assert texts[0].startswith("Compute kernels hold the step") and report.suggestions[0].section == "kernels"
    assert texts[1].startswith("The GPU waits for the input pipeline") and report.suggestions[1].section == "idle"
    assert "__next__" in report.suggestions[1].evidence
    assert not any(s.section == "collectives" for s in report.suggestions)  # one GPU: no communication
    assert [f.id for f in report.overview] == ["step_time_overview", "temporal_overview"]


def test_a_time_from_zero_is_written_as_a_time() -> None:
    [g] = group_findings([kernel_time_check(0, 0.0, 4522.0, "warn")])
    assert g.summary == "kernel time [volta_sgemm_128x64_nn] +4.52 ms (0.0 µs → 4.52 ms/step, p = 0.008) on rank 0"
