"""HTA's figures: interactive plotly when plotly is installed (``perfreport[notebook]``),
static matplotlib otherwise; the data and the charts are the same either way.

Each chart function takes what it draws and ``image_renderer`` (HTA's argument), builds the
figure with whichever library is present and hands it to :func:`emit`:

* inside IPython/Jupyter: displayed inline; with plotly through ``fig.show(renderer=
  image_renderer)``, as HTA (``"notebook"``, ``"jupyterlab"``, ...);
* a browser renderer (``"browser"``, ``"firefox"``, ...) opens the browser from a script too;
* in a plain script: the figure is written (HTML for plotly, PNG for matplotlib) to
  ``$PERFREPORT_FIGURES_DIR`` (default ``<temp dir>/perfreport-figures``) and its path printed
  on stderr, so a figure is never silently dropped.

Matplotlib figures use ``matplotlib.figure.Figure`` (no pyplot state): nothing blocks a script.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile
from itertools import count
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..storing.atomic import atomic_write_bytes

_serial = count(1)
# plotly renderers that show something outside a notebook (the others display notebook output,
# which a plain script would drop)
_SCRIPT_RENDERERS = frozenset({"browser", "firefox", "chrome", "chromium"})
_LABEL_CHARS = 60


def plotly_available() -> bool:
    try:
        import plotly.graph_objects  # noqa: F401
    except ImportError:
        return False
    return True


def in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def new_figure(width: float = 8.0, height: float = 4.5) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def figures_dir() -> Path:
    return Path(os.environ.get("PERFREPORT_FIGURES_DIR") or Path(tempfile.gettempdir()) / "perfreport-figures")


def _file_for(title: str, suffix: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_")[:80] or "figure"
    return figures_dir() / f"{os.getpid()}_{next(_serial):04d}_{slug}{suffix}"


def emit(fig, title: str, image_renderer: str | None = None):
    """Show ``fig`` (plotly or matplotlib) as the module docstring says; return it."""
    if isinstance(fig, Figure):
        if in_ipython():
            from IPython.display import display

            display(fig)
            return fig
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        path = _file_for(title, ".png")
        atomic_write_bytes(path, buf.getvalue())
    else:
        if in_ipython() or (image_renderer in _SCRIPT_RENDERERS):
            fig.show(renderer=image_renderer or None)
            return fig
        path = _file_for(title, ".html")
        js = path.parent / "plotly.min.js"  # once per folder, next to the pages: viewable offline
        if not js.exists():
            from plotly.offline import get_plotlyjs

            atomic_write_bytes(js, get_plotlyjs().encode("utf-8"))
        atomic_write_bytes(path, fig.to_html(include_plotlyjs="directory").encode("utf-8"))
    print(f"perfreport.hta: figure \"{title}\" written to {path}", file=sys.stderr)
    return fig


def short_label(text: str) -> str:
    text = str(text)
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


# --- charts -------------------------------------------------------------------------------
def pie(labels, values, title: str, image_renderer: str | None = None):
    """One pie with percentages (HTA: ``px.pie``)."""
    labels, values = [str(x) for x in labels], np.asarray(values, dtype=np.float64)
    if plotly_available():
        import plotly.graph_objects as go

        fig = go.Figure(go.Pie(labels=labels, values=values, textinfo="percent"))
        fig.update_layout(title_text=title, height=500, showlegend=True,
                          margin=dict(l=50, r=50, b=50, t=50),
                          legend=dict(yanchor="bottom", y=-0.4, xanchor="left", x=0))
        return emit(fig, title, image_renderer)
    fig = new_figure(8, 5.5)
    ax = fig.add_subplot()
    _mpl_pie(ax, labels, values)
    ax.set_title(title)
    return emit(fig, title, image_renderer)


def pies(panels: list[tuple[str, list, np.ndarray]], title: str, image_renderer: str | None = None):
    """One pie per panel ``(subtitle, labels, values)``, two per row (HTA's per-rank pies)."""
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    if plotly_available():
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(rows=rows, cols=2, specs=[[{"type": "domain"}] * 2] * rows)
        for i, (sub, labels, values) in enumerate(panels):
            fig.add_trace(go.Pie(labels=[str(x) for x in labels], values=np.asarray(values, dtype=np.float64),
                                 title=sub, textinfo="percent", automargin=False), i // 2 + 1, i % 2 + 1)
        fig.update_layout(title_text=title, showlegend=True, height=400 * (1 + len(panels) / 2),
                          margin=dict(l=50, r=50, b=50, t=50),
                          legend=dict(yanchor="bottom", y=-0.1, xanchor="left", x=0))
        return emit(fig, title, image_renderer)
    fig = new_figure(5.5 * cols + 1, 4.0 * rows + 1)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (sub, labels, values) in zip(axes, panels):
        _mpl_pie(ax, [str(x) for x in labels], np.asarray(values, dtype=np.float64))
        ax.set_title(sub)
    for ax in axes[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    return emit(fig, title, image_renderer)


def _mpl_pie(ax, labels: list[str], values: np.ndarray) -> None:
    keep = values > 0
    wedges, *_ = ax.pie(values[keep], autopct="%1.1f%%", pctdistance=0.8, textprops={"fontsize": 7})
    ax.legend(wedges, [short_label(x) for x, k in zip(labels, keep) if k], fontsize=6, loc="upper left",
              bbox_to_anchor=(0.9, 1.0), frameon=False)


def range_bars(panels: list[tuple[str, str, pd.DataFrame]], title: str, image_renderer: str | None = None):
    """Per panel ``(figure title, name, frame with rank / mean (us) / min (us) / max (us))``: mean
    duration per rank with min..max error bars (HTA: one ``px.bar`` per kernel or annotation).

    plotly draws one figure per panel, as HTA; matplotlib one figure titled ``title`` with a
    panel each (in a script a static file per kernel would be dozens of files)."""
    if plotly_available():
        import plotly.express as px

        figs = []
        for name, _, df in panels:
            fig = px.bar(df, x="rank", y="mean (us)", title=name,
                         labels={"rank": "Rank", "mean (us)": "Mean Duration (us)"},
                         error_y=df["max (us)"] - df["mean (us)"], error_y_minus=df["mean (us)"] - df["min (us)"])
            fig.update_layout(title_text=name, xaxis=dict(tickmode="linear", tick0=0, dtick=1))
            figs.append(emit(fig, name, image_renderer))
        return figs
    if not panels:
        return []
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    fig = new_figure(6.0 * cols, 3.2 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (_, name, df) in zip(axes, panels):
        mean = df["mean (us)"].to_numpy(np.float64)
        err = np.vstack([mean - df["min (us)"].to_numpy(np.float64), df["max (us)"].to_numpy(np.float64) - mean])
        ax.bar(df["rank"].astype(str), mean, yerr=err, capsize=3)
        ax.set_title(short_label(name), fontsize=8)
        ax.set_xlabel("Rank")
        ax.set_ylabel("Mean Duration (us)")
    for ax in axes[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    return [emit(fig, title, image_renderer)]


def stacked_bars(df: pd.DataFrame, x: str, ycols: list[str], title: str, xlabel: str, ylabel: str,
                 legend_title: str = "", image_renderer: str | None = None):
    """Bars of ``ycols`` stacked per ``x`` (HTA: ``px.bar(df, x, ycols)``)."""
    if plotly_available():
        import plotly.express as px

        fig = px.bar(df, x=x, y=ycols, title=title, labels={x: xlabel})
        fig.update_layout(xaxis_title=xlabel, yaxis_title=ylabel, legend_title=legend_title,
                          xaxis=dict(type="category"))
        return emit(fig, title, image_renderer)
    fig = new_figure()
    ax = fig.add_subplot()
    bottom = np.zeros(len(df))
    labels = df[x].astype(str).to_numpy()
    for col in ycols:
        values = df[col].fillna(0).to_numpy(np.float64)
        ax.bar(labels, values, bottom=bottom, label=str(col))
        bottom += values
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(title=legend_title or None)
    return emit(fig, title, image_renderer)


def histogram(values, bins: int, title: str, xlabel: str, image_renderer: str | None = None):
    values = np.asarray(values, dtype=np.float64)
    if plotly_available():
        import plotly.express as px

        fig = px.histogram(pd.DataFrame({xlabel: values}), x=xlabel, nbins=bins, title=title)
        fig.update_layout(yaxis_title="count")
        return emit(fig, title, image_renderer)
    fig = new_figure()
    ax = fig.add_subplot()
    ax.hist(values, bins=bins)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    return emit(fig, title, image_renderer)


def bars(labels, values, title: str, xlabel: str, ylabel: str, image_renderer: str | None = None):
    labels = [str(x) for x in labels]
    if plotly_available():
        import plotly.graph_objects as go

        fig = go.Figure(go.Bar(x=labels, y=np.asarray(values, dtype=np.float64)))
        fig.update_layout(title_text=title, xaxis_title=xlabel, yaxis_title=ylabel, xaxis=dict(type="category"))
        return emit(fig, title, image_renderer)
    fig = new_figure()
    ax = fig.add_subplot()
    ax.bar(labels, np.asarray(values, dtype=np.float64))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return emit(fig, title, image_renderer)


def table(frame: pd.DataFrame, title: str, image_renderer: str | None = None, max_rows: int = 30):
    """A table figure (HTA: ``go.Table``); matplotlib shows the first ``max_rows`` rows."""
    if plotly_available():
        import plotly.graph_objects as go

        fig = go.Figure(go.Table(header=dict(values=list(frame.columns)),
                                 cells=dict(values=[frame[c].tolist() for c in frame.columns])))
        fig.update_layout(title=title)
        return emit(fig, title, image_renderer)
    shown = frame.head(max_rows).copy()
    for c in shown.columns:  # numbers to 3 decimals, long names cut
        col = shown[c]
        shown[c] = col.round(3).astype(str) if col.dtype.kind == "f" else col.astype(str).map(
            lambda x: x if len(x) <= 48 else x[:47] + "…")
    fig = new_figure(16, 0.28 * (len(shown) + 1) + 1.0)
    ax = fig.subplots()
    ax.axis("off")
    note = f" (first {max_rows} of {len(frame)} rows)" if len(frame) > max_rows else ""
    ax.set_title(title + note)
    if len(shown):
        tab = ax.table(cellText=shown.to_numpy(), colLabels=list(shown.columns), loc="upper center",
                       cellLoc="left")
        tab.auto_set_font_size(False)
        tab.set_fontsize(7)
        tab.auto_set_column_width(list(range(len(shown.columns))))
    return emit(fig, title, image_renderer)


def grouped_bars(names: list[str], series: list[tuple[str, np.ndarray]], title: str, ylabel: str,
                 show_image: bool = True, export_image_path: str | None = None, _static: bool = False):
    """Bars of each ``(label, values)`` side by side per name (TraceDiff's charts)."""
    names = [short_label(n) for n in names]
    if plotly_available() and not _static:
        import plotly.graph_objects as go

        fig = go.Figure([go.Bar(name=label, x=names, y=np.asarray(v, dtype=np.float64)) for label, v in series])
        fig.update_layout(barmode="group", title_text=title, yaxis_title=ylabel, height=800)
        if export_image_path and str(export_image_path).lower().endswith((".html", ".htm")):
            atomic_write_bytes(Path(export_image_path), fig.to_html(include_plotlyjs=True).encode("utf-8"))
        elif export_image_path:  # static formats: matplotlib (plotly's image export needs kaleido)
            grouped_bars(names, series, title, ylabel, False, export_image_path, _static=True)
        if show_image:
            emit(fig, title)
        return None
    x = np.arange(len(names))
    width = 0.8 / max(1, len(series))
    fig = new_figure(max(8.0, 0.3 * len(names) + 2), 8.0)
    ax = fig.add_subplot()
    for k, (label, values) in enumerate(series):
        ax.bar(x + (k - (len(series) - 1) / 2) * width, np.asarray(values, dtype=np.float64), width, label=label)
    ax.set_xticks(x, names, rotation=90, fontsize=7)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend()
    if export_image_path:
        fig.savefig(export_image_path)
    if show_image:
        emit(fig, title)
    return None
