"""The command line's entry: ``python -m perfreport`` and the ``perfreport`` console script.

Before anything loads numpy, the process is given one BLAS thread. OpenBLAS (numpy's wheels)
starts a thread per core when numpy is imported, and each spins for about 0.1 s of CPU time
waiting for work: a process that only imports numpy used 0.18-0.20 CPU s instead of 0.07 on
this 2-core VM. perfreport multiplies no matrices; its parallelism is processes. The spin took
a core from the rank's scan and the imports beside it: 0.08 CPU s per command (200 MB
``analyze``, A100 and B200-grown ranks, 6 alternating pairs each: 1.14 -> 1.06 and 1.05 ->
0.965 CPU s). A value the user set is kept. Importing the package loads no numpy, so this
module runs first in both entries.
"""

from __future__ import annotations

import os


def main() -> None:
    """Run the command line (:func:`perfreport.cli.run`) in a process with one BLAS thread."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .cli import run

    run()


if __name__ == "__main__":
    main()
