"""Every option and threshold of the gate, as frozen dataclasses; every default named once.

A :class:`Config` is built by a shell (the CLI reads ``perfreport.toml`` or the
``[tool.perfreport]`` table of ``pyproject.toml``) and passed down; nothing below the shells
reads files or the environment. ``Config()`` is the documented default configuration.

Three families of checks, each entry switchable, with a ``level`` ("fail" or "warn") and an
``aggregation`` over ranks ("each": every rank judged on its own steps; "worst": per step, the
worst rank's value; "mean": per step, the mean over ranks):

* ``relative`` - the candidate's per-step values against the baseline's. A check is a finding
  only when the change is worse than its threshold, larger than its floor, statistically
  significant *and* ``stats.noise_widths`` noise widths wide (see :mod:`perfreport.gate.stats`
  and :mod:`perfreport.gate.noise`: runs are the unit where a side has several, matched GPU op
  calls where a side has too few steps); otherwise it is ``inconclusive``.
* ``absolute`` - limits on the candidate alone (idle % at most 50 …), per rank.
* ``structural`` - counts that do not move with noise: kernels, collectives, memory copies,
  synchronisations added or removed, launches per step changed.

``waivers`` silence named checks, each with a reason (and an optional expiry date).

Layering: core module; imports the standard library only (``tomllib``, or ``tomli`` on 3.10).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import ConfigError

# --- vocabulary -----------------------------------------------------------------------------
LEVELS = ("fail", "warn")
AGGREGATIONS = ("each", "worst", "mean")
TESTS = ("mann-whitney", "bootstrap")
HARDWARE_MISMATCH = ("note", "inconclusive")
CONFIG_FILE = "perfreport.toml"
PYPROJECT_FILE = "pyproject.toml"

# --- statistics defaults --------------------------------------------------------------------
DEFAULT_TEST = "mann-whitney"
"""Rank-based, assumption-free and exact for the handful of steps a trace holds; what asv and
google/benchmark use for the same question. ``bootstrap`` (a percentile interval of the ratio
of medians) is offered for users who prefer an interval, but is anti-conservative below ~10
samples per side."""
ALPHA = 0.05
"""One-sided significance level (google/benchmark's level; a one-sided test at 0.05 has the
strictness of a two-sided one at 0.10). The thresholds and floors are what keep repeated runs
quiet - a finding needs a change beyond them *and* significance - so the test only has to rule
out a fluke of a handful of steps; at 0.01, 4 steps per side could never be significant."""
MIN_SAMPLES = 4
"""Per side: the fewest steps that can reach ALPHA (4 vs 4 perfectly separated gives p = 1/70 ≈
0.014; 3 vs 3 at best 0.05). With fewer, a change above its threshold is ``inconclusive``."""
NOISE_WIDTHS = 3.0
"""A relative change must also be this many noise widths wide (standard errors of the change,
measured from the data: between steps, between runs where a side has several, between matched
kernel calls below the step; see :mod:`perfreport.gate.noise`). Three standard errors is the
usual "beyond doubt" for a one-sided question; with the threshold floor it keeps a metric that
swings by tens of % between steps (GPU idle time) from firing on its swings, while a metric as
steady as GPU compute time (under 1 % between steps) is judged at its threshold."""
HOST_WAIT_LEVEL = "warn"
"""Level of a timing finding whose only evidence is host-side wait (the same kernels, counts,
GPU compute, copy, communication and CPU ops; only the time the GPU waited for the host grew)
when neither side has two runs: one run per side cannot tell a slower host from run-to-run
drift of the machine (a real ResNet50 repeat drifted +16 % this way), so it warns and says to
record more baseline runs. "fail" keeps such findings at their check's level."""
INCONCLUSIVE_LEVEL = "warn"
"""Level of a *possible regression*: a relative check whose change is beyond its threshold but
not shown to be beyond noise (not significant, within the noise widths, or too few samples).
A gate that passes over an estimated +11 % because two baseline runs disagreed by 3 % is a
silent pass; "warn" shows it with what would decide it, "fail" blocks on it, "pass" keeps it
an inconclusive check that does not change the verdict."""
INCONCLUSIVE_LEVELS = ("pass", "warn", "fail")
HOST_WAIT_GPU_TOLERANCE_PCT = 2.0
"""GPU work counts as unchanged for the host-wait rule when compute, communication and copy
time per step moved by at most this much (repeats differ by under 1 %)."""
BOOTSTRAP_RESAMPLES = 2000
"""Resamples for the bootstrap interval: the 1 % tails are estimated from ~20 draws each."""
SEED = 0
"""Fixed seed: the same traces always give the same interval and verdict."""

