"""What ``index.json`` may hold, checked whenever it is read: the site is a branch anyone with
push access can edit, and a wrong type there must be one clear line, never a ``TypeError``
halfway through an update.

An index is ``{"schema_version": int, "generator": str, "releases": [entry, ...]}``; an entry
has a tag (a folder name), an id, an ISO 8601 date in UTC, strings for commit, status, headline
and baseline, the key metrics and kernel times as numbers or null, and the files it keeps, each
under ``releases/TAG/``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping

from ..errors import ArchiveError, printable

TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?)(Z|[+-]\d{2}(?::?\d{2})?)?)?$")
_STRINGS = ("id", "date", "commit", "headline", "baseline")
_OPTIONAL_STRINGS = ("status", "report_created_utc")


def check_tag(tag: str) -> str:
    """A release tag usable as a folder and URL segment."""
    if not isinstance(tag, str) or not TAG.match(tag) or ".." in tag:
        raise ArchiveError(f"release tag {printable(str(tag)[:120])!r}: use letters, digits, '.', '_', '+', '-' "
                           "(up to 100, starting with a letter or digit)")
    return tag


def parse_date(text: str) -> _dt.datetime | None:
    """An ISO 8601 date or date and time (``2026-02-01``, ``2026-02-01T10:30Z``,
    ``2026-02-01 10:30:00+02:00``) as an aware UTC datetime; None for anything else. A date
    alone is midnight UTC; a time without an offset is taken as UTC."""
    m = _ISO.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    day, clock, zone = m.groups()
    if clock:
        clock = re.sub(r"[.,](\d{1,6})\d*", lambda f: "." + f.group(1).ljust(6, "0"), clock)  # 3.10: 6 digits
    if zone in (None, "Z"):
        zone = "+00:00"
    elif len(zone) == 3:
        zone += ":00"
    elif ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    try:
        moment = _dt.datetime.fromisoformat(f"{day}T{clock or '00:00'}{zone}")
        return moment.astimezone(_dt.timezone.utc)
    except (ValueError, OverflowError):
        return None


def release_date(text: str) -> str:
    """``--date`` in the index's form (``2026-02-01T10:30:00+00:00``), or an error saying what is accepted."""
    moment = parse_date(text)
    if moment is None:
        raise ArchiveError(f"--date {printable(str(text)[:60])!r}: not an ISO 8601 date; give e.g. 2026-02-01 or "
                           "2026-02-01T10:30:00Z")
    return moment.replace(microsecond=0).isoformat()


def sort_key(entry: Mapping) -> tuple:
    """Releases in time order (by the instant, whatever offset a date was written with), then by tag."""
    moment = parse_date(entry.get("date", ""))
    return (moment.timestamp() if moment else math.inf, str(entry.get("tag", "")))


def check_index(index: object) -> str | None:
    """The first problem of a parsed ``index.json``, or None."""
    if not isinstance(index, dict) or not isinstance(index.get("releases"), list):
        return "not a perfreport archive index (no releases list)"
    version = index.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        return f"schema_version is {_kind(version)}, not an integer"
    if "generator" in index and not isinstance(index["generator"], str):
        return f"generator is {_kind(index['generator'])}, not a string"
    seen: set[str] = set()
    for i, entry in enumerate(index["releases"]):
        problem = check_entry(entry)
        tag = entry.get("tag") if isinstance(entry, dict) else None
        where = f"release {printable(tag)}" if isinstance(tag, str) and TAG.match(tag) else f"releases[{i}]"
        if problem is None and tag in seen:
            problem = "archived twice"
        if problem:
            return f"{where}: {problem}"
        seen.add(tag)
    return None


def check_entry(entry: object) -> str | None:
    """The first problem of one release entry, or None."""
    if not isinstance(entry, dict):
        return f"is {_kind(entry)}, not an object"
    tag = entry.get("tag")
    if not isinstance(tag, str) or not TAG.match(tag) or ".." in tag:
        return f"tag {printable(str(tag)[:60])!r} is not a release tag"
    for key in _STRINGS:
        if key in entry and not isinstance(entry[key], str):
            return f"{key} is {_kind(entry[key])}, not a string"
    for key in _OPTIONAL_STRINGS:
        if entry.get(key) is not None and not isinstance(entry[key], str):
            return f"{key} is {_kind(entry[key])}, not a string"
    if parse_date(entry.get("date", "")) is None:
        return f"date {printable(str(entry.get('date'))[:40])!r} is not ISO 8601"
    for key, nullable in (("metrics", True), ("kernels", False)):  # a kernel without a time is not kept
        values = entry.get(key, {})
        if not isinstance(values, dict):
            return f"{key} is {_kind(values)}, not an object"
        for name, value in values.items():
            if (value is not None or not nullable) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                        or not math.isfinite(value)):
                return f"{key}.{printable(name[:60])} is {_kind(value)}, not a finite number" + \
                    (" or null" if nullable else "")
    files = entry.get("files", [])
    if not isinstance(files, list):
        return f"files is {_kind(files)}, not a list"
    prefix = f"releases/{tag}/"
    for f in files:
        if not isinstance(f, str) or not f.startswith(prefix) or "/" in f[len(prefix):] or ".." in f:
            return f"file {printable(str(f)[:80])!r} is not a file of releases/{tag}/"
    return None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number" if isinstance(value, int) or math.isfinite(value) else "not finite"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"
