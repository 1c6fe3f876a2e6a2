"""Open every page of the built site in headless Chromium, from disk with the network off, as a reader
would, and check what they see.

    python -m helpers.book.browser _build/html            # check, screenshots into _build/screenshots/
    python -m helpers.book.browser _build/html --out DIR  # screenshots and report.json elsewhere
    python -m helpers.book.browser _build/html --shots DIR --shot-pages intro notebooks/06_vm_p2p
                                                          # only screenshots: DIR/<page>_1280.png, _390.png

Chromium is Debian's package (`make browser` installs it: `apt-get install -y chromium`); it is driven
through its DevTools protocol over a pipe (`--remote-debugging-pipe`), so nothing else is needed: no
webdriver, no browser download. Every host name resolves nowhere and the proxy is a closed port, so a
page that needs the network shows it as an error here.

Each page is opened at 1280 x 900 and checked, then opened again at 390 x 844 (a phone: mobile emulation)
and measured. Per page it checks:
- no console error, uncaught exception or failed load, and no request that leaves the disk;
- math rendered: every `.math` element holds MathJax output, and no raw LaTeX (`\\(`, `\\frac`, ...) is
  left in the visible text outside code;
- every image loaded (complete, with a size) and has alt text (not just its file name);
- every internal link resolves: the file exists and, for `#anchor`, the target page has that id;
- no table whose first column is a bare integer index (a blank header over 0, 1, 2, ...), no table that
  runs off the page without a scroll bar, and no page that scrolls sideways;
- and what a reader caught (helpers.book.pagecheck, whose docstring gives each rule): the page's length
  against the budget (PAGE_BUDGET desktop screens a page, SITE_BUDGET in all), sideways scroll on a phone,
  machine paths, progress logs, "wrote <path>" lines, tracebacks, the printed output of code cells, Python
  reprs and pandas footers in prose, literal backticks, typographic dashes in flags, table cells cut short,
  figures of empty data and template leftovers ("NaN in recorded mode").
It prints each page's length in screens at both widths (page height / window height, closed `<details>`
left closed) and the totals, saves a screenshot of the first screen of each page (1280 x 900) and a
report.json beside them. A page that redirects (index.html's meta refresh) is followed to where it leads.
"""
from __future__ import annotations

import argparse
import base64
import json
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from helpers.book import pagecheck as pc
from helpers.book import shots
from helpers.book.chromium import (INSTALL_HINT, SETTLE, CDPError, Chromium,  # noqa: F401  (re-exported)
                                   find_chromium)
from helpers.book.pagecheck import ABS_PATH, PROGRESS  # noqa: F401  (re-exported: tests and staging use them)

@dataclass
class PageResult:
    page: str
    errors: list[str] = field(default_factory=list)
    images: int = 0
    images_without_alt: int = 0
    links_internal: int = 0
    links_external: int = 0
    math: int = 0
    tables: int = 0
    screenshot: str = ""
    screens_desktop: float = 0.0
    screens_phone: float = 0.0
    width_phone: int = 0


class _Anchors:
    """Ids (anchors) of each HTML file, read once."""

    def __init__(self):
        self._ids: dict[Path, set[str]] = {}

    def has(self, path: Path, frag: str) -> bool:
        if path not in self._ids:
            text = path.read_text(errors="replace")
            self._ids[path] = set(re.findall(r'\sid="([^"]+)"', text)) | set(re.findall(r'\sname="([^"]+)"', text))
        return frag in self._ids[path]


def pages(site: Path) -> list[Path]:
    """Every page of the site (the HTML files outside _static, _sources and _images)."""
    skip = {"_static", "_sources", "_images"}
    return sorted(p for p in site.rglob("*.html") if not (set(p.relative_to(site).parts) & skip))