# --- step defaults --------------------------------------------------------------------------
SKIP_FIRST_STEPS = 0
"""Steps dropped at the start of every rank: the profiler's own warm-up is already outside the
recorded steps; raise it for jobs whose first recorded steps compile or autotune."""
LAUNCH_DELAY_CUTOFF_US = 100.0
"""HTA's cutoff: a GPU op starting this long after its launch call returned is an outlier."""
RUNTIME_CUTOFF_US = 50.0
"""HTA's cutoff for a slow launch call; a kernel shorter than its (non-outlier) launch is short."""
AUTO_WARMUP = True
"""Drop leading warm-up steps (compilation, autotuning, allocator growth, the profiler's own
start) automatically: they describe start-up, not the steady state a gate compares."""
WARMUP_THRESHOLD_PCT = 20.0
"""A leading step is warm-up when it is this much slower than the median of the rank's later
steps: far beyond step-to-step jitter (a few %), while a regression that slows every step
moves the median with it and is never dropped."""
MAX_WARMUP_STEPS = 2
"""At most this many leading steps are dropped as warm-up, and never so many that fewer than
two steps remain."""

# --- relative defaults ----------------------------------------------------------------------
STEP_TIME_MAX_INCREASE_PCT = 5.0
"""Half of the 10 % regression a gate must catch, and above the 1-3 % step-time spread of
repeated runs on one machine."""
COMPONENT_MAX_INCREASE_PCT = 10.0
"""GPU busy, communication, memory, idle, kernels, collectives: asv's and CodSpeed's 10 %, as a
warning (they explain a step-time change rather than being one)."""
COMPUTE_MAX_INCREASE_PCT = 5.0
"""GPU compute time per step moves by under 1 % between steps and between runs of one
configuration (the kernels are the same work on the same GPU), so it is held tighter than the
other components and fails: with the noise-width rule a +5 % slowdown of every kernel is
provable on a steady trace, and GPU work that grows is a regression even when the step hides
it behind host-side wait."""
EXPOSED_COMM_MAX_INCREASE_PCT = 10.0
"""Communication no longer hidden under compute adds straight to the step: a failure."""
IDLE_MAX_INCREASE_POINTS = 5.0
"""Idle share of the step (percentage points): half of a 10-point starvation, several times the
spread of repeated runs."""
OVERLAP_MAX_DECREASE_POINTS = 10.0
"""Share of communication hidden under compute (points): losing a tenth of it is a finding."""
MIN_CHANGE_US = 50.0
"""Floor per step: changes of a time smaller than this are never findings (timer resolution and
launch jitter are a few µs per kernel)."""
MIN_CHANGE_STEP_PCT = 1.0
"""Floor as a share of the baseline step time: a component that moves by less than 1 % of the
step cannot move the step by more, however large its own relative change."""
COMPUTE_MIN_CHANGE_STEP_PCT = 0.0
"""Compute has no step-share floor: slower kernels are a regression of the GPU work itself even
while a host-bound job hides them (GPU idle 90 %: +20 % kernels move the step by under 1 %), and
they surface the day the host stops being the bottleneck. Compute is steady enough (under 1 %
between steps and runs) that the threshold, the 50 µs floor, significance and three noise widths
keep repeats quiet."""
TOP_KERNELS = 10
"""Kernels checked one by one: the baseline's largest by time per step (HTA's top-10)."""

