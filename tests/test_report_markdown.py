"""perfreport.report.markdown: the verdict line first, checks and movers open, every other
section folded, well-formed GitHub tables, and never over the size budget: the least
important sections are shortened first, and the text says so."""

from __future__ import annotations

import copy
import functools
import re

import pytest

from perfreport.report import build_report
from perfreport.report.markdown import COMPACT_ROWS, MAX_CHARS, render_markdown
from perfreport.report.model import Link
from perfreport.report.templates import escape_markdown, format_value

from .test_report_build import comparison_document, real_document
from .test_report_html import with_findings

UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def table_blocks(md: str) -> list[list[str]]:
    """Consecutive lines starting with '|': one list per Markdown table."""
    blocks, current = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    return blocks + ([current] if current else [])


def assert_tables_well_formed(md: str) -> int:
    blocks = table_blocks(md)
    for block in blocks:
        assert len(block) >= 3, block[:1]  # header, separator, at least one row
        assert re.fullmatch(r"\|(:?---:?\|)+", block[1]), block[1]
        widths = {len(UNESCAPED_PIPE.findall(line)) for line in block}
        assert len(widths) == 1, block[0]
    return len(blocks)


def test_comparison_starts_with_the_verdict_then_findings_then_causes() -> None:
    doc = with_findings(comparison_document())
    report = build_report(doc)
    md = render_markdown(report)
    lines = md.splitlines()
    # line 1: verdict and headline; line 2: counts, what was compared, links (no marker: the GitHub glue adds its own)
    assert lines[0] == f"### ❌ FAIL · {escape_markdown(report.verdict.headline)}"
    assert lines[1].startswith(f"**{report.headline.counts}** · ")
    assert lines[1].endswith("📄 [full HTML report](report.html) · [PDF](report.pdf) · [JSON](report.json)")
    assert "perfreport:report" not in md
    assert md.index("#### Findings") < md.index("<details>")
    findings = md[md.index("#### Findings"):md.index("<details>")]
    assert re.findall(r"\| \*\*(\S+) (\w+)\*\* \|", findings)[:2] == [("❌", "FAIL"), ("⚠️", "WARN")]
    assert "INCONCLUSIVE" in findings and "PASS" not in findings
    assert "<summary><b>Passed and waived checks</b>" in md  # folded, not in the head
    assert "<summary><b>Where the time went</b>" in md
    assert md.count("<details>") == md.count("</details>") >= 4
    assert assert_tables_well_formed(md) >= 4
    for c in doc["explanation"]["contributions"][:3]:
        assert format_value(c["delta_us"], "us", True) in md


def test_demo_comment_is_short_and_reads_top_down(tmp_path) -> None:
    from .test_findings import demo_document

    report = build_report(demo_document())
    md = render_markdown(report, links=[Link("HTML report", "https://example.invalid/a/1"),
                                        Link("run", "https://example.invalid/r/2")])
    assert len(md) <= 15_000
    lines = md.splitlines()
    assert lines[0].startswith("### ❌ FAIL · step time +39.4 % (126.55 → 176.47 ms/step, p = 0.0079) — GPU idle while "
                               "the CPU runs \\_SingleProcessDataLoaderIter.\\_\\_next\\_\\_ (new) +61.35 ms/step")
    assert lines[1].startswith("**1 failed · 36 passed findings (37 checks)**")
    assert lines[1].endswith("📄 [HTML report](https://example.invalid/a/1) · [run](https://example.invalid/r/2)")
    head = md[:md.index("<details>")]
    assert head.index("#### Findings") < head.index("**Top causes**")
    assert "kernels added" not in head and head.count("| **⚠️ WARN** |") == 0  # cuDNN's other kernels: a note
    assert "1. GPU idle while the CPU runs" in head and "**+61.35 ms/step** (147 % of the change)" in head
    assert "mean step time, 135.1 → 176.9 ms/step" in head  # the causes' statistic is named
    assert_tables_well_formed(md)


def test_links_are_replaceable() -> None:
    md = render_markdown(build_report(comparison_document()),
                         links=[Link("report", "https://github.com/o/r/actions/runs/1/artifacts/2")])
    assert "📄 [report](https://github.com/o/r/actions/runs/1/artifacts/2)" in md and "report.html" not in md


