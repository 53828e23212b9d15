"""perfreport archive: releases in order, trends from the reports' own numbers, refusals that
change nothing, atomic updates under SIGKILL, a page that runs and fetches nothing, 200 releases."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.jsondoc import json_text
from perfreport.archive import store
from perfreport.archive.metrics import release_metrics
from perfreport.errors import ArchiveError

REPO = Path(__file__).resolve().parent.parent
CHROME_OWN_HOSTS = ("google.com", "googleapis.com", "gstatic.com", "chromium.org")
"""Hosts headless Chromium calls by itself (updates, time); anything else would be the page's."""


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """Two real report folders: the demo baseline against itself (pass) and the demo (fail)."""
    from perfreport.config import load_config
    from perfreport.pipeline import compare, report_document
    from perfreport.report import build_report, write_reports

    out = {}
    for name, candidate in (("pass", REPO / "baselines" / "demo"), ("fail", REPO / "examples" / "resnet50-workers0")):
        folder = tmp_path_factory.mktemp(name)
        doc = report_document(compare("demo", candidate, config=load_config(), store=REPO / "baselines"))
        write_reports(build_report(json.loads(json_text(doc))), folder, ("md", "json", "html"))
        out[name] = folder
    return out


def snapshot(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(site.rglob("*")) if p.is_file() and p.name != ".lock"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfreport", "archive", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def three_releases(site: Path, reports: dict[str, Path]) -> None:
    # added out of order: the index orders by release date
    store.add(site, "v1.1", reports["fail"], date="2026-03-01T00:00:00+00:00", commit="c" * 40)
    store.add(site, "v1.0", reports["pass"], date="2026-02-01T00:00:00+00:00", commit="b" * 40)
    store.add(site, "v0.9", reports["pass"], date="2026-01-01T00:00:00+00:00", commit="a" * 40)


def test_three_releases_in_order_with_the_reports_numbers(tmp_path, reports):
    site = tmp_path / "site"
    three_releases(site, reports)
    index = json.loads((site / "index.json").read_text())
    assert [r["tag"] for r in index["releases"]] == ["v0.9", "v1.0", "v1.1"]
    fail = json.loads((reports["fail"] / "report.json").read_text())
    step = next(c for c in fail["checks"] if c["id"] == "relative.step_time")
    latest = index["releases"][-1]
    assert latest["status"] == "fail" and latest["metrics"]["step_time_us"] == step["candidate_value"]
    assert latest["commit"] == "c" * 40
    for release in index["releases"]:
        for f in release["files"]:
            assert (site / f).is_file(), f
    assert (site / "releases/v1.1/report.json.gz").is_file() and (site / ".nojekyll").exists()
    html = (site / "index.html").read_text()
    assert html.index('id="release-v1.1"') < html.index('id="release-v0.9"')  # newest first
    assert "+39.4 %" in html  # v1.1 against v1.0, highlighted
    assert re.search(r'class="delta worse">\+39\.4 %', html)
    assert html.count("<svg") >= 3 and "<script" not in html
    listed = cli("list", "--store", str(site))
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()[1:]] == \
        ["v0.9", "v1.0", "v1.1"]
    shown = cli("show", "v1.1", "--store", str(site))
    assert shown.returncode == 0 and "176.47 ms" in shown.stdout


def test_readding_without_force_changes_nothing(tmp_path, reports):
    site = tmp_path / "site"
    three_releases(site, reports)
    before = snapshot(site)
    proc = cli("add", "--release", "v1.0", "--report", str(reports["fail"]), "--store", str(site))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--force" in proc.stderr
    assert snapshot(site) == before
    proc = cli("add", "--release", "v1.0", "--report", str(reports["fail"]), "--store", str(site), "--force",
               "--date", "2026-02-01T00:00:00+00:00")
    assert proc.returncode == 0, proc.stderr
    index = store.read_index(site)
    assert [r["tag"] for r in index["releases"]] == ["v0.9", "v1.0", "v1.1"]
    assert index["releases"][1]["status"] == "fail"
    assert not [p for p in (site / "releases").iterdir() if p.name.startswith(".")]


def test_rm_and_bad_input(tmp_path, reports):
    site = tmp_path / "site"
    three_releases(site, reports)
    assert cli("rm", "v1.0", "--store", str(site)).returncode == 0
    assert [r["tag"] for r in store.read_index(site)["releases"]] == ["v0.9", "v1.1"]
    assert not (site / "releases" / "v1.0").exists()
    for args, needle in ((("rm", "v9", "--store", str(site)), "no archived release v9"),
                         (("add", "--release", "../x", "--report", str(reports["pass"]), "--store", str(site)), "tag"),
                         (("add", "--release", "v2", "--report", str(tmp_path), "--store", str(site)), "no report.json"),
                         (("list", "--store", str(tmp_path / "nothing")), "no archive here")):
        proc = cli(*args)
        assert proc.returncode == 2 and needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    (site / "index.json").write_text("[1, 2")
    proc = cli("list", "--store", str(site))
    assert proc.returncode == 2 and "index.json" in proc.stderr


def test_an_analysis_is_refused_with_a_hint(tmp_path):
    with pytest.raises(ArchiveError, match="comparison report"):
        release_metrics({"kind": "perfreport.analyze", "ranks": []})


KILLER = """
import os, signal, sys
from perfreport.jsondoc import json_text
from perfreport.archive import store
n = int(sys.argv[1]); calls = [0]
real_replace = os.replace
def replace(a, b):
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(a, b)
store.os.replace = replace
import perfreport._io as io
io.os.replace = replace
store.add(sys.argv[2], "v1.0", sys.argv[3], force=True, date="2026-02-01T00:00:00+00:00")
"""


@pytest.mark.parametrize("moment", [1, 2, 3, 4, 5])
def test_sigkill_at_each_rename_leaves_the_previous_site(tmp_path, reports, moment):
    """Killed at the n-th rename of a forced re-add (set old aside, move new in, index.json,
    index.html): the site is the old one or the new one, never a mix, and the next run cleans up."""
    site = tmp_path / "site"
    three_releases(site, reports)
    old_index = (site / "index.json").read_text()
    old_v10 = snapshot(site / "releases" / "v1.0")
    proc = subprocess.run([sys.executable, "-c", KILLER, str(moment), str(site), str(reports["fail"])],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    killed = proc.returncode == -signal.SIGKILL
    assert killed == (moment <= 4), proc.stderr  # a forced re-add renames four times
    with store.locked(site):  # what the next run does first
        pass
    index = store.read_index(site)
    v10 = next(r for r in index["releases"] if r["tag"] == "v1.0")
    for release in index["releases"]:
        for f in release["files"]:
            assert (site / f).is_file(), (moment, f)
    if v10["status"] == "pass":  # the kill came before the new index: the old release, whole
        assert (site / "index.json").read_text() == old_index
        assert snapshot(site / "releases" / "v1.0") == old_v10
    else:
        assert moment >= 4
        assert (site / "releases" / "v1.0" / ".id").read_text() == v10["id"]
        html = (site / "index.html").read_text()  # drawn again from the new index if the kill came first
        assert 'id="release-v1.0"' in html and html.count("FAIL") >= 2
    assert not [p for p in (site / "releases").iterdir() if p.name.startswith(".")]
    assert not list(site.glob(".index.*.tmp"))


def test_two_hundred_releases_stay_small_and_ordered(tmp_path, reports):
    site = tmp_path / "site"
    store.add(site, "v0", reports["pass"], date="2020-01-01T00:00:00+00:00")
    index = store.read_index(site)
    template = index["releases"][0]
    releases = []
    for i in range(1, 200):
        r = copy.deepcopy(template)
        r.update(tag=f"v{i}", id=f"{i:032x}", date="2020-01-01T00:00:00+00:00".replace("2020", str(2020 + i // 12))
                 .replace("-01-01", f"-{i % 12 + 1:02d}-01"))
        r["metrics"]["step_time_us"] = 100_000.0 * (1.1 if i % 50 == 0 else 1.0)
        r["files"] = [f.replace("/v0/", f"/v{i}/") for f in r["files"]]  # (folders not made: not read here)
        releases.append(r)
    with store.locked(site):
        store.publish(site, {**index, "releases": sorted([template, *releases], key=lambda r: r["date"])})
    store.add(site, "v200", reports["fail"], date="2040-01-01T00:00:00+00:00")
    index = store.read_index(site)
    assert len(index["releases"]) == 201 and index["releases"][-1]["tag"] == "v200"
    assert (site / "index.json").stat().st_size < 1_000_000
    html = (site / "index.html").read_text()
    assert html.count("<tr id=\"release-") == 201 and len(html) < 3_000_000


def test_page_in_a_real_browser_runs_and_fetches_nothing(tmp_path, reports):
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        pytest.skip("no Chromium to open the page in")
    site = tmp_path / "site"
    three_releases(site, reports)
    netlog = tmp_path / "netlog.json"
    out = subprocess.run(
        [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         f"--log-net-log={netlog}", "--dump-dom", (site / "index.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = out.stdout
    assert "<title>Performance by release</title>" in dom and dom.count("<svg") >= 3
    assert not re.search(r"<script\b", dom)
    console = [line for line in out.stderr.splitlines() if "CONSOLE" in line or "Refused to" in line]
    assert console == []
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text())) if netlog.exists() else set()
    page_requests = [u for u in urls if not u.startswith("file:") and not any(h in u for h in CHROME_OWN_HOSTS)]
    assert page_requests == []
    for attr in re.findall(r'(?:src|href)="([^"]*)"', dom):
        assert attr.startswith(("releases/", "data:", "#")), attr
