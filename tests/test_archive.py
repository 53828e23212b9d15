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

from perfreport.documents.jsondoc import json_text
from perfreport.archive import store
from perfreport.archive.metrics import release_metrics
from perfreport.errors import ArchiveError

from .conftest import cli_in_process, demo_comparison_json

REPO = Path(__file__).resolve().parent.parent
CHROME_OWN_HOSTS = ("google.com", "googleapis.com", "gstatic.com", "chromium.org")
"""Hosts headless Chromium calls by itself (updates, time); anything else would be the page's."""


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """Two real report folders: the demo baseline against itself (pass) and the demo (fail), the
    fail one with its HTML report too (a release with every kind of file; the HTML's figures take
    seconds, and no test reads the pass one's)."""
    from perfreport.config import load_config
    from perfreport.pipeline import compare, report_document
    from perfreport.report import build_report, write_reports

    passed = json_text(report_document(compare("demo", REPO / "baselines" / "demo", config=load_config(),
                                               store=REPO / "baselines")))
    out = {}
    for name, text, formats in (("pass", passed, ("md", "json")), ("fail", demo_comparison_json(), ("md", "json", "html"))):
        folder = tmp_path_factory.mktemp(name)
        write_reports(build_report(json.loads(text)), folder, formats)
        out[name] = folder
    return out


def snapshot(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(site.rglob("*")) if p.is_file() and p.name != ".lock"}


def cli(*args: str) -> subprocess.CompletedProcess:
    """``perfreport archive ARGS`` as a user runs it: its log lines reach stderr as a user sees them."""
    return cli_in_process(["archive", *args], cwd=REPO)


