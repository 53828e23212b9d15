"""Waivers: which checks a waiver covers, and marking them (a waived check keeps its status but
does not count); expired waivers and waivers that match nothing become notes."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import replace

from ..config import Waiver
from .checks import Check, Note, check_id


def waiver_matches(pattern: str, check: Check) -> bool:
    """Whether a waiver's ``check`` pattern covers ``check``: ``*`` matches any text, ``?`` one
    character, everything else literally (``[`` included); a pattern without ``@rank`` covers
    every rank."""
    regex = re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern) + r"\Z")
    without_rank = check_id(check.family, check.name, check.subject)
    return bool(regex.match(check.id) or ("@rank" not in pattern and regex.match(without_rank)))


def apply_waivers(checks: list[Check], waivers: tuple[Waiver, ...], today: _dt.date) -> tuple[list[Check], list[Note]]:
    """``checks`` with the first matching active waiver attached, and the waiver notes."""
    notes = []
    active = []
    for w in waivers:
        if w.expires is not None and w.expires < today:
            notes.append(Note("waiver", f"waiver for {w.check!r} expired on {w.expires.isoformat()} "
                                        f"(reason: {w.reason}); it no longer applies"))
        else:
            active.append(w)
    out, used = [], set()
    for check in checks:
        match = next((w for w in active if waiver_matches(w.check, check)), None)
        if match is not None:
            used.add(match.check)
            check = replace(check, waiver=match)
        out.append(check)
    for w in active:
        if w.check not in used:
            notes.append(Note("waiver", f"waiver for {w.check!r} matches no check (reason: {w.reason})"))
    return out, notes
