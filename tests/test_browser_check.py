"""The browser check catches what a reader caught (issue 24).

The unit tests feed helpers.book.pagecheck's rules hand-made page descriptions (what pagecheck.REPORT
returns). The integration tests build a tiny static site with the real site's markup (Jupyter Book 1.x:
`main > article`, `.cell_output .output.stream` pre blocks, `<details>` folds, the viewport meta tag), one
page per planted defect, and see the check in Chromium fail on each, naming the page and the text; a
clean page with a long closed fold passes and is short, and the index's meta-refresh redirect (which once
crashed the first run after an install) and a page that navigates away while the check waits are followed.
The published site itself is checked in tests/test_book_site.py (slow).
"""
from __future__ import annotations

import base64

import pytest

from helpers.book import browser, pagecheck as pc, shots

# ---------------------------------------------------------------------------------------------- unit: the rules


def rep(prose="", shown=None, streams=(), images=(), tables=(), **kw):
    """A page's description, as pagecheck.REPORT returns it, with only what the test sets."""
    d = {"prose": prose, "allProse": prose, "text": shown if shown is not None else prose,
         "shownText": shown if shown is not None else prose, "streams": list(streams), "images": list(images),
         "tables": list(tables), "math": 0, "mathUnrendered": [], "sideways": False, "width": 1280,
         "height": 900, "viewHeight": 900}
    d.update(kw)
    return d


def errors_of(check, description) -> list[str]:
    errors: list[str] = []
    check(errors, description)
    return errors


@pytest.mark.parametrize("text, found", [
    ("the GPUs were ['NVIDIA H200'] here", "['NVIDIA H200']"),
    ('hints ["/.dockerenv exists"]', '["/.dockerenv exists"]'),
    ("see fits=None below", "fits=None"),
    ("the GPUs [NVIDIA H200, NVIDIA H200] here", "[NVIDIA H200, NVIDIA H200]"),
    ("it gave <helpers.Run object at 0x7f3a2c> back", "object at 0x7f3a2c"),
    ("the file PosixPath('runs/x') holds it", "PosixPath("),
    ("keys dict_keys(['a'])", "dict_keys("),
    ("settings {'alpha': 1}", "{'alpha': "),
])
def test_reprs_in_prose_are_caught(text, found):
    errs = errors_of(pc.check_prose, rep(text))
    assert any("Python repr" in e and found in e for e in errs), errs


@pytest.mark.parametrize("text", [
    "The two GPUs (NVIDIA H200) were reached in 14.2 µs; None of them uses P2P.",
    "the list [1, 2, 3] of batch sizes and the range [8, 64]",
    "a ratio a=b of 2 and p10–p90 bands from 10–20 runs",
    "— an aside — and an em dash—between words",
    "NaN in decode from flashmla_kv: the recorded outcome is NaN",
])
def test_ordinary_prose_passes(text):
    assert errors_of(pc.check_prose, rep(text)) == []


@pytest.mark.parametrize("text, what, found", [
    ("123 rows × 8 columns", "pandas", "123 rows × 8 columns"),
    ("with the `full` sweep", "literal backtick", "`full`"),
    ("add –enable-ep-moe to the server", "typographic dash in a flag", "–enable-ep-moe"),
    ("a run continued with —resume has more", "typographic dash in a flag", "—resume"),
    ("(measured; NaN in recorded mode)", "template leftover", "NaN in recorded mode"),
    ("at one token (NaN where not measured).", "template leftover", "NaN where not measured"),
    ("the value {glue}`x` here", "template leftover", "{glue}"),
])
def test_prose_defects_are_caught_with_their_text(text, what, found):
    errs = errors_of(pc.check_prose, rep(text))
    assert any(what in e and found in e for e in errs), errs


@pytest.mark.parametrize("shown, what", [
    ("[1/30] batch 1 context 384 graph: step 28.49 ms\n[2/30] batch 2 context 384", "progress log"),
    ("wrote runs/h200/results/06_vm_p2p/fits.csv", "'wrote <path>'"),
    ('Traceback (most recent call last):\n  File "x.py", line 3, in <module>', "traceback"),
    ('  File ".../serving/model_manager.py", line 141, in __init__', "traceback"),
])
def test_machine_text_is_caught_folded_or_not(shown, what):
    errs = errors_of(pc.check_machine, rep("", shown=shown))
    assert any(what in e for e in errs), errs


