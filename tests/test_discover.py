from __future__ import annotations

from pathlib import Path

import pytest

from perfreport.errors import TraceError
from perfreport.load import load
from perfreport.load.discover import discover, rank_from_file_name

from .conftest import TRACES


@pytest.mark.parametrize("name,rank", [
    ("rank-3.Apr_03.pt.trace.json.gz", 3), ("rank3.json", 3), ("sampled_rank_12.json.gz", 12),
    ("worker7.1623212756351.pt.trace.json.gz", 7), ("trace.json", None), ("bench.json.gz", None),
])
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_file_name(name) == rank


def test_folder_lists_only_trace_files(tmp_path: Path) -> None:
    for name in ("rank0.json", "rank1.json.gz", "notes.txt", "rank0_with_counters.json.gz", "overlaid_rank0.json.gz"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "sub").mkdir()
    assert [f.path.name for f in discover(tmp_path)] == ["rank0.json", "rank1.json.gz"]


def test_rank_from_distributed_info_even_when_minified(tmp_path: Path) -> None:
    """HTA's text regex needs a space after the colon; we read the JSON."""
    (tmp_path / "x.json").write_text('{"distributedInfo":{"rank":5,"world_size":8},"traceEvents":[]}')
    traces = load(tmp_path)
    assert traces.rank_ids == [5] and traces[5].meta.rank_source == "distributedInfo"


def test_rank_from_file_name_when_no_distributed_info(tmp_path: Path) -> None:
    (tmp_path / "worker3.json").write_text('{"traceEvents":[]}')
    assert load(tmp_path)[3].meta.rank_source == "file name"


def test_explicit_mapping_wins(tmp_path: Path) -> None:
    src = next((TRACES / "hta_sampled_2of128rank").glob("*rank-0*"))
    traces = load({4: src})
    assert traces.rank_ids == [4] and traces[4].meta.rank_source == "mapping"
    with pytest.raises(TraceError, match="file not found"):
        load({0: tmp_path / "missing.json"})
