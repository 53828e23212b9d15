"""Edit Kineto trace JSON for the gate's calibration: keep some profiler steps, inject a slowdown
of every kernel, add a D2H copy or a device sync to every step.

Why a JSON editor and not an edit of the loaded columns: the gate must see an edited trace exactly
as it sees a real one, through the same loader, files and cache. Each function takes the parsed
document of one rank file and returns the edited one: ``keep_steps`` leaves its input as it was,
``scale_kernels`` and ``add_per_step`` edit it in place (copying a 300 MB document would cost more
than reading it again). ``read_trace`` / ``write_trace`` move documents to and from files.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np

from perfreport.model import GPU_SIDE_CATEGORIES, KERNEL_CATEGORIES, MEMCPY_CATEGORIES, RUNTIME_CATEGORIES

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def read_trace(path: str | Path) -> dict:
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_trace(doc: dict, path: str | Path) -> Path:
    """Write ``doc`` as gzipped JSON (compresslevel 1: these are scratch files). Encoded in one
    ``json.dumps``: ``json.dump`` to a file takes the encoder's pure-Python path (4 x slower: the
    25 MB triton trace 1.17 s against 0.27 s)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
    return path


def _gpu_side(e: dict) -> bool:
    return e.get("cat") in GPU_SIDE_CATEGORIES


def cpu_steps(doc: dict) -> list[tuple[int, float, float, dict]]:
    """(step number, start µs, end µs, event) of each CPU-side ProfilerStep span, by start."""
    out = []
    for e in doc["traceEvents"]:
        m = STEP.match(str(e.get("name", "")))
        if m and e.get("ph") == "X" and not _gpu_side(e) and "dur" in e:
            out.append((int(m.group(1)), float(e["ts"]), float(e["ts"]) + float(e["dur"]), e))
    return sorted(out, key=lambda s: s[1])


def _correlation(e: dict):
    return (e.get("args") or {}).get("correlation")


def keep_steps(doc: dict, steps: set[int]) -> dict:
    """The trace cut to the CPU time window of ``steps`` (which should be consecutive).

    Kept: metadata (no ``ts``), CPU-side events that start inside the window, GPU-side events
    whose launch was kept (by correlation id) or, without one, that start between the window's
    start and the last kept GPU event's end, and the flow events of kept launches.
    """
    spans = [(s, b, e) for s, b, e, _ in cpu_steps(doc) if s in steps]
    if not spans:
        raise ValueError(f"none of the steps {sorted(steps)} is in the trace")
    lo, hi = min(b for _, b, _ in spans), max(e for _, _, e in spans)
    events = doc["traceEvents"]
    cpu_kept, correlations = [], set()
    for e in events:
        if "ts" not in e or _gpu_side(e) or e.get("ph") in ("s", "f", "t"):
            continue
        if lo <= float(e["ts"]) < hi:
            cpu_kept.append(e)
            if (c := _correlation(e)) is not None:
                correlations.add(c)
    gpu_kept = [e for e in events if "ts" in e and _gpu_side(e) and _correlation(e) in correlations]
    gpu_end = max((float(e["ts"]) + float(e.get("dur", 0)) for e in gpu_kept), default=hi)
    kept_ids = {id(e) for e in cpu_kept + gpu_kept}
    out = []
    for e in events:
        if "ts" not in e or id(e) in kept_ids:
            out.append(e)
        elif e.get("ph") in ("s", "f", "t"):
            if e.get("id") in correlations or (e.get("args") or {}).get("correlation") in correlations:
                out.append(e)
        elif _gpu_side(e) and _correlation(e) is None and lo <= float(e["ts"]) < gpu_end:
            m = STEP.match(str(e.get("name", "")))
            if not m or int(m.group(1)) in steps:
                out.append(e)
    new = {k: v for k, v in doc.items() if k != "traceEvents"}
    new["traceEvents"] = out  # the same event objects: nothing here changes them
    return new