def test_an_absolute_path_is_caught():
    errs = errors_of(pc.check_machine, rep("", shown="read /home/alice/book/runs/x.csv"))
    assert any("absolute path" in e and "/home/alice" in e for e in errs), errs


def test_printed_output_fails_unless_folded():
    shown = {"text": "memory: 112.0 GiB of 114.4 GiB\nbuilt one rank", "folded": False,
             "cls": "output stream highlight-myst-ansi notranslate"}
    errs = errors_of(pc.check_output, rep(streams=[shown]))
    assert len(errs) == 1 and "printed output" in errs[0] and "memory: 112.0 GiB" in errs[0], errs
    assert errors_of(pc.check_output, rep(streams=[dict(shown, folded=True)])) == []
    plain = dict(shown, cls="output text_plain", text="'a string'")
    assert "text repr" in errors_of(pc.check_output, rep(streams=[plain]))[0]


def test_cut_cells_and_empty_figures_are_caught():
    table = {"head": ["check", "reason"], "first": ["p2p", "acs"], "cut": False, "truncated": ["costi…"]}
    errs = errors_of(pc.check_tables, rep(tables=[table]))
    assert any("cut short" in e and "costi…" in e for e in errs), errs
    for alt in ("Figure: no data in this run", "Figure: "):
        img = {"src": "file:///s/_images/a.png", "ok": True, "alt": alt, "w": 10}
        errs: list[str] = []
        pc.check_images(errs, rep(images=[img]))
        assert any("empty data" in e and "a.png" in e for e in errs), (alt, errs)
    wide = {"head": ["check", "verdict"], "first": ["p2p"], "cut": False, "hidden": 779}
    errs = errors_of(pc.check_tables, rep(tables=[wide]))
    assert any("779 px of it hidden" in e and "'verdict'" in e for e in errs), errs
    assert errors_of(pc.check_tables, rep(tables=[dict(wide, hidden=pc.TABLE_SLACK)])) == []
    good = {"src": "file:///s/_images/a.png", "ok": True, "alt": "Figure: chart of µs against bytes", "w": 10}
    errs = []
    assert pc.check_images(errs, rep(images=[good])) == 0 and errs == []


def test_a_nan_or_blank_cell_is_caught():
    for cell, cls in (("nan", ""), ("None", ""), ("", "book-table")):
        table = {"head": ["check", "reason"], "first": ["p2p"], "cut": False, "unshown": [cell], "cls": cls}
        errs = errors_of(pc.check_tables, rep(tables=[table]))
        assert any("no value shown" in e and repr(cell) in e for e in errs), (cell, errs)


def test_length_budgets_are_named_in_the_message():
    errs: list[str] = []
    pc.check_length(errs, "notebooks/06_vm_p2p.html", 23.0)
    assert errs and "23.0 desktop screens" in errs[0] and f"PAGE_BUDGET={pc.PAGE_BUDGET}" in errs[0]
    errs = []
    pc.check_length(errs, "search.html", 23.0)
    assert errs == []
    pages = [{"page": f"p{i}.html", "screens_desktop": 9.0, "screens_phone": 12.0} for i in range(7)]
    pages.append({"page": "genindex.html", "screens_desktop": 50.0, "screens_phone": 50.0})
    total = pc.site_length(pages)
    assert total["screens_desktop"] == 63.0 and total["pages_counted"] == 7
    assert total["over_budget"] and f"SITE_BUDGET={pc.SITE_BUDGET}" in total["error"]
    assert not pc.site_length(pages[:6])["over_budget"]


def test_phone_sideways_names_the_width():
    errs: list[str] = []
    pc.check_phone(errs, {"sideways": True, "width": 405})
    assert errs and "405 px" in errs[0] and "390 px" in errs[0]


# ------------------------------------------------------------------- integration: a tiny site in Chromium

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

