"""--format benchmark-json (github-action-benchmark customSmallerIsBetter) and bmf (Bencher)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from perfreport.errors import ConfigError
from perfreport.report import parse_formats
from perfreport.report.interop import benchmark_json, bmf

from .conftest import demo_comparison_json

REPO = Path(__file__).resolve().parent.parent
BMF_SCHEMA = {  # bencher.dev/bmf.json
    "type": "object",
    "patternProperties": {".+": {"type": "object", "patternProperties": {".+": {
        "type": "object", "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"},
                                         "upper_value": {"type": "number"}}, "required": ["value"]}}}}}


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(demo_comparison_json())


def test_benchmark_json_carries_the_gate_medians_in_ms(document):
    entries = benchmark_json(document)
    step = next(e for e in entries if e["name"] == "perfreport: step time")
    check = next(c for c in document["checks"] if c["id"] == "relative.step_time")
    assert step["unit"] == "ms" and step["value"] == pytest.approx(check["candidate_value"] / 1000)
    lo, hi = (float(x) for x in step["range"].split(".."))
    assert lo == pytest.approx(min(check["evidence"]["candidate_values"]) / 1000)
    assert hi == pytest.approx(max(check["evidence"]["candidate_values"]) / 1000)
    assert step["extra"].startswith("perfreport fail:")
    assert all(set(e) <= {"name", "unit", "value", "range", "extra"} for e in entries)
    relative = [c for c in document["checks"] if c["family"] == "relative" and c["candidate_value"] is not None]
    assert len(entries) == len(relative)


def test_bmf_is_valid_and_in_nanoseconds(document):
    data = bmf(document)
    jsonschema.validate(data, BMF_SCHEMA)
    check = next(c for c in document["checks"] if c["id"] == "relative.step_time")
    assert data["perfreport: step time"]["latency"]["value"] == pytest.approx(check["candidate_value"] * 1000)
    idle = next(k for k in data if "idle" in k and "percent" in data[k])
    assert 0 <= data[idle]["percent"]["value"] <= 100


def test_overlap_is_exported_as_its_complement():
    doc = {"checks": [{"family": "relative", "name": "overlap_pct", "title": "overlap", "unit": "pct",
                       "worse": "lower", "candidate_value": 80.0, "rank": None, "subject": None,
                       "evidence": {"candidate_values": [70.0, 90.0]}, "status": "pass", "message": ""}]}
    (entry,) = benchmark_json(doc)
    assert entry["name"] == "perfreport: non-overlap" and entry["value"] == 20.0 and entry["range"] == "10..30"


def test_interop_formats_only_when_asked():
    assert "bmf" not in parse_formats("all") and parse_formats("md,bmf,benchmark-json") == ("md", "benchmark-json", "bmf")
    with pytest.raises(ConfigError, match="bmf"):
        parse_formats("bencher")