def scale_kernels(doc: dict, factor: float, name: str | None = None) -> dict:
    """Every kernel (whose name matches the regular expression ``name``, when given) ``factor``
    times longer, and everything after it later by the time added.

    The shift of an event at time t is the time added by kernels that start before t, so the
    order of every pair of events is kept, kernels on one stream never overlap, and a step grows
    by the kernel time added inside it (as if the host waited for the GPU).
    """
    new = doc
    events = new["traceEvents"]
    kernels = [e for e in events if e.get("cat") in KERNEL_CATEGORIES and e.get("ph") == "X" and "dur" in e
               and (name is None or re.search(name, str(e.get("name", ""))))]
    if not kernels:
        raise ValueError("no kernels to scale")
    starts = np.array([float(e["ts"]) for e in kernels])
    order = np.argsort(starts, kind="stable")
    added = np.array([float(e["dur"]) * (factor - 1.0) for e in kernels])[order]
    starts, cum = starts[order], np.r_[0.0, np.cumsum(added)]

    def shift(t: float) -> float:
        return float(cum[np.searchsorted(starts, t, side="left")])

    kernel_ids = {id(e) for e in kernels}
    for e in events:
        if "ts" not in e:
            continue
        t = float(e["ts"])
        if id(e) in kernel_ids:
            e["dur"] = round(float(e["dur"]) * factor, 3)
        elif "dur" in e:
            end = t + float(e["dur"])
            e["dur"] = round(end + shift(end) - (t + shift(t)), 3)
        e["ts"] = round(t + shift(t), 3)
    return new


def _style(events: list[dict], categories: tuple[str, ...], default: str) -> str:
    """The category spelling this trace uses (June-2021 Kineto capitalised them)."""
    return next((e["cat"] for e in events if e.get("cat") in categories), default)


def add_per_step(doc: dict, what: str) -> dict:
    """One extra ``"dtoh"`` (cudaMemcpyAsync + a 4-byte Memcpy DtoH) or ``"sync"``
    (cudaDeviceSynchronize) in every CPU ProfilerStep, 30 µs before the step ends, on the step's thread."""
    new = doc
    events = new["traceEvents"]
    runtime_cat = _style(events, RUNTIME_CATEGORIES, "cuda_runtime")
    kernel = next((e for e in events if e.get("cat") in KERNEL_CATEGORIES and e.get("ph") == "X"), None)
    if what == "dtoh" and kernel is None:
        raise ValueError("no kernel to take the GPU's pid and stream from")
    next_corr = 1 + max((int(c) for e in events if isinstance(c := _correlation(e), (int, float))), default=0)
    added = []
    for _, _, end, step in cpu_steps(new):
        t = round(end - 30.0, 3)
        if what == "sync":
            added.append({"ph": "X", "cat": runtime_cat, "name": "cudaDeviceSynchronize", "pid": step["pid"],
                          "tid": step["tid"], "ts": t, "dur": 10.0, "args": {}})
            continue
        if what != "dtoh":
            raise ValueError(f"unknown injection {what!r}")
        kargs = kernel.get("args") or {}
        added.append({"ph": "X", "cat": runtime_cat, "name": "cudaMemcpyAsync", "pid": step["pid"],
                      "tid": step["tid"], "ts": t, "dur": 8.0, "args": {"correlation": next_corr}})
        added.append({"ph": "X", "cat": _style(events, MEMCPY_CATEGORIES, "gpu_memcpy"),
                      "name": "Memcpy DtoH (Device -> Pinned)", "pid": kernel["pid"], "tid": kernel["tid"],
                      "ts": round(t + 4.0, 3), "dur": 1.5,
                      "args": {"device": kargs.get("device", 0), "stream": kargs.get("stream", kernel["tid"]),
                               "correlation": next_corr, "bytes": 4, "memory bandwidth (GB/s)": 0.003}})
        next_corr += 1
    events.extend(added)
    return new


__all__ = ["read_trace", "write_trace", "cpu_steps", "keep_steps", "scale_kernels", "add_per_step"]
