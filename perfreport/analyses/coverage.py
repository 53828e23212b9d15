"""Which ranks of a job were traced: a partial job said plainly ("1 of 2 ranks: rank 0 missing").

A job's size comes from the traces themselves: ``distributedInfo.world_size`` of any rank file,
else the rank ids (ranks 0 and 2 traced means rank 1 is missing; a job of ranks 0 and 1 whose
world size is unknown is taken as whole). Cross-rank analyses (stragglers, collective skew, the
spread of kernel time across ranks) can only compare the ranks that were traced: the text says
so, and that with one rank traced they judge nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

CROSS_RANK = "stragglers, collective skew and kernel time across ranks"
"""The analyses that compare ranks with each other."""


def rank_coverage(ranks: Iterable[int], world_sizes: Iterable[int | None] = ()) -> dict | None:
    """``{"world_size", "ranks_traced", "ranks_missing", "text"}`` when ranks are missing from the
    job (by its world size or gaps in the rank ids), else None."""
    present = sorted({int(r) for r in ranks})
    if not present:
        return None
    sizes = [int(w) for w in world_sizes if isinstance(w, int) and w > 0]
    world = max([*sizes, present[-1] + 1])
    missing = sorted(set(range(world)) - set(present))
    if not missing:
        return None
    return {"world_size": world, "ranks_traced": len(present), "ranks_missing": missing,
            "text": coverage_text(len(present), world, missing)}


def coverage_text(traced: int, world: int, missing: list[int]) -> str:
    """"1 of 2 ranks: rank 0 missing; …" with what the cross-rank analyses could not judge."""
    ranks = rank_list(missing)
    head = f"{traced} of {world} ranks: rank{'s' if len(missing) > 1 else ''} {ranks} missing"
    if traced == 1:
        return f"{head}; {CROSS_RANK} need two ranks or more: not judged"
    return f"{head}; {CROSS_RANK} compare the {traced} traced ranks only, so rank{'s' if len(missing) > 1 else ''} " \
           f"{ranks} cannot be judged"


def rank_list(ranks: list[int], limit: int = 8) -> str:
    """Rank ids with runs folded: [0, 1, 2, 5] -> "0–2, 5"; past ``limit`` runs, "… (N in all)"."""
    runs: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    parts = [str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in runs[:limit]]
    return ", ".join(parts) + (f", … ({len(ranks)} in all)" if len(runs) > limit else "")


__all__ = ["rank_coverage", "coverage_text", "rank_list", "CROSS_RANK"]