def check_site(site: Path, out: Path | None = None, executable: str | None = None,
               echo=print, blank_cells: bool = True) -> dict:
    """Check every page of `site` at 1280 x 900, then measure each at 390 x 844 (a phone); write the
    first-screen screenshots and report.json into `out` (default: <site>/../screenshots). Returns the
    report: per page its errors and screens at both widths, and the site's totals (pagecheck.site_length).
    `blank_cells` False lets a blank cell of a book table pass (a run executed before the tables helper
    wrote n/a keeps its tables as they were executed); nan, None, <NA> and NaT still fail."""
    site = Path(site).resolve()
    if not (site / "index.html").exists():
        raise FileNotFoundError(f"{site} has no index.html: build the site first (make site)")
    out = Path(out) if out else site.parent / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    exe = executable or find_chromium()
    if not exe:
        raise FileNotFoundError(INSTALL_HINT)
    host = socket.gethostname().split(".")[0]
    host_re = re.compile(rf"(?<![\w-]){re.escape(host)}(?![\w-])") if len(host) >= 4 else None
    anchors = _Anchors()
    results: list[PageResult] = []
    seen_links: set[str] = set()
    browser = Chromium(exe)
    try:
        browser.open_tab(*pc.DESKTOP)
        for page in pages(site):
            res, rep = _visit(browser, page, site, out)
            res.math, res.tables = rep["math"], len(rep["tables"])
            pc.check_math(res.errors, rep)
            res.images = len(rep["images"])
            res.images_without_alt = pc.check_images(res.errors, rep)
            _check_links(res, rep, seen_links, anchors)
            pc.check_machine(res.errors, rep, host, host_re)
            pc.check_output(res.errors, rep)
            pc.check_prose(res.errors, rep)
            pc.check_tables(res.errors, rep, blank_cells)
            res.screens_desktop = round(pc.screens(rep), 1)
            pc.check_length(res.errors, res.page, res.screens_desktop)
            results.append(res)
        browser.set_size(*pc.PHONE, mobile=True)
        for res in results:
            phone = _measure(browser, site / res.page)
            res.screens_phone, res.width_phone = round(pc.screens(phone), 1), phone["width"]
            pc.check_phone(res.errors, phone)
            mark = "ok" if not res.errors else f"{len(res.errors)} problem(s)"
            echo(f"  {res.page:<40} {res.screens_desktop:5.1f} / {res.screens_phone:5.1f} screens  {mark}")
    finally:
        browser.close()
    return _report(site, out, results, seen_links)


