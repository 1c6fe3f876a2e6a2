"""Open every page of the built site in headless Chromium, from disk with the network off, as a reader
would, and check what they see.

    python -m helpers.book.browser _build/html            # check, screenshots into _build/screenshots/
    python -m helpers.book.browser _build/html --out DIR  # screenshots and report.json elsewhere

Chromium is Debian's package (`make browser` installs it: `apt-get install -y chromium`); it is driven
through its DevTools protocol over a pipe (`--remote-debugging-pipe`), so nothing else is needed: no
webdriver, no browser download. Every host name resolves nowhere and the proxy is a closed port, so a
page that needs the network shows it as an error here.

Per page it checks:
- no console error, uncaught exception or failed load, and no request that leaves the disk;
- math rendered: every `.math` element holds MathJax output, and no raw LaTeX (`\\(`, `\\frac`, ...) is
  left in the visible text outside code;
- every image loaded (complete, with a size) and has alt text (not just its file name);
- every internal link resolves: the file exists and, for `#anchor`, the target page has that id;
- no absolute path of a machine (`/home/...`, `/work/...`, `.../site-packages/...`), no progress-bar or
  tqdm text, no host name of this machine, anywhere in the page's text (folded code included);
- no table whose first column is a bare integer index (a blank header over 0, 1, 2, ...), no table that
  runs off the page without a scroll bar, and no page that scrolls sideways.
It saves a screenshot of the first screen of each page (1280 x 900) and a report.json beside them.
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

WIDTH, HEIGHT = 1280, 900
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "chrome",
              "chromium-headless-shell")
INSTALL_HINT = ("headless Chromium was not found: `make browser` installs Debian's package "
                "(apt-get install -y chromium), or set CHROMIUM=/path/to/chromium")

RAW_LATEX = re.compile(r"\\[()\[\]]|\$\$|\\(?:frac|alpha|beta|gamma|times|cdot|mathrm|text|sum|approx|le|ge|"
                       r"sqrt|left|right|mu|ll|gg|infty|lceil|rceil|lfloor|rfloor)(?![a-zA-Z])")
ABS_PATH = re.compile(r"(?<![\w.~/:])/(?:home|root|work|tmp|opt|Users|mnt|scratch|private|var/folders)/[\w.@+-]+"
                      r"|[\w.+-]*/(?:site|dist)-packages/[\w./-]+|[A-Z]:\\\\Users\\\\")
PROGRESS = re.compile(r"\d{1,3}%\|[^|\n]*\||\d+(?:\.\d+)?(?:it/s|s/it)\]|TqdmWarning|IProgress not found")


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
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events[since:]:
                    if e.get("method") == method:
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def open_tab(self, width: int = WIDTH, height: int = HEIGHT) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=None)["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.send(m)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def evaluate(self, expression: str, timeout: float = 30):
        r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                           "returnByValue": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise CDPError(f"evaluate failed: {r['exceptionDetails'].get('text')} "
                           f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
        return r["result"].get("value")

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

_REPORT = r"""(() => {
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'TEXTAREA', 'MJX-CONTAINER', 'NOSCRIPT']);
  const shown = el => !!(el && (el.offsetWidth || el.offsetHeight || el.getClientRects().length));
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const prose = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let p = n.parentElement, hidden = false;
    for (let a = p; a; a = a.parentElement) { if (skip.has(a.tagName)) { hidden = true; break; } }
    if (!hidden && shown(p)) prose.push(n.textContent);
  }
  const math = [...document.querySelectorAll('.math')];
  const tables = [...document.querySelectorAll('article table, main table')].map(t => {
    const head = t.tHead && t.tHead.rows.length ? [...t.tHead.rows[0].cells].map(c => c.textContent.trim()) : [];
    const body = t.tBodies.length ? [...t.tBodies[0].rows] : [];
    let scrolls = false;
    for (let a = t.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') { scrolls = true; break; }
    }
    const main = document.querySelector('main') || document.body;
    const cut = t.getBoundingClientRect().right > main.getBoundingClientRect().right + 2 && !scrolls;
    return {head, headRows: t.tHead ? t.tHead.rows.length : 0, cut,
            first: body.map(r => r.cells.length ? r.cells[0].textContent.trim() : ''),
            cls: t.className, caption: t.caption ? t.caption.textContent.trim() : ''};
  });
  return {
    title: document.title,
    prose: prose.join(' '),
    text: document.body.textContent,
    math: math.length, mathUnrendered: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    images: [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                                            alt: i.getAttribute('alt') || '', w: i.naturalWidth})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    tables,
    sideways: document.documentElement.scrollWidth > document.documentElement.clientWidth + 1,
  };
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


