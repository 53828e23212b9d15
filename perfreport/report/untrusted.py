"""Reading a ``report.json`` that may come from someone else: the one place its shape is checked.

In the fork-safe GitHub flow (a ``workflow_run`` job with a write token commenting on a fork's
PR) and in ``archive add``, the report folder is an artifact of a run the attacker controls. A
crafted document must end in one line naming the file, exit 2 — never a ``RecursionError`` from
a document nested thousands deep, a ``TypeError`` from a string where a number belongs, or an
absurd figure from ``1e999``. So before anything reads it, :func:`read_report` checks:

- size (:data:`MAX_DOCUMENT_BYTES`) and JSON syntax (``NaN``/``Infinity`` literals refused);
- nesting depth (:data:`MAX_DEPTH`; perfreport's own documents are about 8 deep), walked
  without recursion;
- every number: an integer within int64, a float finite;
- the JSON type of every field the report schema (``report-schema.json``, the same file
  ``docs/report-schema.md`` describes) names, wherever it appears: a ``rank`` is an integer, a
  ``checks`` entry an object, a ``candidate_value`` a number or null. Fields the schema does not
  name are let through (a newer perfreport may add some); required fields are not enforced
  (readers take a missing field as absent). A multi-candidate document (``compare BASE A B``)
  is checked as its comparisons and setups (:data:`_MULTI`).

What the checks cannot foresee (a value of the right type that a renderer still cannot use) is
caught by :func:`consuming`, which turns it into the same one line naming the file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from ..errors import PerfreportError, printable

MAX_DOCUMENT_BYTES = 256 << 20
"""report.json read at most: a 1 GB trace's report is a few MB; an artifact could be anything."""
MAX_DEPTH = 64
"""Nesting levels accepted: far above perfreport's own documents, far below any stack limit."""
INT64 = 1 << 63
_SCHEMA = Path(__file__).with_name("report-schema.json")


class DocumentError(PerfreportError):
    """A report document that cannot be used; the message names the file."""


def read_report(path: str | Path, *, error: type[PerfreportError] = DocumentError) -> dict:
    """The checked document of ``path`` (a ``report.json``), or ``error`` naming the file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise error(f"{path}: {size:,} bytes is over the {MAX_DOCUMENT_BYTES:,}-byte limit for a report document")
        with open(path, "rb") as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read the report ({exc.strerror or exc})") from None
    try:
        document = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{path}: not a perfreport report: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read the report ({str(exc)[:200]})") from None
    if not isinstance(document, dict):
        raise error(f"{path}: not a perfreport report document (not a JSON object)")
    problem = check_document(document)
    if problem:
        raise error(f"{path}: not a perfreport report: {problem}")
    return document


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def check_document(document: Mapping) -> str | None:
    """The first problem of a parsed document's shape (see the module docstring), or None.

    Walked with a stack, not recursion. A value's place is kept as a (parent's place, key) pair
    and spelled out only for the problem found: a report of many ranks holds ~10^5 values."""
    defs = _schema()["$defs"]
    top = defs.get({"perfreport.compare": "comparison_document", MULTI_KIND: "multi_document"}.get(
        document.get("kind"), "summary_document"))
    stack: list[tuple[object, dict | None, tuple | None, int]] = [(document, top, None, 1)]
    while stack:
        value, spec, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"{_where(where)}: nested deeper than {MAX_DEPTH} levels"
        kind = _KINDS.get(type(value)) or _kind(value)
        if kind == "integer" and not -INT64 <= value < INT64:
            return f"{_where(where)}: integer {str(value)[:30]} is beyond int64"
        if kind == "number" and not math.isfinite(value):
            return f"{_where(where)}: {value} is not a finite number"
        if spec is not None:
            while spec is not None and "$ref" in spec:
                spec = defs.get(spec["$ref"].rsplit("/", 1)[-1])
            problem = spec is not None and _type_problem(value, kind, spec)
            if problem:
                return f"{_where(where)}: {problem}"
        if kind == "object":
            props = (spec or {}).get("properties", {})
            extra = (spec or {}).get("additionalProperties")
            extra = extra if isinstance(extra, dict) else None
            for key, item in value.items():
                stack.append((item, props.get(key, extra), (where, key), depth + 1))
        elif kind == "array":
            items = (spec or {}).get("items")
            items = items if isinstance(items, dict) else None
            for i, item in enumerate(value):
                stack.append((item, items, (where, i), depth + 1))
    return None


def _type_problem(value: object, kind: str, spec: dict) -> str | None:
    """What is wrong with a value of JSON type ``kind`` where ``spec`` (a schema entry) applies."""
    if "type" in spec:
        allowed = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        if kind not in allowed and not (kind == "integer" and "number" in allowed):
            return f"expected {' or '.join(allowed)}, got {'a number' if kind in ('integer', 'number') else kind}"
    elif "enum" in spec and value not in spec["enum"] and not any(_kind(v) == kind for v in spec["enum"]):
        return f"expected one of {', '.join(map(str, spec['enum']))[:120]}"
    return None


_KINDS = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
          dict: "object"}
"""The JSON type of each Python type json.loads makes; anything else goes through :func:`_kind`."""


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _where(where: tuple | None) -> str:
    """A place kept as nested (parent, key) pairs, spelled ``comparisons[0].checks[3].rank``."""
    path = []
    while where is not None:
        where, key = where
        path.append(key)
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in reversed(path)).lstrip(".") or "the document"
    return printable(text[:200])


MULTI_KIND = "perfreport.compare-multi"
_MULTI = {"type": "object", "properties": {
    "status": {"type": "string"}, "headline": {"type": "string"}, "created_utc": {"type": "string"},
    "setups": {"type": "array", "items": {"$ref": "#/$defs/side"}},
    "comparisons": {"type": "array", "items": {"$ref": "#/$defs/comparison_document"}}}}
"""Several candidates against one baseline (:mod:`perfreport.report.setups`): each comparison
is a comparison document without its sides, each setup a side."""


@lru_cache(maxsize=1)
def _schema() -> dict:
    schema = json.loads(_SCHEMA.read_text(encoding="utf-8"))
    schema["$defs"].setdefault("multi_document", _MULTI)
    return schema


@contextmanager
def consuming(path: str | Path, *, error: type[PerfreportError] = DocumentError) -> Iterator[None]:
    """Run what reads a checked document: a value the shape check let through but a renderer
    cannot use (a bug for documents perfreport wrote; an attack for the others) becomes one line
    naming the file instead of an internal error."""
    try:
        yield
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as exc:
        raise error(f"{path}: not a usable perfreport report ({type(exc).__name__}: {str(exc)[:160]})") from None