def run(capsys, *args) -> tuple[int, str, str]:
    """``perfreport archive ARGS`` in this process (faster than :func:`cli` where output is all we check)."""
    from perfreport.cli import main

    code = main(["archive", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def three_release_site(tmp_path_factory, reports) -> Path:
    """A site of three releases, made once (each add draws the page's charts): tests change
    their own copy (:func:`copy_site`)."""
    site = tmp_path_factory.mktemp("three") / "site"
    # added out of order: the index orders by release date
    store.add(site, "v1.1", reports["fail"], date="2026-03-01T00:00:00+00:00", commit="c" * 40)
    store.add(site, "v1.0", reports["pass"], date="2026-02-01T00:00:00+00:00", commit="b" * 40)
    store.add(site, "v0.9", reports["pass"], date="2026-01-01T00:00:00+00:00", commit="a" * 40)
    return site


@pytest.fixture(scope="module")
def one_release_site(tmp_path_factory, reports) -> Path:
    """A site of release v0.9 (pass), made once: tests change their own copy (:func:`copy_site`)."""
    site = tmp_path_factory.mktemp("one") / "site"
    store.add(site, "v0.9", reports["pass"], date="2026-01-01")
    return site


def copy_site(site: Path, built: Path) -> None:
    shutil.copytree(built, site, symlinks=True)


def test_three_releases_in_order_with_the_reports_numbers(tmp_path, reports, three_release_site, capsys):
    site = tmp_path / "site"
    copy_site(site, three_release_site)
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
    # the trend charts' x axis names each release by tag and date, not by its row number
    assert "release (tag, date)" in html and "# in the table" not in html
    for label in ("v0.9 (2026-01-01)", "v1.0 (2026-02-01)", "v1.1 (2026-03-01)"):
        assert html.count(label) >= html.count("<svg") - 1, label  # every chart (the kernel chart too)
    code, out, _ = run(capsys, "list", "--store", site)
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["v0.9", "v1.0", "v1.1"]
    code, out, _ = run(capsys, "show", "v1.1", "--store", site)
    assert code == 0 and "176.47 ms" in out


def test_readding_without_force_changes_nothing(tmp_path, reports, three_release_site, capsys):
    site = tmp_path / "site"
    copy_site(site, three_release_site)
    before = snapshot(site)
    code, _, err = run(capsys, "add", "--release", "v1.0", "--report", reports["fail"], "--store", site)
    assert code == 2 and err.count("\n") == 1 and "--force" in err
    assert snapshot(site) == before
    code, _, err = run(capsys, "add", "--release", "v1.0", "--report", reports["fail"], "--store", site, "--force",
                       "--date", "2026-02-01T00:00:00+00:00")
    assert code == 0, err
    index = store.read_index(site)
    assert [r["tag"] for r in index["releases"]] == ["v0.9", "v1.0", "v1.1"]
    assert index["releases"][1]["status"] == "fail"
    assert not [p for p in (site / "releases").iterdir() if p.name.startswith(".")]


def test_rm_and_bad_input(tmp_path, reports, three_release_site, capsys):
    site = tmp_path / "site"
    copy_site(site, three_release_site)
    assert run(capsys, "rm", "v1.0", "--store", site)[0] == 0
    assert [r["tag"] for r in store.read_index(site)["releases"]] == ["v0.9", "v1.1"]
    assert not (site / "releases" / "v1.0").exists()
    for args, needle in ((("rm", "v9", "--store", str(site)), "no archived release v9"),
                         (("add", "--release", "../x", "--report", str(reports["pass"]), "--store", str(site)), "tag"),
                         (("add", "--release", "v2", "--report", str(tmp_path), "--store", str(site)), "no report.json"),
                         (("list", "--store", str(tmp_path / "nothing")), "no archive here")):
        code, _, err = run(capsys, *args)
        assert code == 2 and needle in err and err.count("\n") == 1, err
    (site / "index.json").write_text("[1, 2")
    code, _, err = run(capsys, "list", "--store", site)
    assert code == 2 and "index.json" in err


def test_an_analysis_is_refused_with_a_hint(tmp_path):
    with pytest.raises(ArchiveError, match="comparison report"):
        release_metrics({"kind": "perfreport.analyze", "ranks": []})


KILLER = """
import os, signal, sys
from perfreport.documents.jsondoc import json_text
from perfreport.archive import store
n = int(sys.argv[1]); calls = [0]
real_replace = os.replace
def replace(a, b):
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(a, b)
store.os.replace = replace
import perfreport.storing.atomic as io
io.os.replace = replace
store.add(sys.argv[2], "v1.0", sys.argv[3], force=True, date="2026-02-01T00:00:00+00:00")
"""


@pytest.mark.parametrize("moment", [1, 2, 3, 4, 5])
def test_sigkill_at_each_rename_leaves_the_previous_site(tmp_path, reports, three_release_site, moment):
    """Killed at the n-th rename of a forced re-add (set old aside, move new in, index.json,
    index.html): the site is the old one or the new one, never a mix, and the next run cleans up."""
    site = tmp_path / "site"
    copy_site(site, three_release_site)
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
    assert not [p.name for p in site.iterdir() if p.name.startswith(".") and p.name != ".nojekyll"]


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
    # 201 releases: at most 16 tick labels per chart, the first and the last among them
    from perfreport.report.figures import MAX_X_TICKS, tick_positions

    picked = tick_positions(201)
    assert len(picked) <= MAX_X_TICKS and picked[0] == 0 and picked[-1] == 200
    assert "v0 (2020-01-01)" in html and "v200 (2040-01-01)" in html


def test_page_in_a_real_browser_runs_and_fetches_nothing(tmp_path, three_release_site):
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        pytest.skip("no Chromium to open the page in")
    site = tmp_path / "site"
    copy_site(site, three_release_site)
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


# --- killed at every checkpoint, again and again: the next command clears up and says so ---------
ADD_CHECKPOINTS = ("archive.staging", "archive.staged", "archive.aside", "write.temp#1", "write.temp#2",
                   "archive.published")
"""The moments of a forced re-add: temporary folder made, filled, old release set aside, the new
index.json written (not renamed), index.html written (not renamed), published (old not deleted)."""


def _add_killed_at(point: str, site: Path, report: Path) -> bool:
    """Run a forced re-add of v1.0 in a forked child that stops itself at ``point``; SIGKILL it
    there. True when it reached the point (and was killed)."""
    import os

    from perfreport.storing.atomic import PAUSE_ENV

    pid = os.fork()
    if pid == 0:  # the child: a writer that will be killed
        code = 1
        try:
            os.environ[PAUSE_ENV] = point
            store.add(site, "v1.0", report, force=True, date="2026-02-01")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return True
    return False


def _leftovers(site: Path) -> list[str]:
    hidden = [p.name for p in site.iterdir() if p.name.startswith(".") and p.name != ".nojekyll"]
    return hidden + [p.name for p in (site / "releases").iterdir() if p.name.startswith(".")]


def _consistent(site: Path) -> str:
    """The site is whole: every file the index names exists, v1.0's folder is the one it names."""
    index = store.read_index(site)
    for release in index["releases"]:
        for f in release["files"]:
            assert (site / f).is_file(), f
        assert (site / "releases" / release["tag"] / ".id").read_text() == release["id"]
    return next(r["status"] for r in index["releases"] if r["tag"] == "v1.0")


def test_kills_at_every_checkpoint_repeated_then_the_next_command_clears_up(tmp_path, reports, one_release_site,
                                                                           caplog):
    site = tmp_path / "site"
    copy_site(site, one_release_site)
    store.add(site, "v1.0", reports["pass"], date="2026-02-01")
    assert _leftovers(site) == []  # a normal run leaves no lock and no temporary
    for round_ in range(2):
        for point in ADD_CHECKPOINTS:
            assert _add_killed_at(point, site, reports["fail" if round_ else "pass"]), point
            assert (site / store.LOCK_FILE).exists()  # the killed writer's lock file, with its pid
            copy_ = tmp_path / f"copy-{round_}-{point}"
            shutil.copytree(site, copy_, symlinks=True)
            with store.locked(copy_):  # what the next command does first (here on a copy: kills pile up)
                pass
            assert _consistent(copy_) in ("pass", "fail") and _leftovers(copy_) == []  # old or new, whole
    caplog.set_level("WARNING", logger="perfreport.archive")
    proc = cli("list", "--store", str(site))
    assert proc.returncode == 0, proc.stderr
    assert "cleared what a killed run left" in proc.stderr and "killed while it held it" in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line says what was cleared
    assert _leftovers(site) == [] and _consistent(site) in ("pass", "fail")
    proc = cli("list", "--store", str(site))
    assert proc.returncode == 0 and proc.stderr == ""  # nothing left to clear, nothing to report
    store.add(site, "v1.1", reports["fail"], date="2026-03-01")
    assert _leftovers(site) == []


def test_dates_are_iso_8601_and_order_releases_by_instant(tmp_path, reports, capsys):
    site = tmp_path / "site"
    for bad in ("yesterday", "2026-13-01", "01/02/2026", "2026-02-30", "2026-02-01T25:00", "20260201", " "):
        code, _, err = run(capsys, "add", "--release", "v1", "--report", reports["pass"], "--store", site, "--date", bad)
        assert code == 2 and "not an ISO 8601 date" in err and err.count("\n") == 1, bad
    assert not site.exists() or not (site / "index.json").exists()
    store.add(site, "late", reports["pass"], date="2026-02-01T01:00:00+02:00")   # 23:00 UTC the day before
    store.add(site, "early", reports["pass"], date="2026-01-31T22:30Z")
    store.add(site, "day", reports["pass"], date="2026-01-31")
    store.add(site, "frac", reports["pass"], date="2026-01-31 12:00:00.123456789-0100")
    index = store.read_index(site)
    assert [(r["tag"], r["date"]) for r in index["releases"]] == [
        ("day", "2026-01-31T00:00:00+00:00"), ("frac", "2026-01-31T13:00:00+00:00"),
        ("early", "2026-01-31T22:30:00+00:00"), ("late", "2026-01-31T23:00:00+00:00")]


BAD_INDEXES = {
    "metric_a_string": (lambda i: i["releases"][0]["metrics"].update(step_time_us="fast"), "metrics.step_time_us"),
    "date_a_number": (lambda i: i["releases"][0].update(date=20260101), "date is a number"),
    "date_not_iso": (lambda i: i["releases"][0].update(date="yesterday"), "is not ISO 8601"),
    "files_a_string": (lambda i: i["releases"][0].update(files="releases/v0.9/report.html"), "files is a string"),
    "file_outside": (lambda i: i["releases"][0]["files"].append("../../etc/passwd"), "is not a file of releases/"),
    "tag_a_path": (lambda i: i["releases"][0].update(tag="../x"), "is not a release tag"),
    "release_a_list": (lambda i: i["releases"].__setitem__(0, []), "releases[0]: is a list"),
    "releases_an_object": (lambda i: i.update(releases={}), "no releases list"),
    "twice": (lambda i: i["releases"].append(dict(i["releases"][0])), "archived twice"),
    "schema_a_string": (lambda i: i.update(schema_version="1"), "schema_version is a string"),
    "kernels_inf": (lambda i: i["releases"][0].update(kernels={"k": 1.0}), "not a finite number"),
}


@pytest.mark.parametrize("name", sorted(BAD_INDEXES))
def test_an_index_with_wrong_types_is_one_line_for_every_command(name, tmp_path, reports, one_release_site, capsys):
    site = tmp_path / "site"
    copy_site(site, one_release_site)
    index = json.loads((site / "index.json").read_text())
    change, expect = BAD_INDEXES[name]
    change(index)
    text = json.dumps(index).replace('"k": 1.0', '"k": 1e999')
    (site / "index.json").write_text(text)
    before = snapshot(site)
    for args in (("list",), ("show", "v0.9"), ("rm", "v0.9"),
                 ("add", "--release", "v2", "--report", str(reports["fail"]))):
        code, _, err = run(capsys, *args, "--store", site)
        assert code == 2 and err.count("\n") == 1, (args, err)
        assert f"{site / 'index.json'}: " in err and expect in err, (args, err)
    assert snapshot(site) == before and _leftovers(site) == []  # refused before changing anything


def test_list_reports_what_it_cannot_recover(tmp_path, reports, one_release_site, capsys):
    site = tmp_path / "site"
    copy_site(site, one_release_site)
    store.add(site, "v1.0", reports["fail"], date="2026-02-01")
    (site / "releases" / "v1.0" / "report.md").unlink()
    shutil.rmtree(site / "releases" / "v0.9")
    (site / "releases" / "stray").mkdir()
    code, out, err = run(capsys, "list", "--store", site)
    assert code == 2 and "v1.0" in out  # the listing, then the problems
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"perfreport: error: {site}: cannot recover: ") for line in lines)
    assert "release v0.9: its folder releases/v0.9 is missing" in lines[0]
    assert "release v1.0: 1 file(s) missing (releases/v1.0/report.md)" in lines[1]
    assert "releases/stray: not in index.json" in lines[2]


