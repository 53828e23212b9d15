"""How perfreport's JSON documents are laid out: a *leaf* container (an array or object that
holds no array or object: a table's row, a list of numbers, an empty one) as msgspec encodes it,
on one line; every other container a member per line, indented two spaces a level, a space
after each key's ``:``.

Why not msgspec's ``format(indent=2)``, a value per line: a table's rows are most of a report,
and a field per line made a compare of two many-step ranks write a 1.34 GB report.json, over
two fifths of it newlines, indentation and spaces (a row per line: the same JSON in fewer bytes, written in less
time, and a step per line for ``grep``). The C extension ``_layout`` does it in two passes over
the compact text; :func:`_layout_py` is the same passes in Python, for an install without a
compiler (the tests hold the two to the same bytes)."""

from __future__ import annotations

import re

try:
    from . import _layout  # type: ignore[attr-defined]
except ImportError:  # the extension is optional: no compiler at install time
    _layout = None

INDENT = 2
"""Spaces per level."""

rows_from_columns = getattr(_layout, "rows", None)
"""``rows(keys, columns, n, sep)`` of the C extension (see ``_layout.c``), or None without it:
:class:`~perfreport.documents.jsondoc._RowsJson` then makes a msgspec Struct per row."""


def laid_out(compact: bytes, depth: int = 0, use_c: bool | None = None) -> bytes:
    """``compact`` JSON (no whitespace outside strings, as msgspec encodes it) laid out as the
    module says, its nested lines indented as if the value began ``depth`` levels in. Raises
    ValueError for text that is not compact JSON's brackets and strings. ``use_c`` forces one
    path (tests)."""
    if use_c if use_c is not None else _layout is not None:
        return _layout.layout(compact, depth)
    return _layout_py(compact, depth)


_TOKEN = re.compile(rb'\[[^\[\]{}"\s]*\]|"(?:[^"\\]|\\.)*"|[\[\]{},:]|[^\[\]{},:"\s]+|\s|"', re.S)
"""An array of numbers (or literals) whole, a string, a bracket or separator, a scalar's text,
whitespace, or a lone quote (a string that does not end)."""


def _layout_py(compact: bytes, depth: int = 0) -> bytes:
    """:func:`laid_out` in Python: where each leaf ends found in a first pass over the tokens,
    the text written in a second. An array of numbers is one token (matched in C by the regular
    expression: the checks' per-step samples, most of a document's values outside its tables)."""
    tokens = [m.group() for m in _TOKEN.finditer(bytes(compact))]
    leaf_end, stack = {}, []  # a container's opening token -> the token after it, when a leaf
    for i, t in enumerate(tokens):
        if t in (b"{", b"["):
            if stack:
                stack[-1][2] = False
            stack.append([i, b"}" if t == b"{" else b"]", True])
        elif t in (b"}", b"]"):
            if not stack or stack[-1][1] != t:
                raise ValueError(f"not compact JSON: an unmatched bracket at token {i}")
            opening, _, leaf = stack.pop()
            if leaf:
                leaf_end[opening] = i + 1
        elif t[:1] == b"[" and stack:  # an array of numbers: a container, and a leaf
            stack[-1][2] = False
        elif t == b'"':
            raise ValueError(f"not compact JSON: a string that does not end at token {i}")
        elif t.isspace():
            raise ValueError(f"not compact JSON: whitespace outside a string at token {i}")
    if stack:
        raise ValueError("not compact JSON: a container that does not end")
    out, i, open_ = [], 0, 0

    def line(level: int) -> bytes:
        return b"\n" + b" " * (INDENT * level)

    while i < len(tokens):
        t = tokens[i]
        if t in (b"{", b"["):
            if i in leaf_end:
                out.extend(tokens[i:leaf_end[i]])
                i = leaf_end[i]
                continue
            open_ += 1
            out.append(t + line(depth + open_))
        elif t in (b"}", b"]"):
            open_ -= 1
            out.append(line(depth + open_) + t)
        elif t == b",":
            out.append(b"," + line(depth + open_))
        elif t == b":":
            out.append(b": ")
        else:
            out.append(t)
        i += 1
    return b"".join(out)
