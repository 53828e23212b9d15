"""perfreport.running.collector: the console script's process leaves what its imports made out of
the garbage collector's passes; a program that imports perfreport keeps its collector as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TRACE = Path(__file__).parent / "data" / "traces" / "hta_a100_alexnet_benchmark"

SCRIPT = """
import gc, sys
from perfreport.running import lifecycle
frozen = []
lifecycle.exit_now = lambda code: (frozen.append(gc.get_freeze_count()), code)  # (run() ends here)
sys.argv = ["perfreport", "analyze", {trace!r}, "--format", "json", "--out", {out!r}, "-q"]
if {console}:
    from perfreport.cli import run
    run()
else:
    from perfreport.cli import main
    main(sys.argv[1:])
    frozen.append(gc.get_freeze_count())
print(frozen[0], gc.isenabled())
"""


def _frozen(console: bool, out: Path) -> tuple[int, str]:
    script = SCRIPT.format(trace=str(TRACE), out=str(out), console=console)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    frozen, enabled = done.stdout.split()[-2:]  # (after what the command printed)
    return int(frozen), enabled


def test_the_console_script_freezes_its_imports_and_stops_collecting_for_its_reports_a_library_caller_is_left_alone(tmp_path: Path) -> None:
    """The console path (``run``): once the command's imports are done, the objects they made
    (pandas, numpy, the analyses: ~60,000 container objects) are frozen, and once only the
    reports are left to write the collector is stopped (the process ends after them).
    ``cli.main`` called from a program freezes nothing and leaves the collector running."""
    frozen, enabled = _frozen(True, tmp_path / "console")
    assert frozen > 30_000 and enabled == "False", (frozen, enabled)
    frozen, enabled = _frozen(False, tmp_path / "library")
    assert frozen == 0 and enabled == "True", (frozen, enabled)


def test_the_collector_is_paused_inside_the_block_and_as_it_was_after() -> None:
    """``paused`` (the figures drawn in the command's process) turns the collector off inside
    the block and leaves it as it found it: on again after, and off when it was off."""
    import gc

    from perfreport.running.collector import paused

    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
