"""Notes: what a reader must know to trust a verdict - different GPUs, ranks, world sizes or
library versions, steps dropped or missing, too few samples."""

from __future__ import annotations

from ..analyses.coverage import rank_coverage
from ..config import Config
from .checks import Note
from .metrics import SideData, rank_pairs


def gpus_differ(b: SideData, c: SideData) -> bool:
    """Whether both sides name their GPUs and the sets differ."""
    bg = {g for g in b.gpus.values() if g}
    cg = {g for g in c.gpus.values() if g}
    return bool(bg and cg and bg != cg)


def comparison_notes(b: SideData, c: SideData, config: Config) -> list[Note]:
    """The notes on the two sides of a comparison (waiver notes come from :mod:`.waivers`)."""
    notes = []
    if gpus_differ(b, c):
        bg = ", ".join(sorted({g for g in b.gpus.values() if g}))
        cg = ", ".join(sorted({g for g in c.gpus.values() if g}))
        effect = ("relative checks beyond their thresholds are inconclusive"
                  if config.hardware_mismatch == "inconclusive" else "times are compared as they are")
        notes.append(Note("hardware", f"baseline recorded on {bg}, candidate on {cg}: {effect}"))
    if set(b.ranks) != set(c.ranks):
        only_b = sorted(set(b.ranks) - set(c.ranks))
        only_c = sorted(set(c.ranks) - set(b.ranks))
        text = f"ranks differ: baseline {len(b.ranks)} rank(s), candidate {len(c.ranks)}"
        if only_b:
            text += f"; only in the baseline: {_ranks(only_b)}"
        if only_c:
            text += f"; only in the candidate: {_ranks(only_c)}"
        pairs = rank_pairs(b, c)
        if pairs and pairs[0][0] != pairs[0][1]:
            text += "; no rank in common, so ranks are compared in order: " + ", ".join(
                f"rank {x} with rank {y}" for x, y in pairs[:8]) + (" …" if len(pairs) > 8 else "")
        elif not pairs:
            text += "; per-rank checks compare the mean over ranks instead"
        notes.append(Note("ranks", text))
    for side, data in (("baseline", b), ("candidate", c)):
        coverage = rank_coverage(data.ranks, [data.world_size])
        if coverage:
            notes.append(Note("ranks", f"{side}: {coverage['text']}"))
    if b.world_size and c.world_size and b.world_size != c.world_size:
        notes.append(Note("ranks", f"world size differs: {b.world_size} in the baseline, "
                                   f"{c.world_size} in the candidate"))
    for key in sorted(set(b.versions or {}) & set(c.versions or {})):
        if b.versions[key] != c.versions[key]:
            notes.append(Note("versions", f"{key} differs: {b.versions[key]} → {c.versions[key]}"))
    if b.runs > 1 or c.runs > 1:
        notes.append(Note("runs", f"{b.runs} baseline run(s) ({len(b.steps)} samples), {c.runs} candidate run(s) "
                                  f"({len(c.steps)} samples): relative checks judge run medians, so drift between "
                                  f"runs widens what counts as a change"))
    for side, data in (("baseline", b), ("candidate", c)):
        if not len(data.steps):
            notes.append(Note("steps", f"the {side} has no samples (no ranks or no events)"))
        elif not data.has_steps:
            notes.append(Note("steps", f"the {side} has no ProfilerStep events: each rank is one sample (the whole "
                                       f"trace), so counts are not per step, and relative checks judge matched GPU "
                                       f"op calls where they apply (kernels, compute, communication, copies) and "
                                       f"are inconclusive elsewhere"))
        elif "gpu_busy_us" in data.steps and data.steps["gpu_busy_us"].isna().all():
            notes.append(Note("steps", f"the {side} has no GPU activity in its steps"))
        if data.warmup_steps:
            notes.append(Note("steps", f"{side}: dropped warm-up step(s) {', '.join(map(str, data.warmup_steps))} "
                                       f"(more than {config.steps.warmup_threshold_pct:g} % slower than the later "
                                       f"steps; steps.auto_warmup)"))
        if data.skipped_steps:
            notes.append(Note("steps", f"{side}: dropped the first {config.steps.skip_first} step(s) of each rank "
                                       f"(steps.skip_first)"))
        n = _samples_per_rank(data)
        if data.has_steps and n < config.stats.min_samples:
            notes.append(Note("steps", f"the {side} has {n} step(s) per rank after dropping the last and warm-up "
                                       f"steps; relative checks need {config.stats.min_samples} to be conclusive "
                                       f"(kernel, compute, communication and copy checks judge matched calls instead)"))
    return notes


def _samples_per_rank(side: SideData) -> int:
    return int(side.steps.groupby(["run", "rank"]).size().min()) if len(side.steps) else 0


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f" and {len(ranks) - 16} more" if len(ranks) > 16 else "")
