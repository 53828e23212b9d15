"""HTA's environment switches, read where HTA reads them (``hta/configs/env_options.py``).

Only ``perfreport.hta`` honours them, so a notebook that sets them for HTA behaves the same;
perfreport's own analyses, reports and gate take their settings from the command line and
``perfreport.toml`` only. Each flag is on when the variable is exactly ``"1"``, as in HTA.
"""

from __future__ import annotations

import os

CP_LAUNCH_EDGE_ENV = "CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE"
"""Add a 0-weight launch edge to every kernel without a launch-delay edge (causality for simulations)."""
CP_LAUNCH_EDGE_SHOW_ENV = "CRITICAL_PATH_SHOW_ZERO_WEIGHT_LAUNCH_EDGE"
"""Draw those 0-weight launch edges in the overlaid trace (``show_all_edges=True``)."""
CP_STRICT_NEG_WEIGHT_CHECK_ENV = "CRITICAL_PATH_STRICT_NEGATIVE_WEIGHT_CHECKS"
"""Raise on a negative edge weight instead of counting it 0."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") == "1"


def critical_path_add_zero_weight_launch_edges() -> bool:
    return _flag(CP_LAUNCH_EDGE_ENV)


def critical_path_show_zero_weight_launch_edges() -> bool:
    return _flag(CP_LAUNCH_EDGE_SHOW_ENV)


def critical_path_strict_negative_weight_check() -> bool:
    return _flag(CP_STRICT_NEG_WEIGHT_CHECK_ENV)


def get_options() -> str:
    """The switches and their values, one per line (HTA's ``get_options``)."""
    return "\n".join(f"{name}={os.environ.get(name, 'unset')}"
                     for name in (CP_LAUNCH_EDGE_ENV, CP_LAUNCH_EDGE_SHOW_ENV, CP_STRICT_NEG_WEIGHT_CHECK_ENV))