def _bare_index(t: dict) -> bool:
    first = t["first"]
    if len(first) < 2 or not t["head"] or t["head"][0] != "":
        return False
    try:
        nums = [int(x) for x in first]
    except ValueError:
        return False
    return nums == list(range(nums[0], nums[0] + len(nums))) and nums[0] in (0, 1)


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
    """Check every page of `site`; write screenshots and report.json into `out`
    (default: the folder beside the site, <site>/../screenshots). Returns the report."""
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
        browser.open_tab()
        for page in pages(site):
            res, rep = _visit(browser, page, site, out)
            _check_math(res, rep)
            _check_images(res, rep)
            _check_links(res, rep, seen_links, anchors)
            _check_machine(res, rep, host, host_re)
            _check_tables(res, rep)
            results.append(res)
            mark = "ok" if not res.errors else f"{len(res.errors)} problem(s)"
            echo(f"  {res.page:<40} {mark}")
    finally:
        browser.close()
    report = {
        "site": str(site), "pages": len(results),
        "images": sum(r.images for r in results), "images_without_alt": sum(r.images_without_alt for r in results),
        "links_internal": sum(r.links_internal for r in results), "links_checked": len(seen_links),
        "links_external": sum(r.links_external for r in results),
        "math": sum(r.math for r in results), "tables": sum(r.tables for r in results),
        "errors": sum(len(r.errors) for r in results),
        "per_page": [r.__dict__ for r in results],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _visit(browser: Chromium, page: Path, site: Path, out: Path) -> tuple[PageResult, dict]:
    """Open `page` in the browser, let it settle and take its screenshot; its result (with what the
    browser logged meanwhile) and what the page reports of itself (_REPORT)."""
    rel = page.relative_to(site).as_posix()
    res = PageResult(rel)
    since = len(browser.events)
    browser.send("Page.navigate", {"url": page.as_uri()})
    if browser.wait_event("Page.loadEventFired", since, timeout=30) is None:
        res.errors.append("the page did not finish loading within 30 s")
    browser.evaluate(_SETTLE, timeout=40)
    time.sleep(0.2)
    shot = out / (rel[:-5].replace("/", "__") + ".png")
    shot.write_bytes(base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"]))
    res.screenshot = shot.name
    rep = browser.evaluate(_REPORT)
    res.errors += _events_errors(browser.events[since:])
    return res, rep


def _check_math(res: PageResult, rep: dict) -> None:
    res.math = rep["math"]
    for m in rep["mathUnrendered"]:
        res.errors.append(f"math not rendered by MathJax: {m!r}")
    for m in list(RAW_LATEX.finditer(rep["prose"]))[:5]:
        ctx = rep["prose"][max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
        res.errors.append(f"raw LaTeX in the visible text: ...{ctx}...")


def _check_images(res: PageResult, rep: dict) -> None:
    for img in rep["images"]:
        res.images += 1
        if not img["ok"]:
            res.errors.append(f"image did not load: {img['src'][:200]}")
        alt = img["alt"].strip()
        if not alt or re.search(r"\.(?:png|jpe?g|svg|gif)$", alt) or alt in img["src"]:
            res.images_without_alt += 1
            res.errors.append(f"image without alt text: {img['src'].rsplit('/', 1)[-1][:80]}")


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


def _check_machine(res: PageResult, rep: dict, host: str, host_re) -> None:
    """The machine on the page: absolute paths, progress bars, this machine's host name."""
    for m in list(ABS_PATH.finditer(rep["text"]))[:5]:
        res.errors.append(f"absolute path on the page: {m.group(0)[:120]}")
    for m in list(PROGRESS.finditer(rep["text"]))[:3]:
        res.errors.append(f"progress-bar or tqdm text on the page: {m.group(0)[:80]}")
    if host_re and host_re.search(rep["text"]):
        res.errors.append(f"this machine's host name {host!r} is on the page")


def _check_tables(res: PageResult, rep: dict) -> None:
    res.tables = len(rep["tables"])
    if rep["sideways"]:
        res.errors.append("the page scrolls sideways (something is wider than the window)")
    for t in rep["tables"]:
        if t["cut"]:
            res.errors.append(f"table runs off the page without scrolling (headers {t['head'][:4]})")
        if _bare_index(t):
            res.errors.append(f"table with a bare integer index column (headers {t['head'][:4]})")


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
    return (f"browser: {report['pages']} pages, {report['images']} images, {report['links_checked']} internal "
            f"links checked ({report['links_internal']} on the pages), {report['math']} formulas, "
            f"{report['tables']} tables, {report['errors']} errors")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.book.browser", description=__doc__.split("\n\n")[0])
    p.add_argument("site", nargs="?", default="_build/html", help="the built site (default: _build/html)")
    p.add_argument("--out", help="where screenshots and report.json go (default: <site>/../screenshots)")
    args = p.parse_args(argv)
    try:
        report = check_site(Path(args.site), Path(args.out) if args.out else None)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in report["per_page"]:
        for e in r["errors"]:
            print(f"{r['page']}: {e}")
    print(summary_line(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
