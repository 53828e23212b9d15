"""A newcomer's slips and a clean command line: swapped compare arguments get a hint, a JSON
array of no events is refused, ``analyse`` and stored-baseline names work, a misspelt name gets
"did you mean"; ``analyze`` writes one JSON document, no empty JUnit file, nothing from a
library on stderr, and the PDF's internal links land on anchors that exist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.cli import main
from perfreport.commands.hints import swapped_hints

from .conftest import DATA

ROOT = Path(__file__).resolve().parents[1]
RECORDED = DATA / "recorded"
STORE = ROOT / "baselines"


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("text, what", [("[1, 2, 3]", "a JSON array of 3 value(s), none of them a trace event"),
                                        ("[]", "an empty JSON array")])
def test_a_json_array_without_events_exits_2_with_one_line(tmp_path, capsys, text, what) -> None:
    path = tmp_path / "numbers.json"
    path.write_text(text)
    code, out, err = cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", "json")
    assert code == 2 and out == ""
    assert err.splitlines() == [f"perfreport: error: {path}: {what}" + err.split(what, 1)[1].rstrip("\n")]
    assert "no trace events" in err and not (tmp_path / "out").exists()


def test_analyse_is_an_alias_and_a_stored_baseline_name_is_found(tmp_path, capsys) -> None:
    code, out, err = cli(capsys, "analyse", "demo", "--store", STORE, "--out", tmp_path, "--format", "md")
    assert code == 0 and err == ""
    doc = json.loads((tmp_path / "report.json").read_text())
    manifest = json.loads((STORE / "demo" / "manifest.json").read_text())
    assert [r["rank"] for r in doc["summary"]] == [r["rank"] for r in manifest["ranks"]]
    assert doc["source"].endswith("demo") and "Tesla V100" in doc["summary"][0]["gpu_name"]


def test_a_misspelt_baseline_name_gets_did_you_mean(tmp_path, capsys) -> None:
    code, _, err = cli(capsys, "analyze", "demoo", "--store", STORE, "--out", tmp_path, "--format", "md")
    assert code == 2 and len(err.splitlines()) == 1 and "did you mean demo?" in err
    code, _, err = cli(capsys, "compare", "dmeo", RECORDED / "workers0" / "run1", "--store", STORE,
                       "--out", tmp_path, "--format", "md")
    assert code == 2 and len(err.splitlines()) == 1 and "did you mean demo?" in err
    code, _, err = cli(capsys, "analyze", "no-such-thing-at-all", "--store", STORE, "--out", tmp_path)
    assert code == 2 and "did you mean" not in err and "no such file or directory" in err


def test_swapped_compare_arguments_get_a_hint(tmp_path, capsys) -> None:
    old, new = RECORDED / "repeat_base" / "run1", RECORDED / "workers0" / "run1"
    # recorded 20:14:53 and 20:15:55 UTC (recordings.json): the baseline given is the newer run
    starts = {p: json.loads((RECORDED / "recordings.json").read_text())[f"{p.parent.name}/{p.name}"]["date_utc"]
              for p in (old, new)}
    assert starts[old] < starts[new]
    code, _, err = cli(capsys, "compare", new, old, "--out", tmp_path / "a", "--format", "md", "--workers", "1")
    hints = [line for line in err.splitlines() if line.startswith("perfreport: hint: ")]
    assert len(hints) == 1 and "recorded after" in hints[0]
    assert f"perfreport compare {old} {new}" in hints[0]
    code, _, err = cli(capsys, "compare", old, new, "--out", tmp_path / "b", "--format", "md", "--workers", "1")
    assert code == 1 and "hint" not in err  # workers0 is a real regression, in the right order: no hint
    # a stored baseline's name given as the candidate
    assert swapped_hints("runs/new", "demo", baseline_stored=False, candidate_stored=True,
                         baseline_times=[], candidate_times=[]) == [
        "CANDIDATE demo is a stored baseline and BASELINE runs/new is not: the arguments look swapped (compare "
        "BASELINE CANDIDATE judges the second against the first); did you mean `perfreport compare demo runs/new`?"]
    assert swapped_hints("demo", "runs/new", baseline_stored=True, candidate_stored=False,
                         baseline_times=[2.0], candidate_times=[1.0]) == []


def test_analyze_writes_one_document_and_a_clean_stderr(tmp_path) -> None:
    pytest.importorskip("weasyprint")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "perfreport", "analyze", str(RECORDED / "setups" / "ddp_w2_gloo"),
                          "--out", str(out), "-q"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0 and run.stderr == ""  # WeasyPrint's "No anchor #sec-idle" lines were here
    # the report files, plus the set's own bookkeeping (perfreport.storing.fileset: its marker and lock)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["report.html", "report.json", "report.md", "report.pdf"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".lock", ".perfreport-set.json"]


def test_every_internal_link_of_the_pdf_lands_on_an_anchor() -> None:
    weasyprint = pytest.importorskip("weasyprint")
    from perfreport.documents.jsondoc import json_text
    from perfreport.pipeline import run_jobs, summary_document, trace_jobs
    from perfreport.report import build_report
    from perfreport.report.pdf import paged_html

    analysis = run_jobs(trace_jobs(RECORDED / "setups" / "ddp_w2_gloo"), "ddp", workers=1)
    page = paged_html(build_report(json.loads(json_text(summary_document(analysis)))))
    links = set(re.findall(r'href="#([^"]+)"', page))
    assert links and links <= set(re.findall(r'\bid="([^"]+)"', page))
    document = weasyprint.HTML(string=page).render()
    anchors = {name for p in document.pages for name in p.anchors}
    targets = {link[1] for p in document.pages for link in p.links if link[0] == "internal"}
    assert targets and targets <= anchors
