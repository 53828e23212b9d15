"""Findings: the checks of a ``report.json`` grouped the way a person reads them.

The gate judges each rank on its own, so one new device-to-host copy on 8 ranks is 8 checks
(plus one per rank for each changed count). A reader wants one line: "device-to-host copies
per step 0 → 1 on ranks 0–7". :func:`group_findings` is the one definition of that grouping;
every renderer (terminal, Markdown, HTML, PDF, JUnit) and the GitHub annotations use it, and
the per-rank detail stays in the document (each group keeps its check dicts).

Rules, applied in order:

1. Checks with the same status, family, check name, subject and waiver state form one group
   across ranks; for counts (``unit == "count"``) the change must also be the same
   (baseline and candidate medians), so "2 → 3 on ranks 0–3" and "2 → 4 on rank 4" stay apart.
2. Structural "added: X" / "removed: X" groups of one check name, status and rank set are
   folded into one finding ("6 kernels added on rank 0: …"), since they are usually one change
   (cuDNN picked other kernels).
3. Order: severity (fail, warn, inconclusive, pass), counted before waived, step time first,
   then relative, structural, absolute checks, then the larger change, the more ranks, the title.
4. A relative check the gate could not prove beyond noise (``evidence.possible_regression``)
   says so first: "possible regression: step time +11.0 % (…)".

Pure and deterministic: the same checks give the same groups in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..units import format_us, format_value

STATUS_ORDER = ("fail", "warn", "inconclusive", "pass")
FAMILY_ORDER = ("relative", "structural", "absolute")
FOLDED_CHANGES = ("added", "removed")
"""Structural subjects ("added: X") folded into one finding per check name, status and ranks."""
LISTED_NAMES = 3
"""Names listed in the summary of a folded finding; the rest are counted ("and 3 more")."""


@dataclass(frozen=True)
class FindingGroup:
    """One finding: checks that say the same thing, across ranks and related subjects."""

    status: str
    """"fail" | "warn" | "inconclusive" | "pass" (the status every check in the group has)."""
    family: str
    """relative | absolute | structural."""
    name: str
    """Check name, e.g. "memcpy", "step_time", "kernel_time"."""
    subject: str | None
    """The checks' subject ("memcpy_dtoh_count", "added: foo"); "added"/"removed" for a folded group."""
    title: str
    """Human title without ranks: "device-to-host copies per step", "kernel time [sgemm]"."""
    ranks: tuple[int, ...]
    """Ranks the finding covers, sorted (empty for job-level checks)."""
    ranks_text: str
    """"ranks 0–7", "ranks 0, 2, 5", "rank 3"; "" for job-level checks."""
    summary: str
    """One line: "device-to-host copies per step 0 → 1 on ranks 0–7"."""
    check_ids: tuple[str, ...]
    checks: tuple[dict, ...]
    """The ``report.json`` check dicts of the group (per-rank detail), in document order."""
    waived: bool = False
    """True when every check of the group is waived (shown, not part of the verdict)."""

    @property
    def counted(self) -> bool:
        return not self.waived

    @property
    def id(self) -> str:
        """A stable name for the finding (JUnit test case, annotation title): the check id for
        one check, else ``family.name[subject]`` with the ranks, e.g.
        ``structural.memcpy[memcpy_dtoh_count]@ranks0-7``."""
        if len(self.check_ids) == 1:
            return self.check_ids[0]
        out = f"{self.family}.{self.name}" + (f"[{self.subject}]" if self.subject else "")
        return out + ("@" + self.ranks_text.replace(" ", "").replace("–", "-") if self.ranks else "")


def group_findings(checks: Sequence[dict]) -> list[FindingGroup]:
    """report.json "checks" -> groups: same family/name/subject/status (and same change where it
    is a count) across ranks = one group; severity first (fail, warn, inconclusive, pass), then by
    importance/magnitude. See the module docstring for the rules."""
    buckets: dict[tuple, list[dict]] = {}
    for c in checks:
        if isinstance(c, dict):
            buckets.setdefault(_group_key(c), []).append(c)
    folds: dict[tuple, list[list[dict]]] = {}
    singles: list[list[dict]] = []
    for members in buckets.values():
        fold = _fold_key(members)
        if fold is None:
            singles.append(members)
        else:
            folds.setdefault(fold, []).append(members)
    groups = [_single_group(m) for m in singles]
    for parts in folds.values():
        groups.append(_single_group(parts[0]) if len(parts) == 1 else _folded_group(parts))
    return sorted(groups, key=_order)


