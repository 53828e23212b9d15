"""(baseline, candidate, Config) -> Verdict: every check with its evidence, and pass/warn/fail.

A check's status is one of:

* ``pass`` - within its threshold (or the change is not worse);
* ``warn`` / ``fail`` - beyond its threshold, significant where statistics apply; the check's
  configured ``level`` (structural decreases use ``decrease_level``);
* a *possible regression* - beyond its threshold but not significant or within the noise
  (fewer than ``stats.noise_widths`` noise widths), or too few samples on a side (and no finer
  samples): ``stats.inconclusive_level`` (warn), never above the check's level, with what would
  decide it - no silent pass over an estimate beyond the threshold;
* ``inconclusive`` - a side without the metric, GPUs differ with ``hardware_mismatch =
  "inconclusive"``, or a possible regression with ``stats.inconclusive_level = "pass"``. Shown,
  never a failure.

A check matched by a waiver keeps its status but carries the waiver and does not count. The
overall status is ``fail`` if any counted check fails, else ``warn`` if any warns, else
``pass``. Notes record what a reader must know to trust the verdict: different GPUs, ranks,
world sizes or library versions, steps dropped as warm-up, missing profiler steps, expired
waivers.

Check ids (what waivers match): ``<family>.<name>``, then ``[subject]`` for per-key checks
(a kernel, a collective, ``added: <key>``, a count column), then ``@rank<N>`` for per-rank
checks, e.g. ``relative.step_time``, ``relative.kernel_time[sgemm_128x64]@rank0``,
``structural.memcpy[memcpy_dtoh_count]``.

Modules: :mod:`.checks` (the records and statuses), :mod:`.comparison` (the two sides, grouping,
significance), :mod:`.relative`, :mod:`.absolute` and :mod:`.structural` (the check families),
:mod:`.waivers` and :mod:`.notes`; this module puts them together.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from ..config import Config
from .absolute import absolute_checks
from .checks import FAIL, INCONCLUSIVE, PASS, STATUSES, WARN, Check, Evidence, Note, Threshold, check_id
from .comparison import Comparison
from .metrics import SideData, rank_pairs
from .notes import comparison_notes, gpus_differ
from .efficiency import hardware_note, tensor_core_checks, throughput_checks
from .relative import relative_checks
from .structural import structural_checks
from .waivers import apply_waivers, waiver_matches

FAMILIES = ("relative", "absolute", "structural")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer: overall ``status`` (pass / warn / fail), every check (most severe
    first) and the notes."""

    status: str
    checks: tuple[Check, ...]
    notes: tuple[Note, ...]

    @property
    def findings(self) -> tuple[Check, ...]:
        """Counted checks that warn or fail, failures first."""
        return tuple(c for c in self.checks if c.counts and c.status in (FAIL, WARN))

    def counts(self) -> dict[str, int]:
        """Checks per status (waived ones under "waived" as well as their own status)."""
        out = {s: 0 for s in (PASS, WARN, FAIL, INCONCLUSIVE)}
        for c in self.checks:
            out[c.status] += 1
        out["waived"] = sum(1 for c in self.checks if not c.counts)
        return out


def evaluate(baseline: SideData, candidate: SideData, config: Config, *, today: _dt.date | None = None) -> Verdict:
    """Judge ``candidate`` against ``baseline`` with ``config`` (see the module docstring).

    ``today`` (UTC date) decides which waivers have expired; default: now.
    """
    today = today or _dt.datetime.now(_dt.timezone.utc).date()
    notes = comparison_notes(baseline, candidate, config)
    hardware_differs = gpus_differ(baseline, candidate)
    cmp = Comparison(baseline, candidate, config, rank_pairs(baseline, candidate),
                     hardware_inconclusive=hardware_differs and config.hardware_mismatch == "inconclusive")
    checks = relative_checks(cmp) + absolute_checks(cmp) + structural_checks(cmp) + tensor_core_checks(cmp)
    checks += throughput_checks(cmp)
    notes += cmp.notes
    if hardware_differs and (note := hardware_note(cmp)) is not None:
        notes.append(note)
    checks, waiver_notes = apply_waivers(checks, config.waivers, today)
    order = {s: i for i, s in enumerate(STATUSES)}
    family_order = {f: i for i, f in enumerate(FAMILIES)}
    checks = sorted(checks, key=lambda c: (not c.counts, order[c.status], family_order[c.family]))
    counted = {c.status for c in checks if c.counts}
    status = FAIL if FAIL in counted else WARN if WARN in counted else PASS
    return Verdict(status=status, checks=tuple(checks), notes=tuple(notes + waiver_notes))


__all__ = ["evaluate", "Verdict", "Check", "Evidence", "Threshold", "Note", "check_id", "waiver_matches",
           "PASS", "WARN", "FAIL", "INCONCLUSIVE", "STATUSES"]
