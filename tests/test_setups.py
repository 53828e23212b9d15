"""Several setups in one report (perfreport.report.setups and `compare BASELINE CAND CAND …`):
real traces of different world sizes (2, 8, 128), each candidate judged against the baseline,
the verdict the worst, one column per setup in every side-by-side table."""

from __future__ import annotations

import functools
import json
import re

import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.cli import main, setup_labels
from perfreport.errors import PerfreportError
from perfreport.pipeline import compare, compare_many, report_document
from perfreport.report import build_report
from perfreport.report.html import render_html
from perfreport.report.markdown import render_markdown
from perfreport.report.setups import MULTI_KIND, multi_document, severity

from .conftest import TRACES
from .test_report_markdown import assert_tables_well_formed

SETUPS = {"DDP 2": "hta_a100_nccl_rank0of2", "eager 8": "tracelens_b200_eager_rank0of8",
          "sampled 128": "hta_sampled_2of128rank"}


@functools.lru_cache(maxsize=None)
def setups_document() -> dict:
    paths = [TRACES / p for p in SETUPS.values()]
    comparisons = compare_many(paths[0], paths[1:], workers=1)
    docs = [json.loads(json_text(report_document(c))) for c in comparisons]
    return json.loads(json_text(multi_document(docs, list(SETUPS), command="perfreport compare …")))


def test_each_candidate_is_judged_like_a_single_comparison() -> None:
    doc = setups_document()
    assert doc["kind"] == MULTI_KIND and [s["label"] for s in doc["setups"]] == list(SETUPS)
    assert [s["role"] for s in doc["setups"]] == ["baseline", "candidate", "candidate"]
    assert [len(s["ranks"]) for s in doc["setups"]] == [1, 1, 2]
    single = json.loads(json_text(report_document(compare(TRACES / SETUPS["DDP 2"], TRACES / SETUPS["sampled 128"],
                                                          workers=1))))
    multi = doc["comparisons"][1]
    assert multi["label"] == "sampled 128" and multi["status"] == single["status"]
    assert [(c["id"], c["status"], c["candidate_value"]) for c in multi["checks"]] == \
           [(c["id"], c["status"], c["candidate_value"]) for c in single["checks"]]
    order = ["pass", "warn", "fail"]
    assert doc["status"] == max((c["status"] for c in doc["comparisons"]), key=order.index)


def test_report_has_a_column_per_setup_and_a_section_per_candidate() -> None:
    doc = setups_document()
    report = build_report(doc)
    glance = report.sections[0].tables[1]
    assert [c.label for c in glance.columns] == ["metric", *SETUPS]
    rows = {r[0]: r[1:] for r in glance.rows}
    assert [v.value for v in rows["ranks traced"]] == [1, 1, 2]
    assert [v.value for v in rows["world size"]] == [2, 8, 128]
    # per-rank figures are the slowest rank's, picked from each setup's own tables
    sampled = doc["setups"][2]["analyses"]
    slowest = max(sampled["step_times"], key=lambda r: r["wall_us_median"])
    assert rows["step time, median of every recorded step"][2].value == slowest["wall_us_median"]
    busy = next(r for r in sampled["temporal_breakdown"] if r["rank"] == slowest["rank"])
    assert rows["idle % of GPU span"][2].value == busy["idle_pct"]
    verdicts = report.sections[0].tables[0]
    worst_first = sorted(doc["comparisons"], key=severity)
    assert [(r[0], r[1]) for r in verdicts.rows] == [(c["label"], c["status"]) for c in worst_first]
    assert [s.title for s in report.sections[1:3]] == [f"{c['label']} vs DDP 2" for c in worst_first]
    bars = next(f for f in report.sections[0].figures if f.id == "setup_temporal")
    assert [b.label for b in bars.bars] == ["rank 0 · DDP 2", "rank 0 · eager 8", "rank 0 · sampled 128",
                                           "rank 1 · sampled 128"]
    # every per-rank analysis table has one run per setup
    temporal = next(t for s in report.sections if s.id == "temporal" for t in s.tables)
    assert [c.key for c in temporal.columns][:2] == ["run", "rank"]
    assert {r[0] for r in temporal.rows} == set(SETUPS)
    assert report.headline.counts.startswith("2 setups against DDP 2: ")


def test_renders_read_top_down(tmp_path) -> None:
    report = build_report(setups_document())
    html = render_html(report)
    assert html.index('id="overview-figures"') < html.index('id="tbl-verdicts"') < html.index('id="tbl-setups"')
    for label in SETUPS:
        assert f"<th class=\"num\">{label}</th>" in html
    md = render_markdown(report)
    first = md.splitlines()[0]
    assert re.match(r"### (❌ FAIL|⚠️ WARN|✅ PASS) · (eager 8|sampled 128): ", first)
    assert md.index("Each candidate against the baseline") < md.index("<details>")
    assert_tables_well_formed(md)


def test_cli_labels_and_exit_code(tmp_path, capsys) -> None:
    assert setup_labels("b", ["x/ddp", "y/fsdp"], None) == ["baseline", "ddp", "fsdp"]
    assert setup_labels("b", ["x", "y"], ["DDP", "FSDP"]) == ["baseline", "DDP", "FSDP"]
    assert setup_labels("b", ["x", "y"], ["single", "DDP", "FSDP"]) == ["single", "DDP", "FSDP"]
    with pytest.raises(PerfreportError, match="--label given 1 times"):
        setup_labels("b", ["x", "y"], ["DDP"])
    paths = [str(TRACES / p) for p in SETUPS.values()]
    code = main(["compare", *paths, "--label", "DDP 2", "--label", "eager 8", "--label", "sampled 128",
                 "--out", str(tmp_path), "--format", "md,junit", "--workers", "1"])
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert code == (1 if doc["status"] == "fail" else 0)
    assert out.startswith(f"perfreport compare: {doc['status'].upper()} · 2 setups against DDP 2: ")
    assert "eager 8:" in out and "sampled 128:" in out
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.junit.xml").is_file()
