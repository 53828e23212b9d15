"""The release archive on disk: a folder that GitHub Pages serves as is.

    SITE/index.html               the release list and trend charts (static, self-contained)
    SITE/index.json               releases in order: tag, date, commit, verdict, key metrics, files
    SITE/releases/TAG/report.*    each release's report set (HTML, PDF, Markdown, JSON, JUnit)
    SITE/.nojekyll                serve files as they are

``index.json`` is the truth; ``index.html`` is drawn from it alone (never from the release
folders), so adding release 201 reads one small file, not 200 reports.

Every update is atomic and serialised: an exclusive lock on ``SITE/.lock`` (:mod:`.lock`,
deleted again when the update ends); a release folder built under a temporary name and renamed
into place (a replaced one set aside first and restored if the run dies before the index names
the new one); ``index.json`` and ``index.html`` replaced by rename. A run killed at any point
leaves the previous site whole, and the next command clears what it left behind (temporaries,
set-aside folders, its lock file) and says so; ``archive list`` reports what it cannot recover.
Everything read from the site or a report folder is checked first (:mod:`.entries`,
:mod:`perfreport.report.untrusted`): both may come from someone else.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .. import __version__
from ..storing.atomic import atomic_write, checkpoint
from ..errors import ArchiveError, printable
from ..documents.jsondoc import json_text
from ..report.untrusted import consuming, read_report
from .entries import check_index, check_tag, release_date, sort_key
from .lock import LOCK_FILE, site_lock
from .metrics import release_metrics

log = logging.getLogger("perfreport.archive")

INDEX_JSON, INDEX_HTML, RELEASES = "index.json", "index.html", "releases"
SCHEMA_VERSION = 1
REPORT_FILES = ("report.html", "report.pdf", "report.md", "report.json", "report.junit.xml")
"""What a release keeps of a report folder (report.json is required; kept as report.json.gz, so
200 releases stay far inside GitHub Pages' 1 GB)."""
ID_FILE = ".id"
"""Each release folder's id, also in its index entry: tells a killed run's leftovers apart."""
_SITE_TEMP = re.compile(r"^\.(index\.json|index\.html|\.nojekyll)\.(tmp|old|rm)-")
"""Temporaries of :func:`perfreport.storing.atomic.atomic_write` in the site: under the lock, a killed run's."""


def read_index(site: Path) -> dict:
    """``index.json`` of ``site`` (an empty index when the site is new)."""
    path = site / INDEX_JSON
    if not path.exists():
        return {"schema_version": SCHEMA_VERSION, "releases": []}
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "nested too deep" if isinstance(exc, RecursionError) \
            else str(exc)[:200]
        raise ArchiveError(f"{path}: cannot read the archive index ({why})") from None
    problem = check_index(index)
    if problem:
        raise ArchiveError(f"{path}: {problem}")
    if index.get("schema_version", 0) > SCHEMA_VERSION:
        raise ArchiveError(f"{path}: written by a newer perfreport (schema {index['schema_version']}); upgrade")
    return index


def find(index: Mapping, tag: str) -> dict | None:
    return next((r for r in index["releases"] if r.get("tag") == tag), None)


@contextmanager
def locked(site: Path) -> Iterator[None]:
    """Hold the site's lock (:func:`.lock.site_lock`: released by the kernel if the holder dies,
    its file deleted at the end) and first undo what a killed run left (:func:`recover`), saying
    so. An OSError (a read-only or full disk) is one line naming the site."""
    site = Path(site)
    try:
        site.mkdir(parents=True, exist_ok=True)
        with site_lock(site) as killed:
            done = recover(site)
            if killed is not None:
                done.append(f"the lock of process {killed} (killed while it held it)")
            if done:
                log.warning("%s: cleared what a killed run left: %s", printable(site), "; ".join(done))
            yield
    except OSError as exc:
        raise ArchiveError(f"{site}: cannot update the archive ({exc.strerror or exc}"
                           f"{': ' + printable(exc.filename) if exc.filename else ''})") from None


def recover(site: Path) -> list[str]:
    """Undo what a killed run left, under the lock; returns what it did, in words. A release set
    aside (``.old-TAG-*``) goes back when the index still names it (its ``.id`` is the index
    entry's ``id``: the run died before publishing the new index); otherwise it is deleted.
    Temporary folders and index files are removed, and a page older than its index is drawn
    again."""
    done: list[str] = []
    releases = site / RELEASES
    if releases.is_dir():
        index = read_index(site)
        for item in sorted(releases.iterdir()):
            if item.name.startswith(".old-"):
                tag = item.name[len(".old-"):].rsplit("-", 1)[0]
                entry = find(index, tag)
                target = releases / tag
                if entry is not None and _folder_id(item) == entry.get("id") != _folder_id(target):
                    if target.exists():
                        shutil.rmtree(target)
                    os.replace(item, target)
                    done.append(f"restored release {tag}")
                else:
                    shutil.rmtree(item)
                    done.append(f"removed {RELEASES}/{printable(item.name)}")
            elif item.name.startswith(".tmp-"):
                shutil.rmtree(item)
                done.append(f"removed {RELEASES}/{printable(item.name)}")
    for item in sorted(site.iterdir()):
        if _SITE_TEMP.match(item.name):
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item)
            else:
                item.unlink()
            done.append(f"removed {printable(item.name)}")
    index_json, index_html = site / INDEX_JSON, site / INDEX_HTML
    if index_json.exists() and (not index_html.exists() or index_html.stat().st_mtime_ns < index_json.stat().st_mtime_ns):
        publish(site, read_index(site))  # killed between the two writes: draw the page again
        done.append(f"drew {INDEX_HTML} again from {INDEX_JSON}")
    return done


