"""Storing what a command writes, whole or not at all.

* :mod:`.atomic` - files, folders and locks written atomically; the temporaries of killed runs
  found and removed by the next one.
* :mod:`.fileset` - a set of report files (report.json, .html, .md, .pdf ...) replaced together,
  with a marker naming the run that wrote it.
"""