def test_single_run_has_no_verdict_and_folds_every_analysis() -> None:
    doc = real_document()
    md = render_markdown(build_report(doc))
    assert md.splitlines()[0].startswith("### ℹ️ ANALYSIS · ")
    assert "####" not in md  # nothing open: every analysis is a <details> section
    assert md.count("<summary>") == len(build_report(doc).sections)
    assert_tables_well_formed(md)
    assert len(md) < MAX_CHARS


@functools.lru_cache(maxsize=None)
def huge_report():
    return build_report(huge_document())


def huge_document() -> dict:
    """The real document with 3,000 kernels of 5,000-character names and 3,000 steps."""
    doc = copy.deepcopy(real_document())
    name = "void kernel<" + ", ".join(f"Arg{i}" for i in range(800)) + ">"
    doc["kernel_metrics"] = [{"rank": i % 2, "kernel_class": "COMPUTATION", "name": f"{name[:4990]}{i:05d}",
                              "count": i, "sum_us": float(3_000 - i), "mean_us": 1.0, "max_us": 2.0, "min_us": 0.5}
                             for i in range(3_000)]
    doc["profiler_steps"] = [{"rank": 0, "step": i, "wall_us": 1000.0, "gpu_busy_us": 5.0, "gpu_events": 1}
                             for i in range(3000)]
    doc["op_profile"] = [{"kind": k, "key": f"{name[:4990]}{i:05d}", "count_per_step": 1.0,
                          "dur_per_step_us": float(i), "dur_per_call_us": 1.0} for i in range(1000)
                         for k in ("cpu_op", "gpu")]
    return doc


@pytest.mark.parametrize("budget", [MAX_CHARS, 20_000, 4_000, 300])
def test_budget_is_never_exceeded(budget: int) -> None:
    md = render_markdown(huge_report(), max_chars=budget)
    assert len(md) <= budget
    assert md.count("<details>") == md.count("</details>")
    assert_tables_well_formed(md)


def test_huge_document_fits_github_without_cutting() -> None:
    md = render_markdown(huge_report())  # tables are capped, names shortened
    assert len(md) <= MAX_CHARS and "✂️" not in md
    assert max(len(line) for line in md.splitlines()) < 2_000  # 5,000-character names were shortened
    assert_tables_well_formed(md)


def test_least_important_sections_are_shortened_first() -> None:
    report = huge_report()
    md = render_markdown(report, max_chars=15_000)
    assert len(md) <= 15_000
    note = re.search(r"✂️ Shortened to fit a GitHub comment: (.*)\. The full report", md)
    assert note, "the text must say it was shortened"
    shortened = note.group(1).split(", ")
    by_title = {s.title: s for s in report.sections}
    kept = [t for t in by_title if t not in shortened]
    assert shortened and kept
    # a less important section is kept whole only when it has nothing to cut (no long table)
    for k in kept:
        for t in shortened:
            if by_title[k].importance > by_title[t].importance:
                assert all(len(tab.rows) <= COMPACT_ROWS for tab in by_title[k].tables), (k, t)
    # sections replaced by a stub: every less important section was stubbed before them
    stubbed = re.findall(r"<summary><b>(.*?)</b>: omitted to fit this comment", md)
    for t in stubbed:
        less = [s.title for s in report.sections if s.importance > by_title[t].importance]
        assert set(less) <= set(stubbed), (t, less)
    assert "Ranks and steps" in kept and "Trace metadata" in shortened


def test_huge_comparison_head_fits(tmp_path) -> None:
    doc = with_findings(comparison_document())
    many = []
    for i in range(3000):  # thousands of failing checks with long names
        c = copy.deepcopy(doc["checks"][1])
        c["id"] = f"relative.kernel_time[{'k' * 3000}{i}]@rank0"
        c["message"] = "m" * 500
        many.append(c)
    doc["checks"] = many + doc["checks"]
    md = render_markdown(build_report(doc))
    assert len(md) <= MAX_CHARS and md.splitlines()[0].startswith("### ❌ FAIL · ")
    assert md.count("<details>") == md.count("</details>")
