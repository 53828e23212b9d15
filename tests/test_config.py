"""perfreport.config: defaults, loading perfreport.toml / [tool.perfreport], and validation
errors that name the file and the key."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math

import pytest

from perfreport.config import (
    ABSOLUTE_CHECKS, COMPUTE_MAX_INCREASE_PCT, RELATIVE_CHECKS, STEP_TIME_MAX_INCREASE_PCT, STRUCTURAL_CHECKS,
    AbsoluteCheck, Config, config_from_mapping, find_config_file, load_config,
    validate,
)
from perfreport.errors import ConfigError
from perfreport.gate.metrics import ABSOLUTE_METRICS, LOWER, METRICS, RELATIVE_METRICS, STRUCTURAL_COUNTS


def test_defaults_are_valid_and_cover_every_check():
    config = Config()
    validate(config)
    assert set(config.relative) == set(RELATIVE_METRICS) == set(RELATIVE_CHECKS)
    assert set(config.absolute) == set(ABSOLUTE_METRICS) == set(ABSOLUTE_CHECKS)
    assert set(config.structural) == set(STRUCTURAL_COUNTS) == set(STRUCTURAL_CHECKS)
    assert config.stats.alpha == 0.05 and config.stats.min_samples == 4
    # with the default alpha, min_samples per side can reach significance: 1 / C(8, 4) < 0.05
    assert 1 / math.comb(2 * config.stats.min_samples, config.stats.min_samples) < config.stats.alpha


def test_threshold_keys_agree_with_metric_directions():
    """One definition of 'which way is worse': the metric's. The config's threshold key must match."""
    for name, check in Config().relative.items():
        metric = METRICS[RELATIVE_METRICS[name]]
        key = check.threshold_key
        assert key.startswith("max_decrease") == (metric.worse == LOWER), name
        assert key.endswith("_points") == (metric.unit == "pct"), name
    for name, check in Config().absolute.items():
        metric = METRICS[ABSOLUTE_METRICS[name]]
        assert (check.min is not None) == (metric.worse == LOWER), name


def test_perfreport_toml_at_top_level(tmp_path):
    path = tmp_path / "perfreport.toml"
    path.write_text("""