def problems(site: Path) -> list[str]:
    """What is wrong with a site that no command can put right: release folders or files the
    index names but that are missing, folders it does not name, leftovers of a killed run that
    could not be cleared (a read-only site). Empty for a healthy site."""
    site = Path(site)
    index = read_index(site)
    found = []
    named = set()
    for entry in index["releases"]:
        named.add(entry["tag"])
        folder = site / RELEASES / entry["tag"]
        if not folder.is_dir():
            found.append(f"release {entry['tag']}: its folder {RELEASES}/{entry['tag']} is missing")
            continue
        missing = [f for f in entry.get("files", []) if not (site / f).is_file()]
        if missing:
            found.append(f"release {entry['tag']}: {len(missing)} file(s) missing ({printable(missing[0])}"
                         f"{', …' if len(missing) > 1 else ''})")
    if (site / RELEASES).is_dir():
        for item in sorted((site / RELEASES).iterdir()):
            if item.name.startswith((".old-", ".tmp-")):
                found.append(f"{RELEASES}/{printable(item.name)}: left by a killed run, not cleared")
            elif item.name not in named:
                found.append(f"{RELEASES}/{printable(item.name)}: not in {INDEX_JSON} (archive it again with "
                             "add --force, or delete it)")
    for item in sorted(site.iterdir()):
        if _SITE_TEMP.match(item.name) or item.name == LOCK_FILE:
            found.append(f"{printable(item.name)}: left by a killed run, not cleared")
    return found


