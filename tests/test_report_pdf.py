"""perfreport.report.pdf: the same report on A4 pages, vector plots (no raster images), a
running header with the verdict and the date on every page, and nothing fetched."""

from __future__ import annotations

import base64
import functools
import re
import shutil
import subprocess

import pytest

from perfreport.report import available_formats, build_report, write_reports
from perfreport.report.pdf import available, render_pdf

from .test_report_build import comparison_document, tiny_document
from .test_report_html import with_findings

pytestmark = pytest.mark.skipif(not available(), reason="WeasyPrint (with Pango) is not installed")


@functools.lru_cache(maxsize=None)
def comparison_pdf() -> bytes:
    return render_pdf(build_report(with_findings(comparison_document())))


def pdf_pages_text(pdf: bytes, tmp_path) -> list[str]:
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext (poppler-utils) is not installed")
    path = tmp_path / "r.pdf"
    path.write_bytes(pdf)
    text = subprocess.run(["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True).stdout
    return [p for p in text.split("\f") if p.strip()]


def test_pdf_is_paged_vector_and_headed(tmp_path) -> None:
    pdf = comparison_pdf()
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    assert b"/Subtype /Image" not in pdf  # plots are vector paths, not pictures
    pages = pdf_pages_text(pdf, tmp_path)
    assert len(pages) >= 3
    doc = comparison_document()
    date = doc["created_utc"]
    for n, page in enumerate(pages, 1):
        head = page.strip().splitlines()[0]
        assert "FAIL" in head and date in head, head  # verdict and date on every page
        assert re.search(rf"page {n} of {len(pages)}", page)
    text = "\n".join(pages)
    for title in ("Top causes" if comparison_document()["explanation"]["delta_ms"] else "Findings", "Findings",
                  "Where the time went", "More in the HTML report", "Reproduce this report"):
        assert title in text
    assert "Temporal breakdown" in text.split("More in the HTML report")[-1]  # named, not printed


def test_pdf_is_a_brief_unless_the_appendix_is_asked_for(tmp_path) -> None:
    """The demo's brief leads with its headline; the appendix is checked on the smaller comparison
    of :func:`comparison_pdf` (12 pages where the demo's are 34: 3.5 s of layout instead of 8 s)."""
    from .test_findings import demo_document

    brief = pdf_pages_text(render_pdf(build_report(demo_document())), tmp_path)
    assert len(brief) <= 6
    assert "step time +39.4 % (126.55 → 176.47 ms/step" in brief[0] and "Top causes" in brief[0]
    report = build_report(with_findings(comparison_document()))
    short = pdf_pages_text(comparison_pdf(), tmp_path)
    full = pdf_pages_text(render_pdf(report, appendix=True), tmp_path)
    assert len(short) <= 6 < len(full)
    text = "\n".join(full)
    assert "Trace metadata" in text and "More in the HTML report" not in text
    assert "More in the HTML report" in "\n".join(short)


def test_single_run_pdf_header_says_analysis(tmp_path_factory, tmp_path) -> None:
    doc = tiny_document(tmp_path_factory)
    pdf = render_pdf(build_report(doc))
    pages = pdf_pages_text(pdf, tmp_path)
    assert all("ANALYSIS" in p.strip().splitlines()[0] for p in pages)
    assert b"/Subtype /Image" not in pdf


def test_pdf_fetches_nothing(tmp_path) -> None:
    from perfreport.report.model import Paragraph, Report, Section

    # a name that looks like markup for a remote image stays text: escaped, never fetched
    hostile = '<img src="http://127.0.0.1:9/x.png"><link rel=stylesheet href="file:///etc/passwd">'
    report = Report(kind="analyze", title="t", subtitle=hostile, created_utc="", verdict=None,
                    sections=(Section("s", "S", (Paragraph(hostile),)),), command=hostile)
    pdf = render_pdf(report)
    assert b"/Subtype /Image" not in pdf
    text = "\n".join(pdf_pages_text(pdf, tmp_path))
    assert "127.0.0.1:9/x.png" in text.replace("\n", "")


def test_pdf_is_a_default_format_when_weasyprint_imports(tmp_path) -> None:
    assert "pdf" in available_formats()
    (path,) = write_reports(build_report({"source": "x"}), tmp_path, ["pdf"])
    assert path.name == "report.pdf" and path.read_bytes().startswith(b"%PDF-")


def test_figures_laid_out_as_images_look_as_inline_figures_do(tmp_path) -> None:
    """The PDF's page carries each figure as an <img> of its SVG (perfreport.report.html.figure_image),
    which WeasyPrint lays out faster: the pages have the same text and the same pixels as
    with the SVGs inline, as the page had them before."""
    from perfreport.report import html
    from perfreport.report.pdf import layout_pdf, paged_html

    from .test_findings import demo_document

    if not shutil.which("pdftoppm"):
        pytest.skip("pdftoppm (poppler-utils) is not installed")
    report = build_report(demo_document())
    svgs: dict[str, str] = {}
    images = paged_html(report, svgs=svgs)
    inline = re.sub(r'<img class="plot" alt="[^"]*" src="data:image/svg\+xml;base64,([^"]+)">',
                    lambda m: base64.b64decode(m[1]).decode(), images)
    assert images.count('<img class="plot"') == inline.count('<svg') >= 4 and "<svg" not in images
    pages = {}
    for name, page in (("images", images), ("inline", inline)):
        pdf = layout_pdf(page)
        pages[name] = pdf_pages_text(pdf, tmp_path)
        (tmp_path / f"{name}.pdf").write_bytes(pdf)
        subprocess.run(["pdftoppm", "-r", "60", "-png", str(tmp_path / f"{name}.pdf"), str(tmp_path / name)], check=True)
    assert pages["images"] == pages["inline"] and "step time (ms)" in "".join(pages["images"])
    shots = sorted(tmp_path.glob("images-*.png"))
    assert len(shots) == len(pages["images"])
    for shot in shots:
        assert shot.read_bytes() == (tmp_path / shot.name.replace("images", "inline")).read_bytes(), shot.name


def test_lean_font_subsets_embed_the_same_font_bytes_without_decoding_the_dropped_tables() -> None:
    """lean_font_subsets: WeasyPrint's fontTools subsetting of DejaVu Sans (matplotlib ships it)
    gives the same bytes, and GSUB/GPOS, which WeasyPrint drops, are no longer decoded first."""
    import io

    import matplotlib
    from fontTools import subset
    from fontTools.ttLib import TTFont
    from fontTools.ttLib.tables import otBase

    from perfreport.report.pdf import lean_font_subsets

    decoded: list[str] = []
    real_decompile = otBase.BaseTTXConverter.decompile

    def decompile(self, data, font):
        decoded.append(self.tableTag)
        return real_decompile(self, data, font)

    def embedded(path: str) -> bytes:  # as weasyprint.pdf.fonts.Font._fonttools_subset does it
        options = subset.Options(retain_gids=True, passthrough_tables=True, ignore_missing_glyphs=True,
                                 hinting=False, desubroutinize=True, notdef_outline=False)
        options.drop_tables += ["GSUB", "GPOS", "SVG"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(gids=set(range(3, 100)) | {600})
        font = TTFont(io.BytesIO(open(path, "rb").read()), recalcTimestamp=False)  # not "modified now"
        subsetter.subset(font)
        out = io.BytesIO()
        font.save(out)
        return out.getvalue()

    otBase.BaseTTXConverter.decompile = decompile
    try:
        for name in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"):
            path = f"{matplotlib.get_data_path()}/fonts/ttf/{name}"
            decoded.clear()
            plain = embedded(path)
            assert {"GSUB", "GPOS"} <= set(decoded), decoded  # decoded only to be dropped
            decoded.clear()
            with lean_font_subsets():
                lean = embedded(path)
            assert not {"GSUB", "GPOS"} & set(decoded) and lean == plain, name
        assert subset.Subsetter.subset.__name__ == "subset"  # restored on leaving
    finally:
        otBase.BaseTTXConverter.decompile = real_decompile


def test_weasyprint_imports_without_running_the_linkers_search() -> None:
    """import_weasyprint on Linux: WeasyPrint's C libraries open by their sonames, with no
    ``ldconfig``/``gcc``/``ld`` process per name tried (26 ``find_library`` calls before: an
    ``ldconfig`` each, a ``gcc``, ``collect2`` and ``ld`` for 21 of them). In a fresh interpreter (this one may have imported WeasyPrint already), watching
    every process started (the ``subprocess.Popen`` audit event)."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the linker's search is skipped on Linux only")
    script = (
        "import sys\n"
        "started = []\n"
        "sys.addaudithook(lambda event, args: event == 'subprocess.Popen' and started.append(args[1]))\n"
        "from perfreport.report.pdf import import_weasyprint\n"
        "import ctypes.util\n"
        "search = ctypes.util.find_library\n"
        "import_weasyprint()\n"
        "assert ctypes.util.find_library is search, 'find_library not restored'\n"
        "print(len(started), started[:3])\n"
    )
    stdout = _fresh_python(script)
    assert stdout.startswith("0 "), stdout


def test_weasyprint_imports_the_usual_way_where_the_sonames_alone_do_not_open() -> None:
    """A distribution whose Pango opens only through the linker's search (its soname refused
    here, in a fresh interpreter): the import without the search fails, import_weasyprint
    imports once more with it, Pango loads, and nothing is printed (WeasyPrint prints its
    troubleshooting text before it raises)."""
    script = (
        "import cffi.api\n"
        "real = cffi.api.FFI.dlopen\n"
        "def dlopen(self, name, flags=0):\n"
        "    if name == 'libpango-1.0.so.0':\n"
        "        raise OSError('cannot load library ' + name)\n"
        "    return real(self, name, flags)\n"
        "cffi.api.FFI.dlopen = dlopen\n"
        "from perfreport.report.pdf import import_weasyprint\n"
        "import_weasyprint()\n"
        "import weasyprint.text.ffi as ffi\n"
        "assert ffi.pango is not None\n"
    )
    stdout = _fresh_python(script)
    assert stdout == "", stdout


def _fresh_python(script: str) -> str:
    """The standard output of ``script`` run by a fresh interpreter (this one may have imported
    WeasyPrint already), which must exit 0."""
    import sys

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout
