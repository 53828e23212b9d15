"""Finding and rendering the Jinja2 templates shipped as the ``perfreport.templates`` package.

The top-level ``templates/`` folder is mapped into the wheel as ``perfreport/templates``; in a
source checkout without installation the folder next to the package is used.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from ..units import format_bytes, format_pct, format_us


def templates_dir() -> Path:
    try:
        path = Path(str(resources.files("perfreport.templates")))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "templates"


def environment() -> jinja2.Environment:
    """Templates with autoescaping off (Markdown/text) and the unit formatters as filters."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(us=format_us, pct=format_pct, bytes=format_bytes, md=escape_markdown)
    return env


def escape_markdown(text: object) -> str:
    """Text safe inside a Markdown table cell: no pipes, backticks, mentions or HTML."""
    s = str(text)
    for ch in ("\\", "|", "`", "*", "_", "<", ">", "[", "]"):
        s = s.replace(ch, "\\" + ch)
    return s.replace("@", "@\u200b").replace("\n", " ")


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)
