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
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from helpers.book import pagecheck as pc
from helpers.book.pagecheck import ABS_PATH, PROGRESS  # noqa: F401  (re-exported: tests and staging use them)

WIDTH, HEIGHT = pc.DESKTOP
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "chrome",
              "chromium-headless-shell")
INSTALL_HINT = ("headless Chromium was not found: `make browser` installs Debian's package "
                "(apt-get install -y chromium), or set CHROMIUM=/path/to/chromium")

def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env if (Path(env).exists() or shutil.which(env)) else None
    for c in CANDIDATES:
        p = c if c.startswith("/") and Path(c).exists() else shutil.which(c) if not c.startswith("/") else None
        if p:
            return p
    return None


class CDPError(RuntimeError):
    pass


def navigated(exc: Exception) -> bool:
    """Whether a failed command failed because the page navigated away (a redirect) while it ran."""
    return bool(re.search(r"navigated or closed|Cannot find context|context was destroyed|"
                          r"Execution context|No frame", str(exc), re.I))


#: the delay in seconds of the page's meta refresh (a redirect), or null where it has none
_REFRESH = r"""(() => { const m = document.querySelector('meta[http-equiv="refresh" i]');
  if (!m) return null; const d = parseFloat((m.getAttribute('content') || '').split(';')[0]);
  return isNaN(d) ? 0 : d; })()"""


class Chromium:
    """A headless Chromium driven over --remote-debugging-pipe (fd 3: commands in, fd 4: replies out)."""

    def __init__(self, executable: str, width: int = WIDTH, height: int = HEIGHT):
        self.profile = tempfile.mkdtemp(prefix="book-browser-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(res_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(res_w)

        def child():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                # the network is off: nothing resolves, and the proxy is a closed local port
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", "about:blank"]
        self.proc = subprocess.Popen(args, preexec_fn=child, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(hi_r)
        os.close(hi_w)
        self._id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr_tail: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.session = None

    def _drain_stderr(self):
        for line in iter(self.proc.stderr.readline, b""):
            self._stderr_tail = (self._stderr_tail + [line.decode(errors="replace")])[-20:]

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._res_r, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                data = json.loads(msg)
                with self._cond:
                    if "id" in data:
                        self._replies[data["id"]] = data
                    else:
                        self.events.append(data)
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = "default",
             timeout: float = 60) -> dict:
        with self._lock:
            self._id += 1
            mid = self._id
        msg = {"id": mid, "method": method, "params": params or {}}
        sid = self.session if session == "default" else session
        if sid:
            msg["sessionId"] = sid
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or getattr(self, "_closed", False):
                    raise CDPError(f"{method}: no reply from Chromium within {timeout:.0f} s"
                                   f" (its stderr ends: {''.join(self._stderr_tail)[-800:]})")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, since: int, timeout: float = 30) -> dict | None:
        i = self.wait_index(method, since, timeout)
        return None if i is None else self.events[i]

    def wait_index(self, method: str, since: int, timeout: float = 30) -> int | None:
        """The index in `events` of the first `method` event from `since` on, waiting up to `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(since, len(self.events)):
                    if self.events[i].get("method") == method:
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def open_tab(self, width: int = WIDTH, height: int = HEIGHT, mobile: bool = False) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=None)["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.send(m)
        self.set_size(width, height, mobile)

    def set_size(self, width: int, height: int, mobile: bool = False) -> None:
        """The window's size; `mobile` emulates a phone (its viewport and scroll bars), at scale 1."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def evaluate(self, expression: str, timeout: float = 30, retries: int = 3):
        """`expression`'s value in the page. Where the page navigated meanwhile (a redirect: the context the
        expression ran in is gone), wait for the next page to load and run it there, up to `retries` times."""
        for attempt in range(retries + 1):
            since = len(self.events)
            try:
                r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                   "returnByValue": True}, timeout=timeout)
            except CDPError as exc:
                if attempt == retries or not navigated(exc):
                    raise
                self.wait_index("Page.loadEventFired", since, timeout=30)
                continue
            if "exceptionDetails" in r:
                raise CDPError(f"evaluate failed: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
            return r["result"].get("value")

    def goto(self, url: str, timeout: float = 30) -> bool:
        """Open `url` and wait for it to load; where it redirects at once (a meta refresh of a few seconds
        at most, like the site's index.html), wait for the page it leads to as well. False: it did not
        load within `timeout` s."""
        since = len(self.events)
        self.send("Page.navigate", {"url": url})
        loaded = self.wait_index("Page.loadEventFired", since, timeout)
        for _ in range(3):
            if loaded is None:
                return False
            delay = self.evaluate(_REFRESH)
            if delay is None or delay > 5:
                return True
            loaded = self.wait_index("Page.loadEventFired", loaded + 1, timeout + delay)
        return loaded is not None

    def close(self):
        try:
            self.send("Browser.close", session=None, timeout=5)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


_SETTLE = """(async () => {
  const images = [...document.images].map(i => i.complete ? null :
      new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); }));
  await Promise.race([Promise.all(images), new Promise(r => setTimeout(r, 10000))]);
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await Promise.race([MathJax.startup.promise, new Promise(r => setTimeout(r, 15000))]);
  }
  if (document.fonts) { await document.fonts.ready; }
  return true;
})()"""



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
               echo=print) -> dict:
    """Check every page of `site` at 1280 x 900, then measure each at 390 x 844 (a phone); write the
    first-screen screenshots and report.json into `out` (default: <site>/../screenshots). Returns the
    report: per page its errors and screens at both widths, and the site's totals (pagecheck.site_length)."""
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
            pc.check_tables(res.errors, rep)
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
    browser.evaluate(_SETTLE, timeout=40)
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
    browser.evaluate(_SETTLE, timeout=40)
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


def shots(site: Path, out: Path, names: list[str], widths=(pc.DESKTOP[0], pc.PHONE[0]), screens: float = 2,
          executable: str | None = None) -> list[Path]:
    """Screenshots of the pages `names` (paths in the site without .html: intro, notebooks/06_vm_p2p) at
    each width in `widths` (1280: desktop, 900 high; 390: a phone, 844 high, mobile emulation): the first
    `screens` screens of each (0: the whole page), as <page's file name>_<width>.png in `out`."""
    site, out = Path(site).resolve(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    exe = executable or find_chromium()
    if not exe:
        raise FileNotFoundError(INSTALL_HINT)
    sizes = {pc.DESKTOP[0]: pc.DESKTOP, pc.PHONE[0]: pc.PHONE}
    written = []
    browser = Chromium(exe)
    try:
        browser.open_tab(*pc.DESKTOP)
        for width in widths:
            w, h = sizes.get(width, (width, pc.DESKTOP[1]))
            browser.set_size(w, h, mobile=w < 600)
            for name in names:
                page = site / (name if name.endswith(".html") else name + ".html")
                if not page.exists():
                    raise FileNotFoundError(f"{page} is not a page of the site")
                browser.goto(page.as_uri())
                browser.evaluate(_SETTLE, timeout=40)
                time.sleep(0.2)
                full = browser.evaluate("document.documentElement.scrollHeight")
                height = full if not screens else min(full, int(screens * h))
                png = browser.send("Page.captureScreenshot", {
                    "format": "png", "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": w, "height": height, "scale": 1}})["data"]
                path = out / f"{page.stem}_{width}.png"
                path.write_bytes(base64.b64decode(png))
                written.append(path)
    finally:
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.book.browser", description=__doc__.split("\n\n")[0])
    p.add_argument("site", nargs="?", default="_build/html", help="the built site (default: _build/html)")
    p.add_argument("--out", help="where screenshots and report.json go (default: <site>/../screenshots)")
    p.add_argument("--shots", metavar="DIR", help="only take screenshots of --shot-pages into DIR (no check)")
    p.add_argument("--shot-pages", nargs="+", metavar="PAGE", default=["intro"],
                   help="pages for --shots, as paths without .html (intro notebooks/06_vm_p2p ...)")
    p.add_argument("--shot-screens", type=float, default=2,
                   help="for --shots: the first N screens of each page (0: the whole page; default 2)")
    p.add_argument("--measure-only", action="store_true",
                   help="print each page's length and the number of errors, exit 0 (make site uses it; "
                        "without Chromium it says how to get it)")
    args = p.parse_args(argv)
    try:
        if args.shots:
            for path in shots(Path(args.site), Path(args.shots), args.shot_pages, screens=args.shot_screens):
                print(f"wrote {path}")
            return 0
        report = check_site(Path(args.site), Path(args.out) if args.out else None)
    except FileNotFoundError as exc:
        if args.measure_only:  # make site: the length is a report there, not a gate
            print(f"the pages' length was not measured: {exc}")
            return 0
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.measure_only and report["errors"]:
        print("the errors of each page: make check-site")
    if not args.measure_only:
        for r in report["per_page"]:
            for e in r["errors"]:
                print(f"{r['page']}: {e}")
        if report["length"]["error"]:
            print(f"site: {report['length']['error']}")
    print(summary_line(report))
    return 1 if report["errors"] and not args.measure_only else 0


if __name__ == "__main__":
    sys.exit(main())
