"""The gate: did the candidate get worse than the baseline, beyond noise?

* :mod:`~perfreport.gate.metrics` - what is measured: metric specs (unit, bad direction,
  source table) and the per-step samples of one side (:class:`SideData`);
* :mod:`~perfreport.gate.keyed` - a side's per-key sample tables (kernels, copies,
  collectives), its keys coded once;
* :mod:`~perfreport.gate.stats` - pure significance tests (Mann-Whitney U, bootstrap);
* :mod:`~perfreport.gate.noise` - noise widths from the data: between steps, between runs,
  between matched GPU op calls (t and sign tests);
* :mod:`~perfreport.gate.hostwait` - whether two sides differ only in host-side wait;
* :mod:`~perfreport.gate.variants` - kernel families whose per-process pick (cuDNN's
  convolution kernels) is no structural change;
* :mod:`~perfreport.gate.verdict` - (baseline, candidate, Config) -> :class:`Verdict`;
* :mod:`~perfreport.gate.baselines` - the versioned, checksummed baseline store (its column
  cache in :mod:`~perfreport.gate.colcache`, several runs in :mod:`~perfreport.gate.baseline_runs`).

Layering: imports core modules (config, model, errors, units) and nothing from ``load``,
``analyses`` functions, ``report`` or the shells; the pipeline builds the inputs.
"""

from importlib import import_module

__all__ = [
    "evaluate", "Verdict", "Check", "Evidence", "Note", "Threshold", "PASS", "WARN", "FAIL", "INCONCLUSIVE",
    "SideData", "side_data", "Metric", "METRICS", "mann_whitney_u", "bootstrap_interval",
]
_HOMES = {**dict.fromkeys(("METRICS", "Metric", "SideData", "side_data"), "metrics"),
          **dict.fromkeys(("bootstrap_interval", "mann_whitney_u"), "stats"),
          **dict.fromkeys(("FAIL", "INCONCLUSIVE", "PASS", "WARN", "Check", "Evidence", "Note", "Threshold", "Verdict",
                           "evaluate"), "verdict")}
"""Where each name of :data:`__all__` is defined. They are imported when first asked for
(PEP 562), not with the package: importing one submodule then loads that submodule alone,
and an ``analyze``, which judges nothing, imports no part of the gate (its import phase 0.37 ->
0.32 s, median of 8 runs on the 2-core VM)."""


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