def ranks_text(ranks: Iterable[int], *, max_parts: int = 6) -> str:
    """``[0..7]`` -> "ranks 0–7"; ``[0, 2, 5]`` -> "ranks 0, 2, 5"; ``[3]`` -> "rank 3"; runs of
    consecutive ranks become ranges, and past ``max_parts`` pieces the rest is counted."""
    rs = sorted(set(int(r) for r in ranks))
    if not rs:
        return ""
    if len(rs) == 1:
        return f"rank {rs[0]}"
    parts: list[str] = []
    start = prev = rs[0]
    for r in rs[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}, {prev}" if prev == start + 1 else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    text = ", ".join(parts[:max_parts])
    if len(parts) > max_parts:
        rest = len(rs) - sum(_count(p) for p in parts[:max_parts])
        text += f" and {rest} more"
    return f"ranks {text}"


def _count(part: str) -> int:
    if "–" in part:
        a, b = part.split("–")
        return int(b) - int(a) + 1
    return part.count(",") + 1


def _group_key(c: dict) -> tuple:
    waived = not c.get("counted", not c.get("waiver"))
    key = (str(c.get("status")), str(c.get("family")), str(c.get("name")), c.get("subject"), waived)
    if c.get("unit") == "count":
        key += (c.get("baseline_value"), c.get("candidate_value"))
    return key


def _fold_key(members: list[dict]) -> tuple | None:
    c = members[0]
    subject = c.get("subject") or ""
    change = subject.split(":", 1)[0]
    if c.get("family") != "structural" or change not in FOLDED_CHANGES or ":" not in subject:
        return None
    return (str(c.get("status")), str(c.get("name")), change, _ranks(members),
            not c.get("counted", not c.get("waiver")))


def _ranks(members: Iterable[dict]) -> tuple[int, ...]:
    return tuple(sorted({int(c["rank"]) for c in members if c.get("rank") is not None}))


def _single_group(members: list[dict]) -> FindingGroup:
    c = members[0]
    ranks = _ranks(members)
    rt = ranks_text(ranks)
    title = _title(c)
    summary = _summary(title, members)
    return FindingGroup(
        status=str(c.get("status")), family=str(c.get("family")), name=str(c.get("name")), subject=c.get("subject"),
        title=title, ranks=ranks, ranks_text=rt, summary=f"{summary} on {rt}" if rt else summary,
        check_ids=tuple(str(m.get("id")) for m in members), checks=tuple(members),
        waived=not c.get("counted", not c.get("waiver")))


def _folded_group(parts: list[list[dict]]) -> FindingGroup:
    """Several "added: X" (or "removed: X") groups of one check and rank set as one finding."""
    parts = sorted(parts, key=lambda m: (-abs(_num(m[0].get("delta"))), str(m[0].get("subject"))))
    c = parts[0][0]
    change = str(c.get("subject")).split(":", 1)[0]
    noun = _NOUNS.get(str(c.get("name")), str(c.get("name")))
    ranks = _ranks(m for part in parts for m in part)
    rt = ranks_text(ranks)
    title = f"{noun} {change}"
    listed = [f"{_subject_name(p[0])} ({_calls(p[0])}/step)" for p in parts[:LISTED_NAMES]]
    more = f" and {len(parts) - LISTED_NAMES} more" if len(parts) > LISTED_NAMES else ""
    summary = f"{len(parts)} {noun} {change}" + (f" on {rt}" if rt else "") + ": " + ", ".join(listed) + more
    members = [m for part in parts for m in part]
    return FindingGroup(
        status=str(c.get("status")), family="structural", name=str(c.get("name")), subject=change, title=title,
        ranks=ranks, ranks_text=rt, summary=summary, check_ids=tuple(str(m.get("id")) for m in members),
        checks=tuple(members), waived=not c.get("counted", not c.get("waiver")))


_NOUNS = {"kernels": "kernels", "memcpy": "copy kinds", "collectives": "collectives"}
_SINGULAR = {"kernels": "kernel", "copy kinds": "copy kind", "collectives": "collective"}


def _subject_name(c: dict) -> str:
    return str(c.get("subject") or "").split(":", 1)[-1].strip()


def _calls(c: dict) -> str:
    value = c.get("candidate_value") if str(c.get("subject", "")).startswith("added") else c.get("baseline_value")
    return f"{_num(value):g}"


