"""``perfreport config show``: the configuration a ``compare`` run here would use, as YAML.

A gate's verdict is only as clear as its settings. The report says which file judged the run
(its path and SHA-256); this command prints every value in force — each check's threshold,
floor, level and aggregation, the statistics and step options, the waivers with their expiry,
and the resource limits — after the defaults, the file and ``--limit`` / ``$PERFREPORT_LIMITS``
are combined, so nobody has to merge a TOML file with the documentation in their head.

The output is YAML (readable, diffable, and loadable with any YAML parser); ``--format json``
gives the same mapping as JSON, the ``config`` object of ``report.json`` plus the limits.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
from collections.abc import Mapping
from dataclasses import fields

from .. import __version__

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/ ]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the effective configuration (thresholds, waivers, limits)",
                       description="Print the configuration perfreport compare would use here.")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    s = csub.add_parser("show", help="print the effective thresholds, waivers and limits (YAML)")
    s.add_argument("--config", metavar="FILE", default=None,
                   help="perfreport.toml or pyproject.toml (default: found from the current folder upwards)")
    s.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="a resource limit as compare --limit would set it (repeatable)")
    s.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format (default: yaml)")
    s.set_defaults(run=cmd_show)


def effective(config_path: str | None, limit_items: list[str], *, today: _dt.date | None = None) -> dict:
    """The effective configuration as one plain mapping: source and checksum first, then every
    option, the waivers (each with ``expired``), then the limits in force."""
    from ..config import load_config
    from ..limits import override

    config = load_config(config_path)
    doc = config.to_dict()
    today = today or _dt.datetime.now(_dt.timezone.utc).date()
    waivers = [{**w, "expired": bool(w.get("expires")) and _dt.date.fromisoformat(w["expires"]) < today}
               for w in doc.pop("waivers")]
    out = {"perfreport_version": __version__, "source": doc.pop("source"), "sha256": doc.pop("checksum") or None}
    out.update(doc)
    out["waivers"] = waivers
    with override(limit_items) as limits:
        out["limits"] = {f.name: getattr(limits, f.name) for f in fields(limits)}
    return out


def cmd_show(args: argparse.Namespace) -> int:
    doc = effective(args.config, args.limit)
    if args.format == "json":
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(f"# perfreport {__version__}: effective configuration ({doc['source']})")
        print(to_yaml(doc), end="")
    return 0


# --- a small YAML writer: mappings, lists and scalars (all this command prints) -------------
def to_yaml(value, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return pad + "{}\n"
        lines = []
        for key, item in value.items():
            if _is_block(item):
                lines.append(f"{pad}{_scalar(str(key))}:\n{to_yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{_scalar(str(key))}: {_inline(item)}\n")
        return "".join(lines)
    if isinstance(value, (list, tuple)):
        if not value:
            return pad + "[]\n"
        lines = []
        for item in value:
            if _is_block(item):
                body = to_yaml(item, indent + 2)
                lines.append(f"{pad}- {body[indent + 2:]}")  # the first key on the dash's line
            else:
                lines.append(f"{pad}- {_inline(item)}\n")
        return "".join(lines)
    return pad + _scalar(value) + "\n"


def _is_block(value) -> bool:
    return isinstance(value, (Mapping, list, tuple)) and len(value) > 0


def _inline(value) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return _scalar(value)


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return json.dumps(str(value))
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}{e}{exponent}"  # YAML 1.1 wants 1.0e-09
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and not text.endswith(" "):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar
