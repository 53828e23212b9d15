"""The layout of perfreport's JSON documents (perfreport.documents.layout): leaf containers on
one line as msgspec encodes them, the others a member per line; C and Python give the same
bytes, and the JSON reads back as the value."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfreport.documents import layout
from perfreport.documents.layout import laid_out

C_BUILT = layout._layout is not None
BOTH = [pytest.param(True, marks=pytest.mark.skipif(not C_BUILT, reason="C extension not built")), False]

TEXTS = st.text(alphabet=st.sampled_from(list('ab"\\{}[],:\n µ\u2028')), max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | TEXTS
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXTS, inner, max_size=4),
                      max_leaves=30)


def test_the_layout_of_a_document() -> None:
    value = {"a": [], "b": {}, "c": [1, 2.5, None, 'x"y]'], "d": [{"k": 1, "l": [1]}, {"k": 2}],
             "e": {"x": {"y": 1}}, "rows": [{"step": 1, "us": 0.5}, {"step": 2, "us": None}]}
    want = b"""{
  "a": [],
  "b": {},
  "c": [1,2.5,null,"x\\"y]"],
  "d": [
    {
      "k": 1,
      "l": [1]
    },
    {"k":2}
  ],
  "e": {
    "x": {"y":1}
  },
  "rows": [
    {"step":1,"us":0.5},
    {"step":2,"us":null}
  ]
}"""
    for use_c in (True, False) if C_BUILT else (False,):
        assert laid_out(msgspec.json.encode(value), use_c=use_c) == want
        nested = laid_out(msgspec.json.encode(value["d"]), 2, use_c=use_c)
        assert nested == b'[\n      {\n        "k": 1,\n        "l": [1]\n      },\n      {"k":2}\n    ]'


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(0, 3))
def test_c_and_python_lay_out_alike_and_the_json_is_the_value(value, depth) -> None:
    compact = msgspec.json.encode(value)
    out = laid_out(compact, depth, use_c=False)
    if C_BUILT:
        assert laid_out(compact, depth, use_c=True) == out
    assert json.loads(out) == json.loads(compact)
    lines = out.split(b"\n")
    assert len(lines) == _lines(value)
    assert all(line.startswith(b"  " * (depth + 1)) for line in lines[1:-1])  # nested lines: from `depth` in
    if len(lines) > 1:  # (its closing bracket: at `depth`)
        assert lines[-1].startswith(b"  " * depth) and lines[-1].strip() in (b"]", b"}")


def _lines(value) -> int:
    """Lines the layout gives ``value``: a scalar or a leaf one, a container of containers its
    opening and closing lines and its members' lines."""
    members = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    if not any(isinstance(m, (dict, list)) for m in members):
        return 1
    return 2 + sum(_lines(m) for m in members)


@pytest.mark.parametrize("use_c", BOTH)
@pytest.mark.parametrize("text, problem", [(b"[1", "does not end"), (b"[1}", "unmatched"), (b'"ab', "string"),
                                           (b"]", "unmatched"), (b"[1, 2]", "whitespace")])
def test_text_that_is_not_compact_json_is_refused(use_c, text, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        laid_out(text, use_c=use_c)