def test_a_read_only_site_is_read_and_refused_for_writes(tmp_path, reports):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions")
    site = tmp_path / "site"
    store.add(site, "v0.9", reports["pass"], date="2026-01-01")
    (site / ".index.json.tmp-host-1-00000000").write_text("left")
    site.chmod(0o555)
    try:
        proc = cli("list", "--store", str(site))
        assert proc.returncode == 2 and "v0.9" in proc.stdout and "left by a killed run, not cleared" in proc.stderr
        proc = cli("add", "--release", "v1", "--report", str(reports["fail"]), "--store", str(site))
        assert proc.returncode == 2 and "cannot update the archive (Permission denied" in proc.stderr
        assert proc.stderr.count("\n") == 1
    finally:
        site.chmod(0o755)


def test_concurrent_writers_take_turns_and_leave_no_lock(tmp_path, reports):
    """Three writers at once (the lock file is deleted by each holder: a waiter holding the
    deleted file must take the new one): every release lands, nothing is left behind."""
    import os

    site = tmp_path / "site"
    store.add(site, "v0", reports["pass"], date="2026-01-01")
    pids = []
    for i in range(1, 4):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                store.add(site, f"v{i}", reports["pass"], date=f"2026-01-0{i + 1}")
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    assert all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in pids)
    assert [r["tag"] for r in store.read_index(site)["releases"]] == ["v0", "v1", "v2", "v3"]
    assert _leftovers(site) == []


