"""A set of report files written whole or not at all, with a marker naming the run that wrote it.

The reports of one command (report.json, .html, .md, .pdf, summary.json …) must never be found
half of one run and half of another: a reader would take a set that looks complete and
disagrees with itself. So a set is written as:

1. every file written and fsynced as a hidden temporary beside its target (a kill here leaves
   the previous set untouched; the temporaries are removed by the next run);
2. every file the set replaces or drops hard-linked aside (``.NAME.prev-…``), then the marker
   ``.perfreport-set.json`` written with ``"state": "writing"``, the run id, the new files and
   the backups;
3. the renames, then the previous set's files that the new one does not have removed (an old
   report.pdf beside a new report.json would be a mixed set);
4. the marker rewritten ``"state": "complete"``, the backups deleted.

A failure in steps 2–4 rolls back at once; a kill there (SIGKILL, a power cut) is rolled back by
the next write into that folder, which says so: the previous set returns whole. Writers of one
folder take turns on a lock (``.lock``). A reader that finds the marker ``writing`` knows a
write was interrupted; ``complete`` names the run whose files these all are.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from .atomic import _unlink, checkpoint, clean_stale_temps, fsync_path, note_recovered, store_lock, temp_name

MARKER = ".perfreport-set.json"


def write_set(folder: Path, files: Mapping[str, bytes | str | Iterable[bytes]]) -> list[Path]:
    """Write ``files`` (name -> text, bytes or byte chunks) into ``folder`` as one set (see the
    module's docstring); the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with store_lock(folder):
        recover(folder)
        clean_stale_temps(folder)
        staged = _stage(folder, files)
        try:
            checkpoint("files.staged")
            _swap(folder, staged)
        finally:
            for tmp, _ in staged:
                _unlink(tmp)
    return [target for _, target in staged]


def _stage(folder: Path, files: Mapping[str, bytes | str | Iterable[bytes]]) -> list[tuple[Path, Path]]:
    staged: list[tuple[Path, Path]] = []
    try:
        for name, data in files.items():
            target = folder / name
            ahead = getattr(data, "staged", lambda: None)()  # a JSON document encoded ahead beside its target
            if ahead is not None and Path(ahead).parent == target.parent:
                staged.append((Path(ahead), target))
                with open(ahead, "r+b") as f:
                    data.finish(f)
                    f.flush()
                    os.fsync(f.fileno())
                continue
            tmp = temp_name(target)
            staged.append((tmp, target))
            with open(tmp, "xb") as f:
                if isinstance(data, (str, bytes, bytearray, memoryview)):
                    f.write(data.encode("utf-8") if isinstance(data, str) else data)
                else:
                    for chunk in data:
                        f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp, _ in staged:
            _unlink(tmp)
        raise
    return staged


def _swap(folder: Path, staged: list[tuple[Path, Path]]) -> None:
    previous = read_marker(folder)
    names = [target.name for _, target in staged]
    dropped = [n for n in _list((previous or {}).get("files")) if isinstance(n, str) and n not in names
               and _plain_name(n) and (folder / n).is_file()]
    backups: dict[str, str] = {}
    marker = {"state": "writing", "run": secrets.token_hex(8), "files": names, "dropped": dropped,
              "backups": backups, "previous": previous if previous and previous.get("state") == "complete" else None}
    try:
        for name in names + dropped:
            if (folder / name).is_file():
                backup = temp_name(folder / name, "prev")
                _link_or_copy(folder / name, backup)
                backups[name] = backup.name
        _write_marker(folder, marker)
        for i, (tmp, target) in enumerate(staged):
            os.replace(tmp, target)
            if i == 0:
                checkpoint("files.renaming")
        for name in dropped:
            _unlink(folder / name)
        fsync_path(folder)
        checkpoint("files.renamed")
        _write_marker(folder, {"state": "complete", "run": marker["run"], "files": names,
                               "written_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    except BaseException:
        _roll_back(folder, marker)
        raise
    for backup in backups.values():
        _unlink(folder / backup)


def recover(folder: Path) -> bool:
    """Roll back a set whose writing was interrupted (marker ``writing``): call under the
    folder's lock, so its writer is gone. True when something was rolled back (and said)."""
    marker = read_marker(folder)
    if not marker or marker.get("state") != "writing":
        return False
    _roll_back(folder, marker)
    note_recovered(folder, [n for n in _list(marker.get("files")) if isinstance(n, str)],
                   "an interrupted run left a mixed set of reports; restored the previous set")
    return True


def _roll_back(folder: Path, marker: dict) -> None:
    backups = marker.get("backups") if isinstance(marker.get("backups"), dict) else {}
    names = [n for key in ("files", "dropped") for n in _list(marker.get(key)) if isinstance(n, str) and _plain_name(n)]
    for name in names:
        backup = backups.get(name)
        if isinstance(backup, str) and _plain_name(backup) and (folder / backup).is_file():
            if (folder / name).is_file() and os.path.samefile(folder / backup, folder / name):
                _unlink(folder / backup)  # not renamed yet: (rename between two links of one file does nothing)
            else:
                os.replace(folder / backup, folder / name)
        elif name not in backups:  # new in that run: the previous set did not have it
            _unlink(folder / name)
    previous = marker.get("previous")
    if isinstance(previous, dict):
        _write_marker(folder, previous)
    else:
        _unlink(folder / MARKER)
    fsync_path(folder)


def read_marker(folder: Path) -> dict | None:
    """The set marker of ``folder``; None when missing or unreadable (then no set is known)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), list):
        return None
    return marker


def _write_marker(folder: Path, marker: dict) -> None:
    from .atomic import atomic_write_text

    atomic_write_text(folder / MARKER, json.dumps(marker, indent=1) + "\n")


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _plain_name(name: str) -> bool:
    """A file name inside the folder (a tampered marker must not name ../x or /etc/y)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\0" not in name


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


__all__ = ["write_set", "recover", "read_marker", "MARKER"]