# --- absolute defaults (budgets on the candidate; only new violations by default) -------------
IDLE_PCT_MAX = 50.0
"""A GPU idle for more than half of the step is starved (host-bound input, synchronisation)."""
COMPUTE_PCT_MIN = 20.0
"""Below a fifth of the step computing, the GPU mostly waits, copies or communicates."""
OVERLAP_PCT_MIN = 50.0
"""At least half of the communication should be hidden under compute in a tuned job."""
LAUNCH_DELAY_OUTLIERS_MAX = 10.0
"""Per step: a few late launches are scheduling noise, tens mean a starved launch queue."""
LAUNCH_DELAY_OUTLIER_PCT_MAX = 5.0
"""Share of launches delayed beyond the cutoff."""
BLOCKED_LAUNCH_US_MAX = 1000.0
"""Per step: time the CPU spent blocked on a full launch queue (1,024 ops); a millisecond per
step means the host outruns the GPU by a whole queue."""
SHORT_KERNEL_PCT_MAX = 50.0
"""Share of launches whose kernel ran shorter than the launch call itself (launch-bound)."""

# --- structural defaults --------------------------------------------------------------------
COUNT_TOLERANCE = 0.0
"""Counts per step are exact in a deterministic program: any change of the median is reported."""
LAUNCH_TOLERANCE_PCT = 1.0
"""Launches per step may move by 1 % (autotuning, logging every N steps) before being reported."""


@dataclass(frozen=True, slots=True)
class StatsConfig:
    """How significance and noise are decided (see :mod:`perfreport.gate.stats` and
    :mod:`perfreport.gate.noise`), and the level of host-side-wait-only timing findings on one
    run per side (:mod:`perfreport.gate.hostwait`)."""

    test: str = DEFAULT_TEST
    alpha: float = ALPHA
    min_samples: int = MIN_SAMPLES
    noise_widths: float = NOISE_WIDTHS
    host_wait_level: str = HOST_WAIT_LEVEL
    inconclusive_level: str = INCONCLUSIVE_LEVEL
    host_wait_gpu_tolerance_pct: float = HOST_WAIT_GPU_TOLERANCE_PCT
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES
    seed: int = SEED


@dataclass(frozen=True, slots=True)
class StepsConfig:
    """Which steps are samples, and the cutoffs of the per-step launch metrics.

    The last profiler step is always dropped (it is usually cut short by the profiler's stop,
    as HTA assumes); then ``skip_first`` steps per rank; then, with ``auto_warmup``, up to
    ``max_warmup_steps`` leading steps more than ``warmup_threshold_pct`` % slower than the
    median of the later ones (dropped on every rank, so steps stay aligned across ranks)."""

    skip_first: int = SKIP_FIRST_STEPS
    auto_warmup: bool = AUTO_WARMUP
    warmup_threshold_pct: float = WARMUP_THRESHOLD_PCT
    max_warmup_steps: int = MAX_WARMUP_STEPS
    launch_delay_cutoff_us: float = LAUNCH_DELAY_CUTOFF_US
    runtime_cutoff_us: float = RUNTIME_CUTOFF_US


@dataclass(frozen=True, slots=True)
class RelativeCheck:
    """A per-step metric compared with the baseline.

    Exactly one threshold is set, the one matching the metric's bad direction and unit:
    ``max_increase_pct`` (µs or counts that must not grow, % of the baseline median),
    ``max_increase_points`` / ``max_decrease_points`` (percentages, in points). Time metrics
    also have a floor: changes below ``min_change_us`` or ``min_change_step_pct`` % of the
    baseline step time are ignored. ``top`` (kernel_time only) is how many kernels are checked.
    """

    level: str = "warn"
    aggregation: str = "worst"
    max_increase_pct: float | None = None
    max_increase_points: float | None = None
    max_decrease_points: float | None = None
    min_change_us: float = MIN_CHANGE_US
    min_change_step_pct: float = MIN_CHANGE_STEP_PCT
    top: int | None = None
    enabled: bool = True

    @property
    def threshold(self) -> float:
        return next(v for v in (self.max_increase_pct, self.max_increase_points, self.max_decrease_points)
                    if v is not None)

    @property
    def threshold_key(self) -> str:
        return next(k for k in THRESHOLD_KEYS if getattr(self, k) is not None)


