"""What the browser check looks for on a page (helpers.book.browser drives Chromium and calls these).

`REPORT` is the script each page runs to describe itself; the `check_*` functions read that description
and append one message per defect to the page's errors, each naming the offending text (excerpted), so a
failure says where to look. They need no browser, so the unit tests call them on hand-made descriptions.

The rules (issue 24: the browser check catches what a reader caught):
- length: screens = the page's scrollHeight / the window's height, closed `<details>` left closed, at
  1280 x 900 (desktop) and at 390 x 844 (a phone, mobile emulation); a page over PAGE_BUDGET desktop
  screens fails, and so does the site over SITE_BUDGET desktop screens in total (genindex, search and the
  index redirect left out: NOT_COUNTED);
- sideways scroll at either width (scrollWidth > clientWidth);
- machine text: an absolute path of a machine, progress-bar (tqdm) text, progress-log lines
  ("[1/30] batch 1 ..."), "wrote <path>" lines, tracebacks ("Traceback (most recent call last)",
  'File "...", line N'), anywhere on the page, folded or not (code cells' sources left out);
- stdout from code: a cell's stream output (print, stderr) or a bare text repr of its last expression
  (`.cell_output .output.stream/.stderr/.text_plain` blocks, errors and tracebacks) shown without opening a
  fold: the book shows values through glue and tables.show, logs in a folded block;
- Python reprs in prose: lists of strings (`['NVIDIA H200']`), `name=None/True/False`, `<... object at
  0x...>`, `PosixPath(`, `array(`, `dict_keys(`, ...; pandas "N rows × M columns" footers;
- literal backticks in rendered prose (outside code: MyST left them because code sat inside bold or a
  caption), and a typographic dash in a flag ("–enable-ep-moe", "—resume": smart quotes turned `--` into
  an en dash because the flag was prose, not code);
- a table cell cut short (its text ends in "…" or "..."), and a table wider than the page at 1280 px
  (it scrolls inside its frame, its last columns out of sight; folded tables are left out);
- a figure with empty data: an image whose alt text says it has no data ("no data"), or the bare
  "Figure:" that helpers.core.plotting.describe gives a figure with no panel holding data;
- template leftovers in prose: "(NaN in recorded mode)", "NaN where not measured", an unresolved
  `{glue:...}` role.
"""
from __future__ import annotations

import re

#: the length budget (issue 24): desktop screens (1280 x 900) per page, and in total over the counted pages
PAGE_BUDGET = 10
SITE_BUDGET = 60
#: pages left out of the total: the generated index, the search page and the redirect to the first page
NOT_COUNTED = ("genindex.html", "search.html", "index.html")
DESKTOP = (1280, 900)
PHONE = (390, 844)

RAW_LATEX = re.compile(r"\\[()\[\]]|\$\$|\\(?:frac|alpha|beta|gamma|times|cdot|mathrm|text|sum|approx|le|ge|"
                       r"sqrt|left|right|mu|ll|gg|infty|lceil|rceil|lfloor|rfloor)(?![a-zA-Z])")
ABS_PATH = re.compile(r"(?<![\w.~/:])/(?:home|root|work|tmp|opt|Users|mnt|scratch|private|var/folders)/[\w.@+-]+"
                      r"|[\w.+-]*/(?:site|dist)-packages/[\w./-]+|[A-Z]:\\\\Users\\\\")
