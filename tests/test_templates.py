"""The report templates are found both in a source checkout and inside an installed wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from perfreport.report.templates import templates_dir

ROOT = Path(__file__).resolve().parents[1]


def test_templates_found_in_the_checkout() -> None:
    assert (templates_dir() / "report.html.j2").is_file()
    assert (templates_dir() / "report.md.j2").is_file()


def test_templates_ship_inside_the_wheel(tmp_path: Path) -> None:
    """Build the wheel as pip would and check every template is at perfreport/templates/."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("perfreport-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"perfreport/templates/{p.name}" for p in (ROOT / "templates").iterdir() if p.is_file()}
    assert shipped and shipped <= names
    # every module of every subpackage ships too (pyproject lists the packages by name: a new
    # folder missing there imports in an editable install and fails in the Action's real one)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "perfreport").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules and not (modules - names), sorted(modules - names)
    assert "perfreport/report/report-schema.json" in names


def test_renderers_prepared_while_the_ranks_load() -> None:
    """What the parent does while the workers load (the executor's ``while_waiting``): the
    templates of the formats asked for are compiled into the environments the renderers use,
    the others are not."""
    from perfreport.report import templates
    from perfreport.report.outputs import prepare_renderers

    templates.environment.cache_clear()
    templates.html_environment.cache_clear()
    try:
        prepare_renderers(("md", "json"))
        assert {name for _, name in templates.environment().cache.keys()} == {"report.md.j2"}
        assert not templates.html_environment().cache
        prepare_renderers(("pdf",))
        assert {name for _, name in templates.html_environment().cache.keys()} == {"report.html.j2", "report.css.j2"}
    finally:
        templates.environment.cache_clear()
        templates.html_environment.cache_clear()