HEAD = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" /><title>{title}</title>
<style>body {{ margin: 0; font: 16px sans-serif; }} main {{ max-width: 100%; }}
pre {{ overflow-x: auto; }} .table-wrapper {{ overflow-x: auto; }}</style></head>
<body><main><article class="bd-article">{body}</article></main></body></html>"""

STREAM = """<div class="cell tag_hide-input docutils container"><div class="cell_output docutils container">
<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre><span></span>{text}
</pre></div></div></div></div>"""

FOLD = """<details class="hide below-input"><summary aria-label="Toggle hidden content">Show code cell output
</summary>{inner}</details>"""

TABLE = """<div class="table-wrapper"><table><thead><tr><th>check</th><th>reason</th></tr></thead>
<tbody><tr><td>p2p</td><td>{cell}</td></tr></tbody></table></div>"""

#: page -> (its body, what the check must say of it, a piece of the planted text it must quote)
PLANTED = {
    "path": ("<p>The run read /home/alice/book/runs/x/fits.csv here.</p>", "absolute path", "/home/alice"),
    "stdout": (STREAM.format(text="wrote runs/x/results/06_vm_p2p/fits.csv"), "printed output",
               "wrote runs/x/results"),
    "wrote": (FOLD.format(inner=STREAM.format(text="wrote runs/x/fits.csv")), "'wrote <path>'", "runs/x/fits.csv"),
    "progress": (FOLD.format(inner=STREAM.format(text="[1/30] batch 1 context 384 graph: step 28.49 ms\n"
                                                      "[2/30] batch 2 context 384 graph: step 29.10 ms")),
                 "progress log", "[1/30] batch 1"),
    "repr": ("<p>The probe saw ['NVIDIA H200'] and fits=None below.</p>", "Python repr", "['NVIDIA H200']"),
    "pandas": ("<div class='output text_html'><table><tbody><tr><td>1</td></tr></tbody></table>"
               "<p>123 rows × 8 columns</p></div>", "pandas", "123 rows × 8 columns"),
    "traceback": ('<div class="highlight"><pre>Traceback (most recent call last):\n'
                  '  File "launch.py", line 3, in &lt;module&gt;\nValueError: bad</pre></div>',
                  "traceback", "Traceback (most recent call last)"),
    "backtick": ("<p><strong>Measured with the `full` sweep.</strong></p>", "literal backtick", "`full`"),
    "dash": ("<p>Start the server with –enable-ep-moe.</p>", "typographic dash in a flag", "–enable-ep-moe"),
    "cut": (TABLE.format(cell="costi…"), "cut short", "costi…"),
    "phone": ("<div style='width: 405px; background: #eee'>wide on a phone</div>", "sideways on a phone", "405 px"),
    "empty": ('<img alt="Figure: no data in this run" src="_images/a.png" />', "empty data", "a.png"),
    "widetable": ("<div class='table-wrapper'><table><thead><tr><th>check</th><th>verdict</th></tr></thead>"
                  "<tbody><tr><td style='min-width: 2000px'>p2p</td><td>problem</td></tr></tbody></table></div>",
                  "table wider than the page", "'verdict'"),
    "long": ("<div style='height: 56000px'>a long page</div>", "desktop screens long", "PAGE_BUDGET=10"),
    "template": ("<p>It reached 19.7 GB/s (measured; NaN in recorded mode).</p>", "template leftover",
                 "NaN in recorded mode"),
    "nancell": (TABLE.format(cell="nan"), "no value shown", "'nan'"),
    "blankcell": (TABLE.replace("<table>", "<table class='book-table'>").format(cell=""), "no value shown", "''"),
}

CLEAN = ("<h1>Intro</h1><p>The answer: 14.2 µs at 12 KiB, with <code>--enable-ep-moe</code>.</p>"
         + FOLD.format(inner="<div style='height: 20000px'>folded detail</div>"
                       + STREAM.format(text="a folded log line")))


def tiny_site(root):
    (root / "_images").mkdir(parents=True)
    (root / "_images" / "a.png").write_bytes(PNG)
    (root / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=intro.html" />\n')
    (root / "intro.html").write_text(HEAD.format(title="Intro", body=CLEAN))
    for name, (body, _, _) in PLANTED.items():
        (root / f"{name}.html").write_text(HEAD.format(title=name, body=body))
    return root


needs_chromium = pytest.mark.skipif(not browser.find_chromium(), reason=browser.INSTALL_HINT)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    site = tiny_site(tmp_path_factory.mktemp("tiny") / "html")
    return browser.check_site(site, site.parent / "shots", echo=lambda *a: None)


@pytest.mark.integration
@needs_chromium
@pytest.mark.parametrize("page", sorted(PLANTED))
def test_each_planted_defect_fails_naming_page_and_text(planted, page):
    _, what, found = PLANTED[page]
    result = next(p for p in planted["per_page"] if p["page"] == f"{page}.html")
    assert any(what in e and found in e for e in result["errors"]), result["errors"]
    lines = [f"{p['page']}: {e}" for p in planted["per_page"] for e in p["errors"]]
    assert any(line.startswith(f"{page}.html: ") and found in line for line in lines)


@pytest.mark.integration
@needs_chromium
def test_the_clean_page_and_the_redirect_pass_and_a_closed_fold_does_not_count(planted):
    by_page = {p["page"]: p for p in planted["per_page"]}
    assert by_page["intro.html"]["errors"] == [] and by_page["index.html"]["errors"] == []
    assert by_page["intro.html"]["screens_desktop"] < 2 and by_page["intro.html"]["screens_phone"] < 2
    assert by_page["long.html"]["screens_desktop"] > 60 and by_page["phone.html"]["width_phone"] == 405
    assert planted["length"]["over_budget"] and "SITE_BUDGET=60" in planted["length"]["error"]
    assert planted["errors"] >= len(PLANTED) + 1
    assert "desktop screens" in browser.summary_line(planted)


@pytest.mark.integration
@needs_chromium
def test_the_command_prints_screens_and_fails(tmp_path, capsys):
    site = tiny_site(tmp_path / "html")
    assert browser.main([str(site), "--out", str(tmp_path / "shots")]) == 1
    out = capsys.readouterr().out
    assert "long.html: the page is" in out and "site: the site is" in out and "desktop screens" in out
    assert browser.main([str(site), "--out", str(tmp_path / "shots"), "--measure-only"]) == 0


@pytest.mark.integration
@needs_chromium
def test_a_page_that_navigates_away_during_a_check_is_followed(tmp_path):
    """The redirect that crashed the first check ('Inspected target navigated or closed'): a page that
    leaves while an expression is running there; the expression is run again on the page it leads to."""
    site = tiny_site(tmp_path / "html")
    (site / "leaves.html").write_text(HEAD.format(title="leaves", body="<p>leaving</p>").replace(
        "</body>", "<script>setTimeout(() => location.replace('intro.html'), 300)</script></body>"))
    b = browser.Chromium(browser.find_chromium())
    try:
        b.open_tab()
        assert b.goto((site / "leaves.html").as_uri())
        slow = "new Promise(r => setTimeout(() => r(location.pathname), 1500))"
        assert b.evaluate(slow).endswith("/intro.html")
        assert b.goto((site / "index.html").as_uri())
        assert b.evaluate("location.pathname").endswith("/intro.html")
    finally:
        b.close()


@pytest.mark.integration
@needs_chromium
def test_shots_write_page_and_width(tmp_path):
    site = tiny_site(tmp_path / "html")
    written = shots.take(site, tmp_path / "shots", ["intro", "long"], screens=2)
    assert sorted(p.name for p in written) == ["intro_1280.png", "intro_390.png", "long_1280.png", "long_390.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)
    said = []
    found = shots.take(site, tmp_path / "at", ["template", "intro"], widths=(1280,), screens=1,
                       find="NaN in recorded mode", echo=said.append)
    assert [p.name for p in found] == ["template_1280_nan-in-recorded-mode.png"] and "intro" in said[0]


def test_make_site_and_check_site_print_the_length():
    """`make site` measures the site where Chromium is (and says `make browser` where not); `make
    check-site` runs the whole check."""
    from helpers import repo_root

    make = (repo_root() / "Makefile").read_text()
    site = make.split("\nsite:", 1)[1].split("\n\n", 1)[0]
    check = make.split("\ncheck-site:", 1)[1].split("\n\n", 1)[0]
    assert "helpers.book.browser _build/html --measure-only" in site
    assert "helpers.book.browser _build/html" in check and "--measure-only" not in check


def test_a_blank_cell_passes_only_where_asked_and_nan_never_does():
    blank = {"head": ["check", "reason"], "first": ["p2p"], "cut": False, "unshown": [""], "cls": "book-table"}
    nan = dict(blank, unshown=["nan"])
    assert errors_of(pc.check_tables, rep(tables=[blank]))
    errs: list[str] = []
    pc.check_tables(errs, rep(tables=[blank]), blank_cells=False)
    assert errs == []
    pc.check_tables(errs, rep(tables=[nan]), blank_cells=False)
    assert any("'nan'" in e for e in errs)