PROGRESS = re.compile(r"\d{1,3}%\|[^|\n]*\||\d+(?:\.\d+)?(?:it/s|s/it)\]|TqdmWarning|IProgress not found")
PROGRESS_LOG = re.compile(r"(?m)^\s*\[\d+/\d+\]\s+\S")
WROTE = re.compile(r"\b(?:[Ww]rote|[Ss]aved|[Ww]riting)\s+(?:to\s+)?[\w.~-]*/[\w./-]+")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"\n]+\", line \d+")
REPRS = re.compile(
    r"\[\s*(?:'[^'\n\]]*'|\"[^\"\n\]]*\")(?:\s*,\s*(?:'[^'\n\]]*'|\"[^\"\n\]]*\"))*\s*\]"   # ['a', 'b']
    r"|\[[A-Za-z][\w .:/-]*(?:, [A-Za-z][\w .:/-]*)+\]"                                 # [NVIDIA H200, NVIDIA H200]
    r"|\b[A-Za-z_]\w*=(?:None|True|False|nan)\b"                                        # fits=None
    r"|<[\w.]+ object at 0x[0-9a-fA-F]+>"                                               # <X object at 0x..>
    r"|\b(?:PosixPath|WindowsPath|PurePosixPath|array|dict_keys|dict_values|dict_items|Timestamp|"
    r"Timedelta|np\.float64|np\.int64|numpy\.float64|defaultdict|OrderedDict|Counter|namespace)\("
    r"|\{'[\w ]+': ")                                                                    # {'key': ...}