def _folder_id(folder: Path) -> str | None:
    try:
        return (folder / ID_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None


def add(site: str | Path, tag: str, report_dir: str | Path, *, force: bool = False, commit: str = "",
        date: str = "") -> dict:
    """Archive a report folder as release ``tag``; returns its index entry. Refuses an existing
    tag without ``force`` before changing anything."""
    site, report = Path(site), Path(report_dir)
    check_tag(tag)
    date = release_date(date) if date else _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    document = _read_report(report)
    with consuming(report / "report.json", error=ArchiveError):
        metrics, kernels = release_metrics(document)
        described = {"status": document.get("status") or "", "headline": str(document.get("headline") or ""),
                     "baseline": str((document.get("baseline") or {}).get("source") or ""),
                     "report_created_utc": str(document.get("created_utc") or "")}
    with locked(site):
        index = read_index(site)
        if find(index, tag) is not None and not force:
            raise ArchiveError(f"{site}: release {tag} is already archived (use --force to replace it)")
        entry = {
            "tag": tag,
            "id": uuid.uuid4().hex,
            "date": date,
            "commit": commit,
            **described,
            "metrics": metrics,
            "kernels": kernels,
            "files": [],
        }
        old = _stage_release(site, tag, report, entry)
        others = [r for r in index["releases"] if r.get("tag") != tag]
        index = {"schema_version": SCHEMA_VERSION, "generator": f"perfreport {__version__}",
                 "releases": sorted([*others, entry], key=sort_key)}
        publish(site, index)
        checkpoint("archive.published")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return entry


def remove(site: str | Path, tag: str) -> dict:
    """Drop release ``tag`` from the index and delete its folder; returns the removed entry."""
    site = Path(site)
    check_tag(tag)
    with locked(site):
        index = read_index(site)
        entry = find(index, tag)
        if entry is None:
            raise ArchiveError(f"{site}: no archived release {tag}")
        index = {**index, "releases": [r for r in index["releases"] if r.get("tag") != tag]}
        folder = site / RELEASES / tag
        aside = site / RELEASES / f".old-{tag}-{uuid.uuid4().hex[:8]}"
        publish(site, index)  # the index first: a kill after this leaves a folder nobody links
        if folder.exists():
            os.replace(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)
    return entry


def publish(site: Path, index: dict) -> None:
    """Write ``index.json``, then ``index.html`` drawn from it, each by rename."""
    from .site import render_index

    atomic_write(site / INDEX_JSON, json_text(index))
    atomic_write(site / INDEX_HTML, render_index(index))
    nojekyll = site / ".nojekyll"
    if not nojekyll.exists():
        atomic_write(nojekyll, "")


def _read_report(report: Path) -> dict:
    path = report / "report.json"
    if not path.is_file():
        raise ArchiveError(f"{report}: no report.json (archive a folder written by perfreport compare --out)")
    return read_report(path, error=ArchiveError)


def _stage_release(site: Path, tag: str, report: Path, entry: dict) -> Path | None:
    """Copy the report set into ``releases/TAG`` by way of a temporary folder; returns the folder
    an existing release was set aside to (deleted once the new index is written). Only regular
    files are copied: a symbolic link in a report folder could point at any file of the machine,
    and the site is published."""
    releases = site / RELEASES
    releases.mkdir(parents=True, exist_ok=True)
    tmp = releases / f".tmp-{tag}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        checkpoint("archive.staging")
        (tmp / ID_FILE).write_text(entry["id"], encoding="utf-8")
        for name in REPORT_FILES:
            source = report / name
            if not source.exists() and not source.is_symlink():
                continue
            if source.is_symlink() or not source.is_file():
                raise ArchiveError(f"{source}: not a regular file (a link or a folder); a report folder to archive "
                                   "holds the files perfreport wrote")
            if name == "report.json":  # both sides' analyses: a few MB that gzip shrinks 20-30x
                name_gz = name + ".gz"
                with open(source, "rb") as src, gzip.GzipFile(tmp / name_gz, "wb", mtime=0) as dst:
                    shutil.copyfileobj(src, dst)
                entry["files"].append(f"{RELEASES}/{tag}/{name_gz}")
            else:
                shutil.copyfile(source, tmp / name)
                entry["files"].append(f"{RELEASES}/{tag}/{name}")
        checkpoint("archive.staged")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # (a kill here leaves it to the next run's recover)
        raise
    target = releases / tag
    old = None
    if target.exists():
        old = releases / f".old-{tag}-{uuid.uuid4().hex[:8]}"
        os.replace(target, old)
        checkpoint("archive.aside")
    os.replace(tmp, target)
    return old