exact_kernel_names = true
[stats]
alpha = 0.01
min_samples = 6
[relative.step_time]
max_increase_pct = 3
aggregation = "each"
[absolute.idle_pct]
max = 30
level = "fail"
[structural.kernels]
level = "fail"
[[waivers]]
check = "relative.kernel_time[*gemm*]"
reason = "new GEMM tiling, tracked in #123"
expires = 2030-01-31
""")
    c = load_config(path)
    assert c.source == str(path)
    assert c.exact_kernel_names is True
    assert (c.stats.alpha, c.stats.min_samples) == (0.01, 6)
    st = c.relative["step_time"]
    assert (st.max_increase_pct, st.aggregation, st.level) == (3.0, "each", "fail")  # level kept from defaults
    assert c.relative["gpu_busy"] == Config().relative["gpu_busy"]
    assert (c.absolute["idle_pct"].max, c.absolute["idle_pct"].level) == (30.0, "fail")
    assert c.structural["kernels"].level == "fail"
    (w,) = c.waivers
    assert (w.check, w.expires) == ("relative.kernel_time[*gemm*]", dt.date(2030, 1, 31))


def test_pyproject_table_and_search(tmp_path):
    root = tmp_path / "proj"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.perfreport.relative.idle_pct]\n'
                                         'max_increase_points = 2.5\n')
    assert find_config_file(root / "sub" / "deeper") == root / "pyproject.toml"
    c = load_config(search_from=root / "sub" / "deeper")
    assert c.relative["idle_pct"].max_increase_points == 2.5
    # perfreport.toml wins over pyproject.toml in the same folder
    (root / "perfreport.toml").write_text("[relative.idle_pct]\nmax_increase_points = 7\n")
    assert load_config(search_from=root).relative["idle_pct"].max_increase_points == 7.0
    # a project root without a perfreport table ends the search: defaults
    other = tmp_path / "plain"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "y"\n')
    assert find_config_file(other) is None
    assert load_config(search_from=other) == Config()
    with pytest.raises(ConfigError, match=r"pyproject.toml: no \[tool.perfreport\] table"):
        load_config(other / "pyproject.toml")


@pytest.mark.parametrize("table,message", [
    ({"relative": {"step_tme": {}}}, r"relative.step_tme: unknown key; did you mean 'step_time'\?"),
    ({"relative": {"step_time": {"max_increase": 3}}}, r"relative.step_time.max_increase: unknown key"),
    ({"stats": {"alhpa": 0.1}}, r"stats.alhpa: unknown key; did you mean 'alpha'"),
    ({"thresholds": {}}, r"thresholds: unknown key \(known: stats, steps"),
    ({"relative": {"idle_pct": {"max_increase_pct": 3}}},
     r"relative.idle_pct: takes 'max_increase_points', not 'max_increase_pct'"),
    ({"absolute": {"compute_pct": {"max": 3}}}, r"absolute.compute_pct: takes 'min', not 'max'"),
    ({"relative": {"step_time": {"level": "error"}}}, r"relative.step_time.level: must be one of 'fail', 'warn'"),
    ({"relative": {"step_time": {"aggregation": "max"}}}, r"aggregation: must be one of 'each', 'worst', 'mean'"),
    ({"relative": {"step_time": {"max_increase_pct": "5%"}}}, r"max_increase_pct: expected a number, got str"),
    ({"relative": {"step_time": {"max_increase_pct": -1}}}, r"max_increase_pct: must be 0 or more"),
    ({"relative": {"step_time": {"top": 3}}}, r"relative.step_time.top: only kernel_time takes 'top'"),
    ({"relative": {"kernel_time": {"top": 0}}}, r"kernel_time.top: must be at least 1"),
    ({"stats": {"alpha": 0.7}}, r"stats.alpha: must be between 0 and 0.5"),
    ({"stats": {"min_samples": 3}}, r"smallest possible p-value is 0.05, not below stats.alpha = 0.05"),
    ({"stats": {"test": "t-test"}}, r"stats.test: must be one of 'mann-whitney', 'bootstrap'"),
    ({"stats": {"min_samples": 4.5}}, r"stats.min_samples: expected an integer"),
    ({"steps": {"skip_first": -1}}, r"steps.skip_first: must be 0 or more"),
    ({"hardware_mismatch": "ignore"}, r"hardware_mismatch: must be one of 'note', 'inconclusive'"),
    ({"exact_kernel_names": "yes"}, r"exact_kernel_names: expected true or false"),
    ({"waivers": [{"check": "relative.step_time"}]}, r"waivers\[0\].reason: required"),
    ({"waivers": [{"check": "x", "reason": "y", "expires": "soon"}]}, r"waivers\[0\].expires: expected a date"),
    ({"waivers": {"check": "x"}}, r"waivers: expected an array of tables"),
    ({"structural": {"syncs": {"decrease_level": "ignore"}}}, r"structural.syncs.decrease_level: must be one of"),
])
def test_invalid_values_are_named(table, message):
    with pytest.raises(ConfigError, match=message) as info:
        config_from_mapping(table, source="perfreport.toml")
    assert str(info.value).startswith("perfreport.toml: ")


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "perfreport.toml"
    path.write_text("[relative.step_time\nmax_increase_pct = 3\n")
    with pytest.raises(ConfigError, match=r"perfreport.toml: invalid TOML"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_config_is_read_only_and_serialisable():
    c = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.source = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.relative["step_time"] = None  # type: ignore[index]
    doc = json.loads(json.dumps(c.to_dict()))
    assert doc["relative"]["step_time"]["max_increase_pct"] == 5.0
    assert doc["stats"]["test"] == "mann-whitney"


# --- perfreport config show, and the config named in every report -------------------------------
def test_config_show_prints_the_effective_values_as_yaml(tmp_path, capsys, monkeypatch):
    import hashlib

    import yaml

    from perfreport.cli import main

    path = tmp_path / "perfreport.toml"
    path.write_text('[relative.step_time]\nmax_increase_pct = 3.0\n[absolute.idle_pct]\nmax = 40.0\n'
                    '[[waivers]]\ncheck = "relative.kernel_time[*gemm*]"\nreason = "cuBLAS: #12"\nexpires = 2000-01-01\n')
    monkeypatch.delenv("PERFREPORT_LIMITS", raising=False)
    assert main(["config", "show", "--config", str(path), "--limit", "max_events=1000"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["source"] == str(path) and shown["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert shown["relative"]["step_time"]["max_increase_pct"] == 3.0
    assert shown["relative"]["compute"]["max_increase_pct"] == COMPUTE_MAX_INCREASE_PCT  # a default kept
    assert shown["absolute"]["idle_pct"] == {**dataclasses.asdict(AbsoluteCheck(max=40.0))}
    assert shown["waivers"] == [{"check": "relative.kernel_time[*gemm*]", "reason": "cuBLAS: #12",
                                 "expires": "2000-01-01", "expired": True}]
    assert shown["limits"]["max_events"] == 1000 and shown["limits"]["gzip_ratio"] == 100.0
    assert main(["config", "show", "--config", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["relative"] == shown["relative"]


def test_config_show_defaults_and_a_bad_file(tmp_path, capsys, monkeypatch):
    import yaml

    from perfreport.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["config", "show"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["source"] == "defaults" and shown["sha256"] is None and shown["waivers"] == []
    assert shown["relative"]["step_time"]["max_increase_pct"] == STEP_TIME_MAX_INCREASE_PCT
    (tmp_path / "perfreport.toml").write_text("[relative.step_tme]\n")
    assert main(["config", "show"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "perfreport.toml" in err[0] and "step_tme" in err[0]


def test_yaml_writer_quotes_what_yaml_would_misread():
    import yaml

    from perfreport.commands.config import to_yaml

    value = {"a": "on", "b": "0.1.0", "c": "x: y", "d": [], "e": {}, "f": [{"k": "v", "n": None}], "g": "-1",
             "h": 'say "hi"\n', "i": 1e-9, "j": True}
    assert yaml.safe_load(to_yaml(value)) == value


def test_the_report_names_the_config_file_and_its_checksum(tmp_path):
    import hashlib

    from perfreport.report.comparison import config_line

    path = tmp_path / "perfreport.toml"
    path.write_text("[stats]\nnoise_widths = 2.5\n")
    config = load_config(path)
    assert config.checksum == hashlib.sha256(path.read_bytes()).hexdigest()
    line = config_line({"source": config.source, **config.to_dict()})
    assert f"{path} (SHA-256 {config.checksum[:16]})" in line and f"config show --config {path}" in line
    assert "the defaults" in config_line(Config().to_dict()) and Config().checksum == ""