PANDAS_FOOTER = re.compile(r"\b\d+ rows × \d+ columns\b|\b\d+ rows x \d+ columns\b")
BACKTICK = re.compile(r"`[^`\n]{1,80}`|`")  # a pair as one, else a lone one
DASH_FLAG = re.compile(r"(?:^|(?<=[\s(\"'“‘\[]))[–—]{1,2}[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
TEMPLATE = re.compile(r"\bNaN (?:in|under|for) (?:recorded|auto|live|cpu|gpu|this)\b[\w -]{0,12}?"
                      r"\b(?:mode|target|runs?)\b|\bNaN where (?:not|un)\w*(?: \w+)?|\{glue(?::\w+)?\}")
EMPTY_FIGURE = re.compile(r"\bno data\b|^\s*Figure:\s*$|\bempty (?:figure|plot|chart)\b", re.I)
LIMIT = 5  # messages of one kind per page
TABLE_SLACK = 8  # px a table may run past its frame at 1280 px before it counts as wider than the page

REPORT = r"""(() => {
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'TEXTAREA', 'MJX-CONTAINER', 'NOSCRIPT', 'KBD', 'SAMP']);
  const shown = el => !!(el && (el.offsetWidth || el.offsetHeight || el.getClientRects().length));
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const prose = [], allProse = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let p = n.parentElement, code = false;
    for (let a = p; a; a = a.parentElement) { if (skip.has(a.tagName)) { code = true; break; } }
    if (code) continue;
    allProse.push(n.textContent);
    if (shown(p)) prose.push(n.textContent);
  }
  const body = document.body.cloneNode(true);
  body.querySelectorAll('.cell_input, script, style, noscript').forEach(e => e.remove());
  const folded = el => !!el.closest('details:not([open])');
  const streams = [...document.querySelectorAll('.cell_output .output')].filter(o =>
      /\b(stream|stderr|traceback|error)\b/.test(o.className) ||
      (o.classList.contains('text_plain') && o.tagName !== 'SPAN'))
    .map(o => ({text: o.textContent.trim(), folded: folded(o), cls: o.className}));
  const math = [...document.querySelectorAll('.math')];
  const main = document.querySelector('main') || document.body;
  const tables = [...document.querySelectorAll('article table, main table')].map(t => {
    const head = t.tHead && t.tHead.rows.length ? [...t.tHead.rows[0].cells].map(c => c.textContent.trim()) : [];
    const body = t.tBodies.length ? [...t.tBodies[0].rows] : [];
    let scrolls = false, hidden = 0;
    for (let a = t.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === 'auto' || o === 'scroll') { scrolls = true; hidden = a.scrollWidth - a.clientWidth; break; }
    }
    const cut = t.getBoundingClientRect().right > main.getBoundingClientRect().right + 2 && !scrolls;
    const cells = [...t.querySelectorAll('td, th')].map(c => c.textContent.trim());
    return {head, headRows: t.tHead ? t.tHead.rows.length : 0, cut, hidden: folded(t) ? 0 : hidden,
            first: body.map(r => r.cells.length ? r.cells[0].textContent.trim() : ''),
            truncated: cells.filter(c => /(…|\.\.\.)$/.test(c)),
            unshown: body.flatMap(r => [...r.cells].map(c => c.textContent.trim()))
                         .filter(c => ['nan', 'None', '<NA>', 'NaT'].includes(c)
                                      || (c === '' && t.classList.contains('book-table'))).slice(0, 3),
            cls: t.className, caption: t.caption ? t.caption.textContent.trim() : ''};
  });
  const root = document.documentElement;
  return {
    title: document.title, url: location.href,
    prose: prose.join(' '), allProse: allProse.join(' '),
    text: document.body.textContent, shownText: body.textContent,
    streams,
    math: math.length, mathUnrendered: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    images: [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                                            alt: i.getAttribute('alt') || '', w: i.naturalWidth})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    tables,
    height: root.scrollHeight, width: root.scrollWidth, clientWidth: root.clientWidth,
    viewHeight: window.innerHeight,
    sideways: root.scrollWidth > root.clientWidth + 1,
  };
})()"""

#: what a phone-width visit reports of the page (the length and the sideways scroll only)
MEASURE = r"""(() => { const r = document.documentElement;
  return {url: location.href, height: r.scrollHeight, width: r.scrollWidth, clientWidth: r.clientWidth,
          viewHeight: window.innerHeight, sideways: r.scrollWidth > r.clientWidth + 1}; })()"""


def excerpt(text: str, m: re.Match, around: int = 40) -> str:
    """The match with `around` characters each side, on one line."""
    s = text[max(0, m.start() - around):m.end() + around]
    return " ".join(s.split())


def _find(errors: list[str], what: str, pattern: re.Pattern, text: str, around: int = 40) -> None:
    """One message per distinct match (at most LIMIT), with the text around it."""
    seen: set[str] = set()
    for m in pattern.finditer(text):
        if m.group(0) in seen:
            continue
        seen.add(m.group(0))
        errors.append(f"{what}: ...{excerpt(text, m, around)}...")
        if len(seen) == LIMIT:
            break


def check_math(errors: list[str], rep: dict) -> None:
    for m in rep["mathUnrendered"]:
        errors.append(f"math not rendered by MathJax: {m!r}")
    _find(errors, "raw LaTeX in the visible text", RAW_LATEX, rep["prose"])


def check_images(errors: list[str], rep: dict) -> int:
    """Each image loaded, with alt text, and not a figure of empty data; the number without alt text."""
    without = 0
    for img in rep["images"]:
        name = img["src"].rsplit("/", 1)[-1][:80]
        if not img["ok"]:
            errors.append(f"image did not load: {img['src'][:200]}")
        alt = img["alt"].strip()
        if not alt or re.search(r"\.(?:png|jpe?g|svg|gif)$", alt) or alt in img["src"]:
            without += 1
            errors.append(f"image without alt text: {name}")
        elif EMPTY_FIGURE.search(alt):
            errors.append(f"figure with empty data (say it in a sentence instead): {name} alt {alt[:120]!r}")
    return without


def check_machine(errors: list[str], rep: dict, host: str = "", host_re=None) -> None:
    """The machine on the page: absolute paths, progress bars and logs, "wrote <path>", tracebacks, this
    machine's host name (in everything the page shows, folded or not, but not in code cells' sources)."""
    text, shown = rep["text"], rep.get("shownText", rep["text"])
    for m in list(ABS_PATH.finditer(text))[:LIMIT]:
        errors.append(f"absolute path on the page: {m.group(0)[:120]}")
    for m in list(PROGRESS.finditer(text))[:3]:
        errors.append(f"progress-bar or tqdm text on the page: {m.group(0)[:80]}")
    steps = list(PROGRESS_LOG.finditer(shown))
    if steps:
        errors.append(f"progress log on the page ({len(steps)} line(s) like this; print nothing: glue the "
                      f"result): ...{excerpt(shown, steps[0], 60)}...")
    _find(errors, "a 'wrote <path>' line on the page", WROTE, shown)
    _find(errors, "traceback on the page (show only the log lines that matter)", TRACEBACK, shown, 60)
    if host_re and host_re.search(text):
        errors.append(f"this machine's host name {host!r} is on the page")


def check_output(errors: list[str], rep: dict) -> None:
    """Stdout of code shown without opening a fold (see the module's docstring)."""
    for s in rep.get("streams", []):
        if s["folded"]:
            continue
        kind = "a cell's text repr" if "text_plain" in s["cls"] else "a cell's printed output"
        lines = [ln for ln in s["text"].splitlines() if ln.strip()]
        first = " | ".join(ln.strip() for ln in lines[:2])[:160]
        errors.append(f"{kind} on the page ({len(lines)} line(s); print nothing: glue values, fold logs): {first}")


def check_prose(errors: list[str], rep: dict) -> None:
    """Reprs, pandas footers, literal backticks, dashes in flags and template leftovers in the prose."""
    prose, shown = rep.get("allProse", rep["prose"]), rep.get("shownText", rep["text"])
    _find(errors, "Python repr in the prose", REPRS, prose)
    _find(errors, "pandas 'rows × columns' footer (show the table through tables.show)", PANDAS_FOOTER, shown)
    _find(errors, "literal backtick in the rendered prose (code inside bold or a caption?)", BACKTICK, prose, 30)
    _find(errors, "typographic dash in a flag (write the flag as code)", DASH_FLAG, shown, 30)
    _find(errors, "template leftover in the prose", TEMPLATE, prose)


def bare_index(t: dict) -> bool:
    first = t["first"]
    if len(first) < 2 or not t["head"] or t["head"][0] != "":
        return False
    try:
        nums = [int(x) for x in first]
    except ValueError:
        return False
    return nums == list(range(nums[0], nums[0] + len(nums))) and nums[0] in (0, 1)


def check_tables(errors: list[str], rep: dict, blank_cells: bool = True) -> None:
    if rep["sideways"]:
        errors.append(f"the page scrolls sideways at {DESKTOP[0]} px ({rep.get('width', '?')} px wide)")
    for t in rep["tables"]:
        if t["cut"]:
            errors.append(f"table runs off the page without scrolling (headers {t['head'][:4]})")
        if t.get("hidden", 0) > TABLE_SLACK:
            errors.append(f"table wider than the page at {DESKTOP[0]} px: {t['hidden']} px of it hidden to the "
                          f"right (at most 7 columns; split it) (headers {t['head'][:8]})")
        if bare_index(t):
            errors.append(f"table with a bare integer index column (headers {t['head'][:4]})")
        for c in t.get("truncated", [])[:3]:
            errors.append(f"table cell cut short (headers {t['head'][:4]}): {c[-80:]!r}")
        for c in [c for c in t.get("unshown", []) if blank_cells or c != ""][:1]:
            errors.append(f"table cell with no value shown ({c!r}; write missing values through the tables helper, "
                          f"which writes n/a with a legend) (headers {t['head'][:4]})")


def check_phone(errors: list[str], phone: dict) -> None:
    if phone["sideways"]:
        errors.append(f"the page scrolls sideways on a phone ({PHONE[0]} px): it is {phone['width']} px wide")


def screens(rep: dict) -> float:
    return rep["height"] / max(1, rep["viewHeight"])


def check_length(errors: list[str], page: str, desktop: float) -> None:
    if page not in NOT_COUNTED and desktop > PAGE_BUDGET:
        errors.append(f"the page is {desktop:.1f} desktop screens long ({DESKTOP[0]}x{DESKTOP[1]}), over "
                      f"the budget of PAGE_BUDGET={PAGE_BUDGET} (fold what only a sceptic needs)")


def site_length(per_page: list[dict]) -> dict:
    """Screens in total over the counted pages, at both widths, and whether that is over SITE_BUDGET."""
    counted = [p for p in per_page if p["page"] not in NOT_COUNTED]
    desktop = sum(p["screens_desktop"] for p in counted)
    phone = sum(p["screens_phone"] for p in counted)
    over = desktop > SITE_BUDGET
    return {"pages_counted": len(counted), "screens_desktop": round(desktop, 1), "screens_phone": round(phone, 1),
            "over_budget": over,
            "error": (f"the site is {desktop:.1f} desktop screens over {len(counted)} pages, over the budget of "
                      f"SITE_BUDGET={SITE_BUDGET} (genindex, search and the index redirect not counted)"
                      if over else "")}
