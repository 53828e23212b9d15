"""A partial job (rank files missing from a world-size-2 DDP recording) is said to be partial in
every format, with what the cross-rank analyses could not judge."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pytest

from perfreport.analyses.coverage import rank_coverage
from perfreport.cli import main

from .conftest import DATA

DDP = DATA / "recorded" / "setups" / "ddp_w2_gloo"
SAID = "1 of 2 ranks: rank 0 missing"


def test_coverage_from_world_size_and_rank_ids() -> None:
    assert rank_coverage([1], [2])["text"].startswith(SAID + "; ")
    assert rank_coverage([0, 2], [None])["ranks_missing"] == [1]  # a gap in the rank ids
    assert rank_coverage([0, 1], [None]) is None and rank_coverage([0, 1], [2]) is None
    c = rank_coverage([0, 1, 2, 3, 6], [8])
    assert c["text"].startswith("5 of 8 ranks: ranks 4, 5, 7 missing; ") and "compare the 5 traced ranks only" in c["text"]
    assert rank_coverage(range(3, 64), [64])["text"].startswith("61 of 64 ranks: ranks 0–2 missing")


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    folder = tmp_path_factory.mktemp("partial")
    shutil.copy(DDP / "rank1.pt.trace.json.gz", folder)
    with gzip.open(folder / "rank1.pt.trace.json.gz") as f:
        info = json.load(f)["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (1, 2)  # what the statement rests on
    return folder


def test_analyze_says_so_in_every_format(tmp_path, capsys, partial) -> None:
    formats = "html,md,json,pdf" if shutil.which("pdftotext") and _weasyprint() else "html,md,json"
    assert main(["analyze", str(partial), "--out", str(tmp_path), "--format", formats, "-q"]) == 0
    out = capsys.readouterr().out
    assert f"partial job: {SAID}; stragglers, collective skew and kernel time across ranks need two ranks or " \
           "more: not judged" in out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["rank_coverage"]["ranks_missing"] == [0] and doc["rank_coverage"]["world_size"] == 2
    assert SAID in (tmp_path / "report.md").read_text() and SAID in (tmp_path / "report.html").read_text()
    if "pdf" in formats:
        text = subprocess.run(["pdftotext", str(tmp_path / "report.pdf"), "-"], capture_output=True, text=True).stdout
        assert SAID in " ".join(text.split())


def test_compare_notes_the_missing_rank(tmp_path, capsys, partial) -> None:
    main(["compare", str(DDP), str(partial), "--out", str(tmp_path), "--format", "md,junit", "-q", "--workers", "1"])
    out = capsys.readouterr().out
    assert f"candidate: {SAID}" in out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert any(n["message"].startswith(f"candidate: {SAID}") for n in doc["notes"])
    assert not any(n["message"].startswith("baseline: ") and "missing" in n["message"] for n in doc["notes"])
    assert SAID in (tmp_path / "report.md").read_text() and SAID in (tmp_path / "report.junit.xml").read_text()


def _weasyprint() -> bool:
    try:
        import weasyprint  # noqa: F401
    except Exception:
        return False
    return True


def test_cross_rank_sections_say_what_they_could_not_judge() -> None:
    from perfreport.report import build_report

    coverage = rank_coverage([0, 1], [3])
    assert coverage["text"].startswith("2 of 3 ranks: rank 2 missing; ") and "rank 2 cannot be judged" in coverage["text"]
    doc = {"source": "x", "summary": [{"rank": 0}, {"rank": 1}], "rank_coverage": coverage,
           "stragglers": [{"rank": r, "steps": 5, "wall_us_median": 1000.0 + r, "is_straggler": False} for r in (0, 1)]}
    report = build_report(doc)
    section = next(s for s in report.sections if s.id == "stragglers")
    assert f"Partial job: {coverage['text']}." in [getattr(b, "text", "") for b in section.blocks]
    assert coverage["text"] in report.notes


def test_a_partial_candidate_among_setups_is_noted_in_its_section(tmp_path, capsys, partial) -> None:
    main(["compare", str(DATA / "recorded" / "setups" / "single_w1"), str(DDP), str(partial), "--label", "DDP",
          "--label", "DDP rank 1", "--out", str(tmp_path), "--format", "md", "-q", "--workers", "1"])
    md = (tmp_path / "report.md").read_text()
    assert any(line.startswith("Notes: ") and f"candidate: {SAID}" in line for line in md.splitlines())