def test_killed_at_random_moments_repeatedly_the_site_stays_whole(tmp_path, reports):
    """SIGKILL a forced re-add after a random delay within a normal add's duration, five times
    (seeded); after each, what the next command sees is the old release or the new, whole."""
    import os
    import random
    import time

    site = tmp_path / "site"
    start = time.monotonic()
    store.add(site, "v1.0", reports["pass"], date="2026-02-01")
    took = time.monotonic() - start
    rng = random.Random(21)
    for i in range(5):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                store.add(site, "v1.0", reports["fail" if i % 2 else "pass"], force=True, date="2026-02-01")
                code = 0
            finally:
                os._exit(code)
        time.sleep(rng.uniform(0, took))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        copy_ = tmp_path / f"copy-{i}"
        shutil.copytree(site, copy_, symlinks=True)
        with store.locked(copy_):
            pass
        assert _consistent(copy_) in ("pass", "fail") and _leftovers(copy_) == []
    with store.locked(site):
        pass
    assert _leftovers(site) == []


def test_links_in_a_report_folder_are_not_published(tmp_path, reports):
    report = tmp_path / "report"
    shutil.copytree(reports["pass"], report)
    secret = tmp_path / "secret.txt"
    secret.write_text("runner credentials")
    (report / "report.md").unlink()
    (report / "report.md").symlink_to(secret)
    with pytest.raises(ArchiveError, match="report.md: not a regular file"):
        store.add(tmp_path / "site", "v1", report, date="2026-01-01")
    assert not (tmp_path / "site" / "releases" / "v1").exists()
    assert _leftovers(tmp_path / "site") == [] and not (tmp_path / "site" / "index.json").exists()
