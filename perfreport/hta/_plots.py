"""Showing HTA-style figures with matplotlib (HTA used plotly; the data is the same either way).

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so nothing pops up or
blocks in a script; in a notebook they are displayed inline like HTA's.
"""

from __future__ import annotations

from matplotlib.figure import Figure


def new_figure(width: float = 8.0, height: float = 4.5) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def show(fig: Figure) -> Figure:
    """Display ``fig`` when running under IPython/Jupyter; return it either way."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return fig
    if get_ipython() is not None:
        display(fig)
    return fig