THRESHOLD_KEYS = ("max_increase_pct", "max_increase_points", "max_decrease_points")


@dataclass(frozen=True, slots=True)
class AbsoluteCheck:
    """A limit on the candidate's per-step value (median over its steps), per rank.

    One of ``max``/``min`` is set. With ``only_new`` (the default) a limit the baseline already
    breaks is reported as a note on a passing check, not a finding: a budget should not block
    every pull request until old debt is paid, and the relative checks still catch it getting
    worse.
    """

    level: str = "warn"
    aggregation: str = "each"
    max: float | None = None
    min: float | None = None
    only_new: bool = True
    enabled: bool = True

    @property
    def limit(self) -> float:
        return self.max if self.max is not None else self.min  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class StructuralCheck:
    """Noise-free changes: keys (kernels, collectives, copy kinds) added or removed, counts per
    step changed. ``level`` applies to additions and increases, ``decrease_level`` to removals
    and decreases (usually improvements, reported for review). A count changes when the medians
    per step differ by more than ``max(tolerance, tolerance_pct % of the baseline)``."""

    level: str = "fail"
    decrease_level: str = "warn"
    aggregation: str = "each"
    tolerance: float = COUNT_TOLERANCE
    tolerance_pct: float = 0.0
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class Waiver:
    """Silences checks whose id matches ``check`` (a glob, e.g. ``relative.kernel_time[*gemm*]``;
    without ``@rank`` it matches every rank). The reason is shown in every report; after
    ``expires`` (a date, UTC) the waiver no longer applies and a note says so."""

    check: str
    reason: str
    expires: _dt.date | None = None


def _relative(level: str, **kw: Any) -> RelativeCheck:
    return RelativeCheck(level=level, **kw)


def _default_relative() -> dict[str, RelativeCheck]:
    pct = COMPONENT_MAX_INCREASE_PCT
    return {
        "step_time": _relative("fail", max_increase_pct=STEP_TIME_MAX_INCREASE_PCT),
        "gpu_busy": _relative("warn", max_increase_pct=pct),
        "compute": _relative("fail", max_increase_pct=COMPUTE_MAX_INCREASE_PCT,
                             min_change_step_pct=COMPUTE_MIN_CHANGE_STEP_PCT),
        "communication": _relative("warn", max_increase_pct=pct),
        "exposed_communication": _relative("fail", max_increase_pct=EXPOSED_COMM_MAX_INCREASE_PCT),
        "memory": _relative("warn", max_increase_pct=pct),
        "idle": _relative("warn", max_increase_pct=pct),
        "idle_pct": _relative("fail", max_increase_points=IDLE_MAX_INCREASE_POINTS),
        "overlap_pct": _relative("fail", max_decrease_points=OVERLAP_MAX_DECREASE_POINTS),
        "kernel_time": _relative("warn", max_increase_pct=pct, top=TOP_KERNELS),
        "collective_time": _relative("warn", max_increase_pct=pct),
    }


def _default_absolute() -> dict[str, AbsoluteCheck]:
    return {
        "idle_pct": AbsoluteCheck(max=IDLE_PCT_MAX),
        "compute_pct": AbsoluteCheck(min=COMPUTE_PCT_MIN),
        "overlap_pct": AbsoluteCheck(min=OVERLAP_PCT_MIN),
        "launch_delay_outliers": AbsoluteCheck(max=LAUNCH_DELAY_OUTLIERS_MAX),
        "launch_delay_outlier_pct": AbsoluteCheck(max=LAUNCH_DELAY_OUTLIER_PCT_MAX),
        "blocked_launch": AbsoluteCheck(max=BLOCKED_LAUNCH_US_MAX),
        "short_kernel_pct": AbsoluteCheck(max=SHORT_KERNEL_PCT_MAX),
    }