def _title(c: dict) -> str:
    """The check's name for people, without ranks: "step time", "kernel time [sgemm]",
    "device-to-host copies per step", "kernel added: sgemm"."""
    label = str(c.get("label") or c.get("name") or "?")
    subject = c.get("subject")
    family = c.get("family")
    if family == "structural":
        if c.get("name") == "tensor_cores":  # subjects are op labels ("aten::mm [...]"), not "added: name"
            return f"fell off the Tensor Cores: {subject}, Tensor Core share" if subject else \
                "Tensor Core share of matrix ops"
        if subject and ":" in subject:
            change, name = subject.split(":", 1)
            noun = _NOUNS.get(str(c.get("name")), str(c.get("name")))
            if change in FOLDED_CHANGES:
                return f"{_SINGULAR.get(noun, noun)} {change}: {name.strip()}"
            return f"{name.strip()} per step"
        if c.get("unit") == "count" and c.get("baseline_value") is not None:
            return f"{label} per step"
        return _NOUNS.get(str(c.get("name")), label) + " added or removed"
    return f"{label} [{subject}]" if subject else label


def _summary(title: str, members: list[dict]) -> str:
    """One line without the ranks (the caller appends them)."""
    c = members[0]
    unit = c.get("unit")
    b = [m.get("baseline_value") for m in members]
    v = [m.get("candidate_value") for m in members]
    if c.get("family") == "structural":
        if c.get("baseline_value") is None:  # "no kernels added or removed" summaries
            text = str(c.get("message") or title)
            return text.split(": ", 1)[1] if text.startswith("rank ") and ": " in text else text
        if unit == "count":
            calls = " calls per step" if ":" in str(c.get("subject") or "") else ""
            return f"{title} {_num(c.get('baseline_value')):g} → {_num(c.get('candidate_value')):g}{calls}"
    if c.get("family") == "absolute":
        limit = ((c.get("threshold") or {}).get("text") or "").strip()
        return f"{title} {_span(v, unit)}" + (f" (limit {limit}; baseline {_span(b, unit)})" if limit else "")
    # relative (and anything else): the change, the values, the evidence
    if any((m.get("evidence") or {}).get("possible_regression") for m in members):
        title = f"possible regression: {title}"
    if len(members) == 1:
        p = (c.get("evidence") or {}).get("p_value")
        p_text = f", p = {p:.2g}" if isinstance(p, (int, float)) and math.isfinite(p) else ""
        return f"{title} {_change(c)} ({_pair(b, v, unit)}{_per_step(unit)}{p_text})"
    changes = [_change(m) for m in sorted(members, key=lambda m: _num(m.get("delta_pct") or m.get("delta")))]
    change = changes[0] if changes[0] == changes[-1] else f"{changes[0]} to {changes[-1]}"
    return f"{title} {change} ({_pair(b, v, unit)}{_per_step(unit)})"


def _per_step(unit: str | None) -> str:
    return "/step" if unit == "us" else ""


def _change(c: dict) -> str:
    delta, pct, unit = c.get("delta"), c.get("delta_pct"), c.get("unit")
    if delta is None:
        return "n/a"
    if unit == "pct":
        return f"{delta:+.1f} points"
    if pct is not None and unit != "count":
        return f"{pct:+.1f} %"
    if unit == "us":  # from zero: no percentage, the time itself
        return ("+" if delta >= 0 else "−") + format_us(abs(delta))
    return f"{delta:+g}"


def _pair(b: Sequence, c: Sequence, unit: str | None) -> str:
    """"126.55 → 176.47 ms": the baseline's unit dropped when both sides share it."""
    left, right = _span(b, unit), _span(c, unit)
    suffix = right[right.rfind(" "):] if " " in right else ""
    if suffix and left.endswith(suffix) and " " not in left[: -len(suffix)]:
        left = left[: -len(suffix)]
    return f"{left} → {right}"


def _span(values: Sequence, unit: str | None) -> str:
    """One value, or "lo–hi" over the ranks of a group."""
    xs = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    if not xs:
        return "n/a"
    lo, hi = format_value(min(xs), unit), format_value(max(xs), unit)
    if lo == hi:
        return lo
    suffix = hi[hi.rfind(" "):] if " " in hi else ""
    return f"{lo[: -len(suffix)] if suffix and lo.endswith(suffix) else lo}–{hi}"


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else 0.0


def _magnitude(g: FindingGroup) -> float:
    """How big the change is, comparable within a family: the largest |change %| (a count added
    from zero counts as 100 % per call)."""
    out = 0.0
    for c in g.checks:
        pct = c.get("delta_pct")
        out = max(out, abs(_num(pct)) if pct is not None else 100.0 * abs(_num(c.get("delta"))))
    return out


def _order(g: FindingGroup) -> tuple:
    status = STATUS_ORDER.index(g.status) if g.status in STATUS_ORDER else len(STATUS_ORDER)
    family = FAMILY_ORDER.index(g.family) if g.family in FAMILY_ORDER else len(FAMILY_ORDER)
    return (status, g.waived, g.name != "step_time", family, -_magnitude(g), -len(g.ranks), g.title, g.check_ids)


__all__ = ["FindingGroup", "group_findings", "ranks_text", "STATUS_ORDER"]
