"""Screenshots of chosen pages of the built site at 1280 and 390 px, for before/after comparisons
(issue 24's acceptance: docs/screenshots/).

    python -m helpers.book.browser _build/html --shots DIR --shot-pages intro notebooks/01_environment
    python -m helpers.book.browser _build/html --shots DIR --shot-pages notebooks/06_vm_p2p \\
        --shot-find "NaN in recorded mode" --shot-screens 1

Each shot is the first `screens` screens of the page (1280 x 900 a screen on the desktop; 390 x 844 on a
phone, mobile emulation, as the browser check measures them), or, with `find`, as many screens from just
above the first element that shows that text (or an image whose alt text holds it). PNGs are reduced to 256 colours where Pillow is installed,
so that a set of them stays small enough to commit.
"""
from __future__ import annotations

import base64
import io
import json
import re
import time
from pathlib import Path

from helpers.book import pagecheck as pc
from helpers.book.chromium import INSTALL_HINT, SETTLE, Chromium, find_chromium

#: the page offset (px) of the first element that shows the text (the innermost one; an image by its alt
#: text), or null
_FIND = r"""(t => { const has = e => e.textContent.includes(t) || (e.tagName === 'IMG' && (e.alt || '').includes(t));
  const all = [...document.querySelectorAll('main *, article *')].filter(e =>
    has(e) && ![...e.children].some(has) && e.getClientRects().length && !e.closest('details:not([open])'));
  return all.length ? all[0].getBoundingClientRect().top + window.scrollY : null; })"""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "text"


def take(site: Path, out: Path, names: list[str], widths=(pc.DESKTOP[0], pc.PHONE[0]), screens: float = 2,
         find: str | None = None, executable: str | None = None, echo=lambda *a: None) -> list[Path]:
    """Screenshots of the pages `names` (paths in the site without .html: intro, notebooks/06_vm_p2p) at each
    width in `widths` (1280: desktop; 390: a phone): the first `screens` screens of each (0: the whole page)
    as <page's file name>_<width>.png in `out`; with `find`, from the first element showing that text, as
    <page>_<width>_<slug of the text>.png (a page that does not show it is left out, and `echo` says so)."""
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
                path = _one(browser, page, out, w, h, screens, find)
                if path is None:
                    echo(f"{name} at {w} px does not show {find!r}: no shot")
                else:
                    written.append(path)
    finally:
        browser.close()
    return written


def _one(browser: Chromium, page: Path, out: Path, w: int, h: int, screens: float, find: str | None):
    browser.goto(page.as_uri())
    browser.evaluate(SETTLE, timeout=40)
    time.sleep(0.2)
    full = browser.evaluate("document.documentElement.scrollHeight")
    top, name = 0, f"{page.stem}_{w}.png"
    if find:
        at = browser.evaluate(f"{_FIND}({json.dumps(find)})")
        if at is None:
            return None
        top, name = max(0, int(at) - 150), f"{page.stem}_{w}_{slug(find)}.png"
    height = full - top if not screens else min(full - top, int(screens * h))
    if top:  # scrolled there: Chromium draws nothing below 16384 px in a capture beyond the window
        browser.evaluate(f"window.scrollTo(0, {top})")
        time.sleep(0.2)
        top = browser.evaluate("window.scrollY")
    png = browser.send("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": not top,
        "clip": {"x": 0, "y": top, "width": w, "height": max(1, min(height, h) if top else height), "scale": 1}})["data"]
    path = out / name
    path.write_bytes(small_png(base64.b64decode(png)))
    return path


def small_png(data: bytes) -> bytes:
    """`data` (a PNG) in 256 colours where Pillow is installed (a third of the size for a page of text),
    else as it is."""
    try:
        from PIL import Image
    except ImportError:
        return data
    img = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue() if buf.tell() < len(data) else data