def _default_structural() -> dict[str, StructuralCheck]:
    return {
        # kernel choice can legitimately vary (cuDNN autotuning); their time is checked anyway
        "kernels": StructuralCheck(level="warn"),
        "collectives": StructuralCheck(level="fail"),
        "memcpy": StructuralCheck(level="fail"),
        "syncs": StructuralCheck(level="fail"),
        "launches": StructuralCheck(level="warn", tolerance_pct=LAUNCH_TOLERANCE_PCT),
    }


RELATIVE_CHECKS = tuple(_default_relative())
ABSOLUTE_CHECKS = tuple(_default_absolute())
STRUCTURAL_CHECKS = tuple(_default_structural())


@dataclass(frozen=True, slots=True)
class Config:
    """The whole gate configuration; ``Config()`` is the default.

    ``exact_kernel_names`` compares raw kernel names instead of normalised ones (template
    arguments and Triton suffixes dropped, see :func:`perfreport.analyses.diff.normalize_kernel_name`).
    ``hardware_mismatch``: "note" (default) compares anyway and says so; "inconclusive" also
    turns every relative time check into ``inconclusive`` when the GPUs differ.
    ``source`` names where the configuration came from and ``checksum`` its SHA-256 (for reports).
    """

    stats: StatsConfig = field(default_factory=StatsConfig)
    steps: StepsConfig = field(default_factory=StepsConfig)
    relative: Mapping[str, RelativeCheck] = field(default_factory=_default_relative)
    absolute: Mapping[str, AbsoluteCheck] = field(default_factory=_default_absolute)
    structural: Mapping[str, StructuralCheck] = field(default_factory=_default_structural)
    waivers: tuple[Waiver, ...] = ()
    exact_kernel_names: bool = False
    hardware_mismatch: str = "note"
    source: str = "defaults"
    checksum: str = ""
    """SHA-256 of the configuration file's bytes ("" for the defaults): a report names the exact
    file its thresholds came from, so two runs with different settings cannot pass for one."""

    def __post_init__(self) -> None:
        # read-only views: a Config is shared by every check and must not change under them
        for name in ("relative", "absolute", "structural"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "waivers", tuple(self.waivers))

    def to_dict(self) -> dict:
        """A JSON-ready view (for report.json): every option with its effective value."""
        def plain(obj: Any) -> Any:
            if dataclasses.is_dataclass(obj):
                return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
            if isinstance(obj, Mapping):
                return {k: plain(v) for k, v in obj.items()}
            if isinstance(obj, tuple):
                return [plain(v) for v in obj]
            if isinstance(obj, _dt.date):
                return obj.isoformat()
            return obj
        return plain(self)


# --- loading and validation -------------------------------------------------------------------
def find_config_file(start: Path) -> Path | None:
    """The configuration governing ``start``: ``perfreport.toml``, else a ``pyproject.toml`` with a
    ``[tool.perfreport]`` table, in ``start`` or the nearest parent. The search stops at the
    first folder holding either file (a project root), so a parent project never leaks in."""
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / PYPROJECT_FILE
        if pyproject.is_file():
            return pyproject if "perfreport" in _read_toml(pyproject).get("tool", {}) else None
    return None


def load_config(path: str | Path | None = None, *, search_from: str | Path | None = None) -> Config:
    """Read a configuration file (``perfreport.toml``, or ``pyproject.toml``'s ``[tool.perfreport]``).

    ``path`` None: search from ``search_from`` (default: the current folder) with
    :func:`find_config_file`; defaults when nothing is found. A ``perfreport.toml`` may hold the
    options at its top level or under ``[tool.perfreport]``. Raises ConfigError naming the file
    and the offending key.
    """
    if path is None:
        found = find_config_file(Path(search_from or Path.cwd()).resolve())
        if found is None:
            return Config()
        path = found
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found")
    document = _read_toml(path)
    tool = document.get("tool", {})
    if isinstance(tool, dict) and "perfreport" in tool:
        table = tool["perfreport"]
    elif path.name == PYPROJECT_FILE:
        raise ConfigError(f"{path}: no [tool.perfreport] table")
    else:
        table = document
    config = config_from_mapping(table, source=str(path))
    return dataclasses.replace(config, checksum=file_sha256(path))


def file_sha256(path: Path) -> str:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None


def _read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError(f"{path}: reading TOML on Python 3.10 needs 'tomli' (pip install tomli)") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML (nested too deeply)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None


MAX_INT = 2**53
"""Largest magnitude of a number in a configuration (exact as a float, far inside int64)."""


class _Reader:
    """Validates one mapping against a dataclass: unknown keys and bad values raise ConfigError
    with the file, the dotted key and what was expected."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {problem}")

    def table(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a table, got {_describe(value)}")
        return value

    def unknown(self, table: Mapping, known: tuple[str, ...], prefix: str) -> None:
        for k in table:
            if k not in known:
                hint = difflib.get_close_matches(k, known, n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else f" (known: {', '.join(known)})"
                raise self.fail(_join(prefix, k), f"unknown key{suggestion}")

    def build(self, cls: type, table: Mapping, prefix: str, base: Any) -> Any:
        names = tuple(f.name for f in dataclasses.fields(cls))
        self.unknown(table, names, prefix)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in table:
                values[f.name] = self.value(table[f.name], getattr(base, f.name), _join(prefix, f.name))
        return dataclasses.replace(base, **values)

    def value(self, value: Any, default: Any, key: str) -> Any:
        """``value`` coerced to the type of ``default`` (None defaults take numbers)."""
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {_describe(value)}")
            return value
        if isinstance(default, int) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"expected an integer, got {_describe(value)}")
            if abs(value) > MAX_INT:
                raise self.fail(key, f"out of range: {value:.3g}")
            return value
        if isinstance(default, float) or default is None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise self.fail(key, f"expected a number, got {_describe(value)}")
            if abs(value) > MAX_INT:
                raise self.fail(key, f"out of range: {value:.3g}")
            return float(value)
        if isinstance(default, str):
            if not isinstance(value, str):
                raise self.fail(key, f"expected a string, got {_describe(value)}")
            return value
        raise self.fail(key, "cannot be set here")  # pragma: no cover - every field is covered above


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, dict) else "a table"


def _choice(reader: _Reader, key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise reader.fail(key, f"must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")


TOP_LEVEL_KEYS = ("stats", "steps", "relative", "absolute", "structural", "waivers", "exact_kernel_names",
                  "hardware_mismatch")


def config_from_mapping(table: Mapping[str, Any], *, source: str = "<mapping>") -> Config:
    """A validated Config from the parsed ``[tool.perfreport]`` table; omitted keys keep their
    defaults. Raises ConfigError for unknown keys, wrong types and values out of range."""
    r = _Reader(source)
    table = r.table(table, "[tool.perfreport]")
    r.unknown(table, TOP_LEVEL_KEYS, "")
    base = Config()
    stats = r.build(StatsConfig, r.table(table.get("stats", {}), "stats"), "stats", base.stats)
    steps = r.build(StepsConfig, r.table(table.get("steps", {}), "steps"), "steps", base.steps)
    families = {}
    for family, cls, defaults in (("relative", RelativeCheck, base.relative),
                                  ("absolute", AbsoluteCheck, base.absolute),
                                  ("structural", StructuralCheck, base.structural)):
        given = r.table(table.get(family, {}), family)
        r.unknown(given, tuple(defaults), family)
        merged = dict(defaults)
        for name, sub in given.items():
            key = f"{family}.{name}"
            sub = r.table(sub, key)
            start = defaults[name]
            if family == "relative" and any(k in sub for k in THRESHOLD_KEYS):
                start = dataclasses.replace(start, **{k: None for k in THRESHOLD_KEYS})
            if family == "absolute" and any(k in sub for k in ("max", "min")):
                start = dataclasses.replace(start, max=None, min=None)
            merged[name] = r.build(cls, sub, key, start)
        families[family] = merged
    waivers = _waivers(r, table.get("waivers", []))
    config = Config(stats=stats, steps=steps, relative=families["relative"], absolute=families["absolute"],
                    structural=families["structural"], waivers=waivers,
                    exact_kernel_names=r.value(table.get("exact_kernel_names", False), False, "exact_kernel_names"),
                    hardware_mismatch=r.value(table.get("hardware_mismatch", "note"), "note", "hardware_mismatch"),
                    source=source)
    validate(config)
    return config


def _waivers(r: _Reader, value: Any) -> tuple[Waiver, ...]:
    if not isinstance(value, list):
        raise r.fail("waivers", f"expected an array of tables ([[tool.perfreport.waivers]]), got {_describe(value)}")
    out = []
    for i, item in enumerate(value):
        key = f"waivers[{i}]"
        item = r.table(item, key)
        r.unknown(item, ("check", "reason", "expires"), key)
        for required in ("check", "reason"):
            if not isinstance(item.get(required), str) or not item[required].strip():
                raise r.fail(f"{key}.{required}", "required, a non-empty string")
        expires = item.get("expires")
        if isinstance(expires, str):
            try:
                expires = _dt.date.fromisoformat(expires)
            except ValueError:
                raise r.fail(f"{key}.expires", f"expected a date (YYYY-MM-DD), got {expires!r}") from None
        elif isinstance(expires, _dt.datetime):
            expires = expires.date()
        elif expires is not None and not isinstance(expires, _dt.date):
            raise r.fail(f"{key}.expires", f"expected a date (YYYY-MM-DD), got {_describe(expires)}")
        out.append(Waiver(check=item["check"].strip(), reason=item["reason"].strip(), expires=expires))
    return tuple(out)


def validate(config: Config) -> None:
    """Range and consistency checks (also for Configs built in Python); raises ConfigError."""
    r = _Reader(config.source)
    s = config.stats
    _choice(r, "stats.test", s.test, TESTS)
    if not 0.0 < s.alpha < 0.5:
        raise r.fail("stats.alpha", f"must be between 0 and 0.5, got {s.alpha}")
    _in_range(r, "stats.min_samples", s.min_samples, 2, MAX_MIN_SAMPLES)
    best_p = 1.0 / math.comb(2 * s.min_samples, s.min_samples) if s.min_samples <= 500 else \
        math.exp(-_log_comb(2 * s.min_samples, s.min_samples))  # the exact integer overflows a float
    if s.test == "mann-whitney" and best_p >= s.alpha:
        raise r.fail("stats.min_samples", f"with {s.min_samples} samples per side the smallest possible p-value is "
                     f"{best_p:.3g}, not below stats.alpha = {s.alpha}; raise min_samples or alpha")
    if s.noise_widths < 0:
        raise r.fail("stats.noise_widths", f"must be 0 or more, got {s.noise_widths}")
    _choice(r, "stats.host_wait_level", s.host_wait_level, LEVELS)
    _choice(r, "stats.inconclusive_level", s.inconclusive_level, INCONCLUSIVE_LEVELS)
    if s.host_wait_gpu_tolerance_pct < 0:
        raise r.fail("stats.host_wait_gpu_tolerance_pct", f"must be 0 or more, got {s.host_wait_gpu_tolerance_pct}")
    _in_range(r, "stats.bootstrap_resamples", s.bootstrap_resamples, 100, MAX_BOOTSTRAP_RESAMPLES)
    st = config.steps
    for key in ("skip_first", "max_warmup_steps", "warmup_threshold_pct"):
        if getattr(st, key) < 0:
            raise r.fail(f"steps.{key}", f"must be 0 or more, got {getattr(st, key)}")
    for key in ("launch_delay_cutoff_us", "runtime_cutoff_us"):
        if getattr(st, key) <= 0:
            raise r.fail(f"steps.{key}", f"must be positive, got {getattr(st, key)}")
    _choice(r, "hardware_mismatch", config.hardware_mismatch, HARDWARE_MISMATCH)
    rel_defaults, abs_defaults = _default_relative(), _default_absolute()
    for family, checks in (("relative", config.relative), ("absolute", config.absolute),
                           ("structural", config.structural)):
        known = {"relative": RELATIVE_CHECKS, "absolute": ABSOLUTE_CHECKS, "structural": STRUCTURAL_CHECKS}[family]
        for name in checks:
            if name not in known:
                raise r.fail(f"{family}.{name}", f"unknown check (known: {', '.join(known)})")
        for name, check in checks.items():
            key = f"{family}.{name}"
            _choice(r, f"{key}.level", check.level, LEVELS)
            _choice(r, f"{key}.aggregation", check.aggregation, AGGREGATIONS)
            if isinstance(check, RelativeCheck):
                _validate_relative(r, key, check, rel_defaults[name])
            elif isinstance(check, AbsoluteCheck):
                _validate_absolute(r, key, check, abs_defaults[name])
            else:
                _choice(r, f"{key}.decrease_level", check.decrease_level, LEVELS)
                for k in ("tolerance", "tolerance_pct"):
                    if getattr(check, k) < 0:
                        raise r.fail(f"{key}.{k}", f"must be 0 or more, got {getattr(check, k)}")


def _validate_relative(r: _Reader, key: str, check: RelativeCheck, default: RelativeCheck) -> None:
    allowed = default.threshold_key
    given = [k for k in THRESHOLD_KEYS if getattr(check, k) is not None]
    if given != [allowed]:
        wrong = [k for k in given if k != allowed]
        problem = f"takes {allowed!r}" + (f", not {wrong[0]!r}" if wrong else " (missing)")
        raise r.fail(key, problem)
    if check.threshold < 0:
        raise r.fail(f"{key}.{allowed}", f"must be 0 or more, got {check.threshold}")
    for k in ("min_change_us", "min_change_step_pct"):
        if getattr(check, k) < 0:
            raise r.fail(f"{key}.{k}", f"must be 0 or more, got {getattr(check, k)}")
    if (check.top is None) != (default.top is None):
        raise r.fail(f"{key}.top", "only kernel_time takes 'top'")
    if check.top is not None and check.top < 1:
        raise r.fail(f"{key}.top", f"must be at least 1, got {check.top}")


def _validate_absolute(r: _Reader, key: str, check: AbsoluteCheck, default: AbsoluteCheck) -> None:
    allowed = "max" if default.max is not None else "min"
    given = [k for k in ("max", "min") if getattr(check, k) is not None]
    if given != [allowed]:
        wrong = [k for k in given if k != allowed]
        raise r.fail(key, f"takes {allowed!r}" + (f", not {wrong[0]!r}" if wrong else " (missing)"))
    value = check.max if allowed == "max" else check.min
    if value < 0:
        raise r.fail(f"{key}.{allowed}", f"must be 0 or more, got {value:g}")
    if key.endswith("_pct") and value > 100:
        raise r.fail(f"{key}.{allowed}", f"is a share of the step in %: at most 100, got {value:g}")


MAX_MIN_SAMPLES = 10_000
"""More steps per side than any profiler window records; bounds the exact tests' work."""
MAX_BOOTSTRAP_RESAMPLES = 100_000
"""Resamples × samples are drawn at once (8 bytes each): past 100,000 the interval no longer moves."""


def _in_range(r: _Reader, key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise r.fail(key, f"must be between {low:,} and {high:,}, got {value:,}")


def _log_comb(n: int, k: int) -> float:
    """log C(n, k) without the exact integer (which overflows a float past n ~ 1,030)."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


__all__ = [
    "Config", "StatsConfig", "StepsConfig", "RelativeCheck", "AbsoluteCheck", "StructuralCheck", "Waiver",
    "load_config", "config_from_mapping", "find_config_file", "validate", "LEVELS", "AGGREGATIONS",
    "RELATIVE_CHECKS", "ABSOLUTE_CHECKS", "STRUCTURAL_CHECKS",
]
