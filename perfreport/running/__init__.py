"""Running the ranks of a job: one task per rank, and what the command's process keeps of each.

* :mod:`.executor` - the per-rank task (load, then analyse) on worker processes, a Dask cluster
  or this process, and what stops the workers.
* :mod:`.digest` - a rank analysed alone, reduced to its tables and per-rank summaries.
* :mod:`.digest_cache` - a stored baseline's digests, kept beside its columns.
* :mod:`.assemble` - the digests folded in as they arrive, rebuilt as one job for the cross-rank
  analyses.
* :mod:`.heap` - what glibc's heap keeps while a rank is analysed, and gives back after.
* :mod:`.collector` - what Python's garbage collector need not walk again (the imports).
* :mod:`.forked` - work shared with forked children (a rank's analyses, a report's figures).
* :mod:`.lifecycle` - signals, parent death, and the command's exit: no process outlives it.
* :mod:`.progress` - what the terminal shows while the ranks run.
* :mod:`.remote` - ranks on object storage.
"""
