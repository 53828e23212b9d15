"""Trace folders on object storage (``s3://``, ``gs://``, ... through fsspec): one job per rank file.

Only listed and sized here; each rank is read by the task that analyses it
(:func:`perfreport.running.rank_task.run_job`), on a Dask worker close to the data.
"""

from __future__ import annotations

from ..errors import PerfreportError, TraceError
from .executor import RankJob
from ..load.discover import rank_from_file_name

GZIP_RATIO = 15
"""Assumed JSON / gzip size ratio to size workers for remote .json.gz (real traces: 10-20)."""


def remote_jobs(url: str) -> list[RankJob]:
    """The rank files at ``url`` (a file, or a "folder" whose *.json / *.json.gz are ranks)."""
    try:
        import fsspec
    except ImportError:
        raise PerfreportError(f"{url}: remote paths need fsspec (pip install 'perfreport[dask]')") from None
    fs, root = fsspec.core.url_to_fs(url)
    protocol = url.split("://", 1)[0]
    try:
        entries = [fs.info(root)] if fs.isfile(root) else fs.ls(root, detail=True)
    except FileNotFoundError:
        raise TraceError(url, "no such file or directory") from None
    files = sorted((e for e in entries if e.get("type") == "file" and e["name"].endswith((".json", ".json.gz"))),
                   key=lambda e: e["name"])
    if not files:
        raise TraceError(url, "no trace files (*.json or *.json.gz) there")
    jobs = []
    for e in files:
        name = e["name"].rsplit("/", 1)[-1]
        hint = rank_from_file_name(name)
        size = int(e.get("size") or 0) * (GZIP_RATIO if name.endswith(".gz") else 1)
        path = e["name"] if "://" in e["name"] else f"{protocol}://{e['name']}"
        jobs.append(RankJob(path, hint, "file name" if hint is not None else "none", json_bytes=size))
    return jobs