def _report(site: Path, out: Path, results: list[PageResult], seen_links: set[str]) -> dict:
    length = pc.site_length([r.__dict__ for r in results])
    report = {
        "site": str(site), "pages": len(results),
        "images": sum(r.images for r in results), "images_without_alt": sum(r.images_without_alt for r in results),
        "links_internal": sum(r.links_internal for r in results), "links_checked": len(seen_links),
        "links_external": sum(r.links_external for r in results),
        "math": sum(r.math for r in results), "tables": sum(r.tables for r in results),
        "length": length,
        "errors": sum(len(r.errors) for r in results) + bool(length["error"]),
        "per_page": [r.__dict__ for r in results],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _visit(browser: Chromium, page: Path, site: Path, out: Path) -> tuple[PageResult, dict]:
    """Open `page` in the browser, let it settle and take its screenshot; its result (with what the
    browser logged meanwhile) and what the page reports of itself (pagecheck.REPORT)."""
    rel = page.relative_to(site).as_posix()
    res = PageResult(rel)
    since = len(browser.events)
    if not browser.goto(page.as_uri()):
        res.errors.append("the page did not finish loading within 30 s")
    browser.evaluate(SETTLE, timeout=40)
    time.sleep(0.2)
    shot = out / (rel[:-5].replace("/", "__") + ".png")
    shot.write_bytes(base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"]))
    res.screenshot = shot.name
    rep = browser.evaluate(pc.REPORT)
    res.errors += _events_errors(browser.events[since:])
    return res, rep


def _measure(browser: Chromium, page: Path) -> dict:
    """Open `page` at the browser's current size, let it settle: its length and width (pagecheck.MEASURE)."""
    browser.goto(page.as_uri())
    browser.evaluate(SETTLE, timeout=40)
    return browser.evaluate(pc.MEASURE)


def _check_links(res: PageResult, rep: dict, seen_links: set[str], anchors: _Anchors) -> None:
    """Count the page's links; each local one not seen on an earlier page must reach a file (and its anchor)."""
    for href in rep["links"]:
        u = urlparse(href)
        if u.scheme in ("http", "https", "mailto"):
            res.links_external += 1
            continue
        if u.scheme != "file":
            continue
        res.links_internal += 1
        key = href
        if key in seen_links:
            continue
        seen_links.add(key)
        target = Path(unquote(u.path))
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            res.errors.append(f"broken link: {href} (no file {target})")
        elif u.fragment and target.suffix == ".html" and not anchors.has(target, unquote(u.fragment)):
            res.errors.append(f"broken anchor: {href} (no id {u.fragment!r} in {target.name})")


def _events_errors(events: list[dict]) -> list[str]:
    errs = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errs.append(f"uncaught exception: {d.get('exception', {}).get('description') or d.get('text')}"[:300])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            errs.append(f"console error: {args}"[:300])
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            en = p["entry"]
            errs.append(f"console error ({en.get('source')}): {en.get('text')} {en.get('url', '')}"[:300])
        elif m == "Network.requestWillBeSent":
            url = p.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:", "blob:", "chrome", "devtools:")):
                errs.append(f"network request (the site must not need one): {url[:200]}")
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            errs.append(f"failed to load a resource: {p.get('errorText')} ({p.get('type', '')})")
    return list(dict.fromkeys(errs))  # in order, without repeats


def summary_line(report: dict) -> str:
    n = report["length"]
    return (f"browser: {report['pages']} pages, {n['screens_desktop']} desktop screens ({pc.DESKTOP[0]}x"
            f"{pc.DESKTOP[1]}) and {n['screens_phone']} phone screens ({pc.PHONE[0]}x{pc.PHONE[1]}) over "
            f"{n['pages_counted']} counted pages (budget {pc.SITE_BUDGET} in total, {pc.PAGE_BUDGET} a page), "
            f"{report['images']} images, {report['links_checked']} internal links checked "
            f"({report['links_internal']} on the pages), {report['math']} formulas, {report['tables']} tables, "
            f"{report['errors']} errors")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.book.browser", description=__doc__.split("\n\n")[0])
    p.add_argument("site", nargs="?", default="_build/html", help="the built site (default: _build/html)")
    p.add_argument("--out", help="where screenshots and report.json go (default: <site>/../screenshots)")
    p.add_argument("--shots", metavar="DIR", help="only take screenshots of --shot-pages into DIR (no check)")
    p.add_argument("--shot-pages", nargs="+", metavar="PAGE", default=["intro"],
                   help="pages for --shots, as paths without .html (intro notebooks/06_vm_p2p ...)")
    p.add_argument("--shot-screens", type=float, default=2,
                   help="for --shots: the first N screens of each page (0: the whole page; default 2)")
    p.add_argument("--shot-find", metavar="TEXT",
                   help="for --shots: start each shot just above the first element showing TEXT "
                        "(named <page>_<width>_<text>.png; a page without it gets none)")
    p.add_argument("--measure-only", action="store_true",
                   help="print each page's length and the number of errors, exit 0 (make site uses it; "
                        "without Chromium it says how to get it)")
    args = p.parse_args(argv)
    try:
        if args.shots:
            for path in shots.take(Path(args.site), Path(args.shots), args.shot_pages, screens=args.shot_screens,
                                   find=args.shot_find, echo=print):
                print(f"wrote {path}")
            return 0
        report = check_site(Path(args.site), Path(args.out) if args.out else None)
    except FileNotFoundError as exc:
        if args.measure_only:  # make site: the length is a report there, not a gate
            print(f"the pages' length was not measured: {exc}")
            return 0
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.measure_only:
        for r in report["per_page"]:
            for e in r["errors"]:
                print(f"{r['page']}: {e}")
        if report["length"]["error"]:
            print(f"site: {report['length']['error']}")
    print(summary_line(report))
    if args.measure_only and report["errors"]:
        print("each error, page by page: make check-site")
    return 1 if report["errors"] and not args.measure_only else 0


if __name__ == "__main__":
    sys.exit(main())
