"""perfreport.running.heap: a rank's freed temporaries reused in place while it is analysed, the
heap given back after, and nothing changed in a process that only imports perfreport."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perfreport.running import heap

pytestmark = pytest.mark.skipif(heap._LIBC is None, reason="glibc's heap only")

PRELUDE = """
import resource, numpy as np
from perfreport.running import heap

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

n = {n}  # one 'column' (float64)
def churn():  # an analysis's temporaries: made, filled, dropped, ten times over
    a = np.ones(n)  # the first one faults its pages in wherever it is made
    del a
    before = faults()  # the nine others: again (a fresh mapping each) or not (reused)
    for _ in range(9):
        a = np.ones(n)
        del a
    return faults() - before
"""

SCRIPT = PRELUDE + """
if {own}:
    heap.own_the_heap()
with heap.reusing_freed_pages(n):
    inside = churn()
after = churn()
with heap.reusing_freed_pages(n, more_ranks={more}):
    kept = [np.ones(n) for _ in range(3)]  # three columns made and freed inside: kept, then given back
    pin = bytearray(64 << 10)  # above them in the heap: glibc's own trimming (of its top) cannot reach them
    del kept
    held = rss_mb()
after_block = rss_mb()
print(inside, after, round(held), round(after_block))
"""


def _run(own: bool, n: int = 2_500_000, more: bool = False) -> list[int]:
    """(faults of nine temporaries inside the block, the same after it, RSS MB at the block's
    end, RSS MB after it) in a fresh interpreter; a column of ``n`` float64 (20 MB: two pass
    glibc's 32 MiB)."""
    return _python(SCRIPT.format(own=own, n=n, more=more))


def _python(script: str) -> list[int]:
    """The numbers ``script`` prints, run in a fresh interpreter under glibc's own rules."""
    env = {k: v for k, v in os.environ.items()  # glibc's own rules: a MALLOC_*_ variable ends its dynamic one
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return [int(x) for x in out.stdout.split()]


def test_a_ranks_temporaries_reuse_their_pages_and_the_heap_is_given_back_after() -> None:
    """Owned (the console script): after the first of ten 20 MB temporaries in a row, the nine
    others fault no pages in, where after the block glibc maps each one afresh (counts depend on
    transparent huge pages: 10 or 4,883 faults per temporary, so the ratio is asserted); 60 MB freed inside stays in the
    heap until the block ends, then goes back to the system."""
    inside, after, held, after_block = _run(own=True)
    assert 4 * inside < after and after >= 9 * 10, (inside, after)  # (a 20 MB mapping: 10 huge pages at least)
    assert held - after_block > 40, (held, after_block)


def test_a_process_that_imports_perfreport_keeps_glibcs_own_rules() -> None:
    """Not owned (a notebook, the HTA API, the test suite's in-process commands): the block sets
    no threshold, so after it glibc's dynamic rule goes on reusing the heap for 20 MB
    temporaries; the freed heap is given back all the same."""
    inside, after, held, after_block = _run(own=False)
    _, owned_after, _, _ = _run(own=True)
    assert 4 * after < owned_after, (after, owned_after)
    assert after_block <= held, (held, after_block)


def test_a_rank_within_glibcs_own_rule_sets_nothing_and_gives_back() -> None:
    """Owned, but a rank below KEEP_FROM_EVENTS (2 MB columns): glibc's dynamic rule already
    reuses such blocks, so no threshold is set and the rule goes on after the block (a worker's
    next ranks load as the first did); what is freed inside (below a live block) is given back
    at its end (a worker of 16 ranks x 50 MB peaked at 171 MB without, 141-146 MB with)."""
    inside, after, held, after_block = _run(own=True, n=heap.KEEP_FROM_EVENTS - 1)
    assert after < 10, after  # the dynamic threshold still keeps freed 2 MB blocks in the heap
    assert held - after_block > 4, (held, after_block)


def test_the_parent_gives_back_the_heap_of_each_fold_and_of_the_gate(monkeypatch) -> None:
    """A compare's parent unpickles and folds each digest, then runs the gate: transients that
    glibc keeps in its heap (an MI250-grown rank of 7,518 steps: the parent peaked at 276-277 MB
    with them, 244-250 MB without). Each goes back before the next stage is built on top."""
    from perfreport import pipeline
    from perfreport.gate import verdict
    from perfreport.pipeline import compare

    from .conftest import TRACES

    calls: list[str] = []
    monkeypatch.setattr(pipeline, "give_back", lambda: calls.append("give_back"))
    real_add = pipeline.Assembler.add
    monkeypatch.setattr(pipeline.Assembler, "add", lambda self, *a: (calls.append("fold"), real_add(self, *a))[1])
    real_evaluate = verdict.evaluate  # (which a compare imports when it starts)
    monkeypatch.setattr(verdict, "evaluate", lambda *a, **k: (calls.append("gate"), real_evaluate(*a, **k))[1])
    two = TRACES / "hta_sampled_2of128rank"
    compare(two, two, workers=1)
    assert calls == ["fold", "give_back"] * 4 + ["gate", "give_back"], calls


def test_a_small_rank_keeps_its_freed_heap_for_the_next_rank_of_a_worker() -> None:
    """In a local worker (more ranks to come), a rank below KEEP_FOR_NEXT_RANK events leaves its
    freed heap for the next one (the 3 x 3.2 MB freed inside stay resident); a larger one, and
    the last rank of the command's own process, give it back."""
    small = heap.KEEP_FOR_NEXT_RANK - 100_000
    *_, held, after_block = _run(own=True, n=small, more=True)
    assert abs(held - after_block) < 2, (held, after_block)
    *_, held, after_block = _run(own=True, n=small, more=False)
    assert held - after_block > 5, (held, after_block)
    *_, held, after_block = _run(own=True, n=heap.KEEP_FOR_NEXT_RANK + 500_000, more=True)
    assert held - after_block > 15, (held, after_block)


KEPT_SCRIPT = PRELUDE + """
if {own}:
    heap.own_the_heap()
set_ = heap.keep_freed_pages(n)  # the decode: set, and left set
kept = churn()
with heap.reusing_freed_pages(n):  # the analyses' block that follows resets them
    pass
after = churn()
print(int(set_), kept, after)
"""


def test_the_decode_keeps_freed_pages_until_the_analyses_block_resets_the_thresholds() -> None:
    """keep_freed_pages (called by the decode) sets the block's thresholds and leaves them: the
    decode's 20 MB temporaries reuse their pages, and so would the analyses after it; the block
    of the analyses resets them at its end, after which each is mapped afresh again. A process
    that only imports perfreport sets nothing."""
    was_set, kept, after = _python(KEPT_SCRIPT.format(own=True, n=2_500_000))
    assert was_set == 1 and 4 * kept < after and after >= 9 * 10, (was_set, kept, after)
    was_set, _, _ = _python(KEPT_SCRIPT.format(own=False, n=2_500_000))
    assert was_set == 0


FORK_SCRIPT = PRELUDE + """
import os
from perfreport.running import forked

heap.own_the_heap()
heap.keep_freed_pages(n)
kept = [np.ones(n) for _ in range(3)]  # 60 MB made and freed: kept in the heap for reuse
pin = bytearray(64 << 10)
del kept
parent = rss_mb()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    forked._child(os.getppid(), lambda send: send(0, str(rss_mb()).encode()), w)
os.close(w)
data = b""
while chunk := os.read(r, 4096):
    data += chunk
os.waitpid(pid, 0)
child = float(data[12:12 + int.from_bytes(data[4:12], "little")])
print(round(parent), round(child))
"""


def test_a_forked_child_gives_back_the_free_heap_it_inherits() -> None:
    """A forked child (the second half of a rank's analyses, a figure, the attribution) starts
    by giving back the free heap the parent kept for reuse: 60 MB resident in the parent, gone
    from the child before its work runs (writing there would copy each page from the parent)."""
    parent, child = _python(FORK_SCRIPT.format(n=2_500_000))
    assert parent - child > 40, (parent, child)


def test_the_console_scripts_processes_keep_numpys_arrays_on_plain_pages() -> None:
    """Owned (the console script and the workers it forks): numpy stops asking for transparent
    huge pages, which cost a digest 0.6-0.9 s in the kernel where memory was short of free 2 MB
    blocks; a program that only imports perfreport keeps numpy's own setting."""
    script = ("import numpy as np\nfrom perfreport.running import heap\n"
              "switch = np._core.multiarray._set_madvise_hugepage\n"
              "print(int(switch(switch(True))))\n"  # numpy's setting, left as it was
              "heap.own_the_heap()\nprint(int(switch(False)))\n")
    imported, owned = _python(script)
    assert (imported, owned) == (1, 0)


def test_the_reduce_of_digests_from_workers_reuses_its_freed_heap() -> None:
    """keep_freed_heap (the parent, once digests arrive from workers): 40 MB temporaries (past the
    32 MiB where glibc's own rule stops keeping them) made one after the other reuse their pages
    instead of mapping fresh ones, until a worker forked after it sets glibc's thresholds back; in
    a process that does not own the heap (perfreport imported by a program) it changes nothing."""
    script = PRELUDE + """
if {own}:
    heap.own_the_heap()
before = churn()
heap.keep_freed_heap()
kept = churn()
heap.not_kept_in_a_worker()  # a worker forked after it: the columns of its scan mapped again
print(before, kept, churn())
"""
    before, kept, worker = _python(script.format(own=True, n=5_000_000))
    assert 4 * kept < before and before >= 9 * 10, (before, kept)
    assert 4 * kept < worker and worker >= 9 * 10, (kept, worker)
    before, not_owned, _ = _python(script.format(own=False, n=5_000_000))
    assert not_owned >= 9 * 10 and 4 * not_owned >= before, (before, not_owned)


def test_only_a_parent_of_workers_keeps_its_freed_heap(tmp_path, monkeypatch) -> None:
    """The parent keeps its freed heap when the ranks' digests come from worker processes; a
    rank analysed in the command's own process keeps its own rules (perfreport.running.heap)."""
    from perfreport import pipeline
    from perfreport.cli import main

    from .conftest import DATA

    calls = []
    monkeypatch.setattr(pipeline, "keep_freed_heap", lambda: calls.append(os.getpid()))
    job = DATA / "recorded" / "setups" / "fsdp_full_w2_gloo"  # two ranks
    assert main(["analyze", str(job / "rank0.pt.trace.json.gz"), "--out", str(tmp_path / "one"), "--format",
                 "json", "-q"]) == 0
    assert calls == []
    assert main(["analyze", str(job), "--out", str(tmp_path / "two"), "--format", "json", "-q",
                 "--workers", "2"]) == 0
    assert calls and set(calls) == {os.getpid()}
