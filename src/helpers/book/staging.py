"""What the runbook does to an executed chapter before the site shows it: nothing of the machines that
executed or built it reaches the page.

- papermill's injected-parameters cell (raw code ending in `run_dir = "/abs/path/runs/ID"`) becomes a
  "Parameters of this run" box at the end of the page, folded (a dropdown, closed): each parameter's
  value in this run, its default and what it allows (read from the chapter's own `parameters` cell,
  whose code folds away behind a toggle);
- stderr outputs are dropped (warnings naming site-packages paths, tqdm bars: the run's notebooks keep
  them), progress-bar lines are dropped from stdout, and an output that is only a `PosixPath(...)` goes;
- absolute paths of the run's machine and of this one become paths relative to the repository
  (`runs/ID/results/...`, `src/helpers/...`), and a table cell holding exactly a host name is withheld;
- a table pandas printed by default (a DataFrame left at the end of a cell) loses its bare 0..n-1 index
  column and its `NaN`/`<NA>` cells, and folds behind a toggle when it is long. Tables drawn by
  `helpers.core.tables.show` need none of this.

The executed notebooks in the run folder are never changed: this works on the staged copy. `stage` lays
out the whole buildable book from a run: the repository's pages, the run's chapters cleaned so, a page
saying so for each chapter that did not finish (`problem_page`), and the status page made from the
run's manifest (`status_page`).
"""
from __future__ import annotations

import ast
import html
import io
import json
import re
import shutil
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from helpers.book.manifest import Manifest
from helpers.core.layout import REPLAY_MODE
from helpers.book.planning import stem, toc_entries
from helpers.book.statuspage import problem_page, status_page  # noqa: F401 (status_page: runbook imports it here)
from helpers.book.targets import TARGETS_DIR
from helpers.core import tables

#: tqdm's bar: "desc:  17%|█▋        | 1/6 [00:18<01:30, 18.13s/it]"
PROGRESS = re.compile(r"\d{1,3}%\|[^|\n]*\||\[\d+:\d+<[\d:?]+,\s*[\d.?]+\s*(?:it/s|s/it)\]")
_MISSING_CELL = re.compile(r"<td>(?:NaN|nan|&lt;NA&gt;|<NA>|None|NaT|&lt;NaT&gt;)</td>")
_TABLE = re.compile(r'<table border="1" class="dataframe">.*?</table>', re.S)
_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.S)
_CELL = re.compile(r"\s*<(th|td)([^>]*)>(.*?)</\1>", re.S)
#: a pandas table with more rows than this folds behind a toggle (helpers.core.tables.FOLD_AFTER)
FOLD_AFTER = 15


@dataclass
class RunContext:
    """What the cleaning needs to know of the run: its id and target, the absolute folders it was
    executed in and rendered from, and host names to withhold. `run_dirs` (the run's folder, as the
    executing machine and this one name it) become `runs/<id>`; `roots` (checkouts, and the folder
    holding the Python environment) are cut off, leaving paths relative to them."""
    run_id: str = ""
    target: str = ""
    roots: list[str] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    #: the chapters a replay presented again: stem -> (the presenting commit, the mode it re-executed them in)
    replayed: dict = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, manifest: Manifest, local_root=None, local_run_dir=None) -> "RunContext":
        import socket
        from pathlib import PurePosixPath

        roots, run_dirs = set(), set()
        run_id = manifest.run_id

        def add_run_dir(rd):
            p = PurePosixPath(str(rd))
            run_dirs.add(str(p))
            if p.parent.name == "runs":  # runs/<id> inside a checkout: the checkout is a root
                roots.add(str(p.parent.parent))

        for c in manifest.chapters:
            rd = (c.get("parameters") or {}).get("run_dir")
            if rd and str(rd).startswith("/"):
                add_run_dir(rd)
        if local_run_dir:
            add_run_dir(Path(local_run_dir).resolve())
        if local_root:
            roots.add(str(Path(local_root).resolve()))
        env = manifest.environment or {}
        if str(env.get("prefix") or "").startswith("/"):  # the venv's folder: `.venv/bin/python` remains
            roots.add(str(PurePosixPath(env["prefix"]).parent))
        hosts = {(manifest.hardware or {}).get("hostname"), socket.gethostname()}
        hosts |= {h.split(".")[0] for h in hosts if h}

        def clean(xs):
            return sorted((x for x in xs if x not in ("", "/")), key=len, reverse=True)

        rep = manifest.replayed or {}
        replayed = {stem: (str(rep.get("book_commit") or ""), str(mode)) for stem, mode in (rep.get("modes") or {}).items()}
        return cls(run_id, manifest.target, clean(roots),
                   sorted(h for h in hosts if h and len(h) >= 2), clean(run_dirs), replayed)


_SITE_PACKAGES = re.compile(r"(?<![\w:/.])(?:/[\w.+@-]+)+/((?:site|dist)-packages)(?=/|\b)")
#: a traceback line naming a file by its absolute path: keep the package folder and the file
_TRACEBACK_FILE = re.compile(r'File (?:"|&quot;)/[^"&\n]*/([^/"&\n]+/[^/"&\n]+\.py)(?:"|&quot;)')
_HOME = re.compile(r"(?<![\w:/.])/(?:home/[\w.-]+|root)/")
#: a Python interpreter by its absolute path outside the checkouts (a GPU host's own Python that `make` built
#: .venv over): keep its environment folder and name, not where the machine keeps it
_INTERPRETER = re.compile(r"(?<![\w:/.~])(?:/[\w.+@-]+)+/([\w.+@-]+/bin/python[\d.]*)(?![\w/])")


def public_text(text: str, ctx: RunContext) -> str:
    """`text` with the run's and this machine's absolute folders made relative to the repository, an
    installed package's folder shortened to `site-packages/...` and a home folder to `~/`."""
    if ctx.run_id:
        for rd in ctx.run_dirs:
            text = re.sub(re.escape(rd.rstrip("/")) + r"(?=[/\s\"'`)<,;:]|$)", f"runs/{ctx.run_id}", text)
    for root in ctx.roots:
        text = re.sub(re.escape(root.rstrip("/")) + r"(?:/|(?=[\s\"'`)<,;:]|$))", "", text)
    text = _TRACEBACK_FILE.sub(r'File ".../\1"', text)
    text = _INTERPRETER.sub("…/\\1", text)
    return _HOME.sub("~/", _SITE_PACKAGES.sub(r"\1", text))


def _withhold_hosts(text: str, ctx: RunContext) -> str:
    for h in ctx.hostnames:
        text = text.replace(f"<td>{html.escape(h)}</td>", "<td>(withheld)</td>")
    return text


def strip_progress(text: str) -> str:
    """Drop progress-bar lines (a terminal shows the last carriage-return segment of each line)."""
    out = []
    for line in text.split("\n"):
        shown = line.split("\r")[-1] if "\r" in line else line
        if PROGRESS.search(line) or ("\r" in line and not shown.strip()):
            continue
        out.append(shown)
    return "\n".join(out)


def clean_dataframe_html(text: str) -> str:
    """A pandas default table made readable: no bare integer index, blank missing cells, folded when
    long. Any table that does not look exactly like pandas' default output is left as it is."""
    def fix(m):
        tab = _MISSING_CELL.sub("<td></td>", m.group(0))
        head, _, body = tab.partition("<tbody>")
        head_rows, body_rows = _ROW.findall(head), _ROW.findall(body)
        first_cells = [_CELL.match(r) for r in body_rows]
        bare = (len(head_rows) == 1 and body_rows and all(first_cells)
                and re.match(r"\s*<th[^>]*>\s*</th>", head_rows[0])
                and all(c.group(1) == "th" and "span" not in c.group(2) and re.fullmatch(r"-?\d+", c.group(3).strip())
                        for c in first_cells))
        if bare:
            tab = _ROW.sub(lambda r: r.group(0).replace(_CELL.match(r.group(1)).group(0), "", 1)
                           if _CELL.match(r.group(1)) else r.group(0), tab)
        n = len(body_rows)
        if n > FOLD_AFTER:
            cols = [html.unescape(re.sub(r"<[^>]+>", "", c[2])).strip() for c in _CELL.findall(head_rows[-1] if head_rows else "")]
            cols = [c for c in cols if c]
            names = ", ".join(cols[:4]) + (", ..." if len(cols) > 4 else "")
            tab = (f'<details class="book-table-fold"><summary>A table of {n} rows ({html.escape(names)}) '
                   f'<span class="book-table-count">(show all {n} rows)</span></summary>{tab}</details>')
        return tab

    return _TABLE.sub(fix, text)


def _as_text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def _assignments(source: str) -> dict[str, tuple[object, str, str]]:
    """name -> (value, value's source text, the line's comment) for `name = literal  # comment` lines."""
    comments = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError):
        pass
    out = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seg = ast.get_source_segment(source, node.value) or ""
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = seg
            out[node.targets[0].id] = (value, seg, comments.get(node.lineno, ""))
    return out


def _literal(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def parameters_box(defaults_src: str, injected_src: str | None, ctx: RunContext, stem: str = "") -> str:
    """The MyST text of the "Parameters of this run" box: a dropdown, closed until a reader opens it
    (`clean_notebook` puts it at the end of the chapter, after everything the chapter says). A chapter a replay
    presented again (ctx.replayed, by `stem`) says so: the replay re-executed it with these values, in the mode the
    box shows, and the status page names the run's own (site-read8 T8, site-read9 U5)."""
    defaults = _assignments(defaults_src)
    given = _assignments(injected_src) if injected_src else {}
    names = list(defaults) + [n for n in given if n not in defaults]
    run = f"Run `{ctx.run_id}`" + (f" (target `{ctx.target}`)" if ctx.target else "") if ctx.run_id else "This run"
    commit, _ = ctx.replayed.get(stem, (None, None))
    replay_mode = given.get("mode", (None,))[0] == REPLAY_MODE
    if commit is not None:
        did = (f"{run} ran this chapter; a replay at commit `{commit}` re-executed it with these values"
               + (" (mode `replay`: it presents what the run's execution saved, measuring nothing)" if replay_mode else
                  " (measuring nothing)") + "; the status page gives the run's own mode")
    elif replay_mode:
        did = (f"{run} ran this chapter; a replay presented it again with these values (mode `replay`: what the "
               "run's execution saved, measuring nothing)")
    else:
        did = f"{run} executed this chapter with these values"
    set_by = "(set by the replay)" if commit is not None else "(set by the run)"
    lines = [":::{dropdown} Parameters of this run", ":class-container: book-params", "",
             f"{did}. The chapter's parameters cell declares them, with the defaults and allowed values below.", "",
             "| parameter | this run | default; allowed |", "| --- | --- | --- |"]
    for n in names:
        d_val, _, comment = defaults.get(n, (None, "", ""))
        v = given[n][0] if n in given else d_val
        if n == "run_dir" and isinstance(v, str):
            v = f"runs/{ctx.run_id}" if ctx.run_id and v else public_text(v, ctx) or "(a temporary folder)"
            shown = f"`{v}`"
        else:
            shown = f"`{_md_cell(_literal(v))}`"
        if n in given and n != "run_dir" and given[n][0] != d_val:
            shown = f"{shown} {set_by}"
        allowed = re.sub(r"^allowed:\s*", "", comment)
        default = f"`{_md_cell(_literal(d_val))}`" if n in defaults else "(not declared)"
        lines.append(f"| `{n}` | {shown} | {default}{'; ' + _md_cell(allowed) if allowed else ''} |")
    lines.append(":::")
    return "\n".join(lines)


_GLUE_FIGURE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{glue:figure\}\s+(?P<key>\S+)[^\n]*\n(?P<opts>(?:[ \t]*:[\w-]+:[^\n]*\n)*)",
                          re.M)


def figure_alts(nb: dict) -> dict[str, str]:
    """Glue key -> the alt text its figure carries (helpers.core.plotting.figure_image)."""
    out = {}
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) or []:
            meta = o.get("metadata") or {}
            name = (meta.get("scrapbook") or {}).get("name")
            alt = (meta.get("image/png") or {}).get("alt")
            if name and alt:
                out[name] = " ".join(str(alt).split())
    return out


_ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")


def caption_alt(caption: str, limit: int = 300) -> str:
    """Alt text from a figure's caption where the figure carries none: its first sentence, with MyST
    roles (glued values, references) and markup taken out."""
    text = " ".join(_ROLE.sub("", caption).replace("`", "").replace("*", "").split())
    first = re.split(r"(?<=[.;:])\s", text, maxsplit=1)[0].rstrip(".;:")
    first = first if len(first) >= 20 else text
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def add_figure_alts(markdown: str, alts: dict[str, str]) -> str:
    """Give every `{glue:figure} key` directive without an `:alt:` option alt text: its figure's own
    (helpers.core.plotting.figure_image), else the first sentence of its caption."""
    def fix(m):
        key = m.group("key").rsplit("::", 1)[-1]
        if ":alt:" in m.group("opts"):
            return m.group(0)
        alt = alts.get(key)
        if not alt:
            rest = markdown[m.end():]
            close = re.search(rf"^{re.escape(m.group('fence'))}\s*$", rest, re.M)
            alt = caption_alt(rest[: close.start()] if close else rest[:400])
        if not alt:
            return m.group(0)
        head = m.group(0)[: len(m.group(0)) - len(m.group("opts"))]
        return f"{head}:alt: {alt}\n{m.group('opts')}"
    return _GLUE_FIGURE.sub(fix, markdown)


def clean_notebook(nb: dict, ctx: RunContext, stem: str = "") -> dict:
    """Clean an executed notebook (a dict, changed in place and returned) for the site; `stem`: its chapter, for
    the parameters box of a chapter a replay presented again."""
    cells = nb.get("cells", [])
    alts = figure_alts(nb)
    for cell in cells:
        if cell["cell_type"] == "markdown" and "{glue:figure}" in _as_text(cell["source"]):
            cell["source"] = add_figure_alts(_as_text(cell["source"]), alts)
    defaults_src = next((_as_text(c["source"]) for c in cells if c["cell_type"] == "code"
                         and "parameters" in c.get("metadata", {}).get("tags", [])), None)
    new_cells, injected = [], None
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code" and "injected-parameters" in tags and defaults_src is not None:
            injected = _as_text(cell["source"])  # the values the run gave: shown in the box at the end
            continue
        if cell["cell_type"] == "code":
            cell["outputs"] = [o for o in (_clean_output(o, ctx) for o in cell.get("outputs", [])) if o]
        new_cells.append(cell)
    if defaults_src is not None:  # the box closes the page, folded (no injected cell: the defaults ran)
        new_cells.append({"cell_type": "markdown", "id": "parameters-of-this-run",
                          "metadata": {"tags": ["parameters-box"]},
                          "source": parameters_box(defaults_src, injected, ctx, stem)})
    nb["cells"] = new_cells
    return nb


#: the mime type of a value glued as plain text ({glue:text} shows it as it is: no Markdown)
GLUED_PLAIN = "application/papermill.record/text/plain"
def plain_code_spans(text: str) -> str:
    """A glued sentence's Markdown code spans as their plain text: {glue:text} cannot show code, and a
    reader would otherwise see the backticks (the browser check fails on them)."""
    return tables.CODE_SPAN.sub(r"\1", text)


def _clean_output(o: dict, ctx: RunContext) -> dict | None:
    kind = o.get("output_type")
    if kind == "stream":
        if o.get("name") == "stderr":
            return None
        text = public_text(strip_progress(_as_text(o.get("text", ""))), ctx)
        if not text.strip():
            return None
        o["text"] = text
        return o
    if kind in ("execute_result", "display_data"):
        data = o.get("data", {})
        plain = _as_text(data.get("text/plain", ""))
        if set(data) == {"text/plain"} and re.fullmatch(r"\s*(?:Posix|Windows)Path\(.*\)\s*", plain):
            return None
        for mime in list(data):
            if "text/" in mime:  # text/plain, text/html, text/markdown, and glue's papermill.record/text/...
                text = public_text(_as_text(data[mime]), ctx)
                if "html" in mime:
                    text = _withhold_hosts(clean_dataframe_html(text), ctx)
                if mime == GLUED_PLAIN:
                    text = plain_code_spans(text)
                data[mime] = text
        return o
    if kind == "error":
        o["traceback"] = [public_text(t, ctx) for t in o.get("traceback", [])]
    return o


#: the MyST substitutions a page can use to name the run the site shows ({{ site_run }}, ...); the
#: repository's _config.yml holds neutral defaults for a build outside the runbook
SUBSTITUTION_KEYS = ("site_run", "site_target", "site_machine", "site_date", "site_commit", "site_presented")


def run_substitutions(manifest: Manifest) -> dict[str, str]:
    """What the first page says of the run the site was rendered from: its id, target, machine
    (GPUs, virtualization), date and commit, from the run's manifest."""
    hw = manifest.hardware or {}
    names = hw.get("gpu_names") or []
    count = hw.get("gpu_count") or len(names)
    if names and len(set(names)) == 1:
        gpus = f"{count} x {names[0]}"
    elif names:
        gpus = ", ".join(names)
    else:
        gpus = "no GPU"
    virt = hw.get("virtualization")
    machine = gpus + (f", {virt}" if virt and virt not in ("none", "bare metal") else "")
    commit = str((manifest.versions or {}).get("book_commit") or "")
    if not commit:
        commit_text = "an unrecorded commit"
    else:
        clean = commit.split()[0]
        commit_text = f"commit {clean.replace('+dirty', '')}" + (
            " with local changes" if clean.endswith("+dirty") else "") + (
            " (named by the sender)" if "BOOK_COMMIT" in commit else "")
    return {"site_run": str(manifest.run_id), "site_target": str(manifest.target),
            "site_machine": machine, "site_date": str(manifest.started or "")[:10] or "an unknown date",
            "site_commit": commit_text, "site_presented": presented_text(manifest)}


def presented_text(manifest: Manifest) -> str:
    """Where a replay presented the run again: the commit whose code re-executed its chapters (their derived figures
    were computed there, not at the run's own commit); '' for a run shown as it was made."""
    rep = manifest.replayed or {}
    commit = str(rep.get("book_commit") or "").split()[0] if rep else ""
    if not rep:
        return ""
    n = len(rep.get("chapters") or [])
    when = str(rep.get("started") or "")[:10]
    return (f"; presented again by {'commit ' + commit.replace('+dirty', ' with local changes') if commit else 'an unrecorded commit'}"
            + (f" on {when}" if when else "")
            + f", which re-executed {n} chapter{'s' if n != 1 else ''} (their derived figures were computed there)")


#: where the staging puts every chapter's glued figures, for pages that show another page's figure
#: with a plain `{figure}` (myst-nb's `{glue:figure}` reads only its own page's glue)
GLUED_DIR = "_glued"


def export_glued_figures(nb: dict, folder) -> list[str]:
    """Write each PNG figure `nb` glued as <folder>/<key>.png; return the keys written."""
    import base64

    folder = Path(folder)
    keys = []
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) or []:
            name = ((o.get("metadata") or {}).get("scrapbook") or {}).get("name")
            data = o.get("data") or {}
            png = data.get("image/png") or data.get("application/papermill.record/image/png")
            if name and png and re.fullmatch(r"[\w.-]+", name):
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{name}.png").write_bytes(base64.b64decode(_as_text(png)))
                keys.append(name)
    return keys


# ---- pages that cite another page's values, rendered from a run made before those values existed
#: `{glue:...}`path/to/chapter.ipynb::key[:format]`` in a Markdown page
CROSS_GLUE = re.compile(r"\{glue(?::[a-z]*)?\}`(?P<nb>[^`:]+\.ipynb)::(?P<key>[A-Za-z0-9_]+)(?::[^`]*)?`")
#: a figure directive that shows a glued figure exported under _glued/<stem>/<key>.png
GLUED_FIGURE = re.compile(r"```\{figure\}\s+(?P<path>" + re.escape(GLUED_DIR) + r"/[^\s`]+)\n.*?\n```", re.S)
NOT_IN_RUN = "*(not in this run)*"
FIGURE_NOT_IN_RUN = ("*This figure is not in this run: the run was made before the chapter drew it (its status "
                     "page says from which commit).*")


def cite_only_what_the_run_has(text: str, stage_root: Path) -> tuple[str, list[str]]:
    """A Markdown page with every cross-page glue reference and glued figure that the run's executed
    chapters do not have replaced by a visible 'not in this run' marker (a run made by an older book, whose
    chapters glued other values); returns the page and what was replaced. Values and figures the run has
    are left as they are, so a current run's page is unchanged."""
    from helpers.core.glue import read_glued

    have: dict[str, set] = {}
    missing: list[str] = []

    def keys(nb: str) -> set:
        if nb not in have:
            p = stage_root / nb
            have[nb] = set(read_glued(p)) if p.exists() else set()
        return have[nb]

    def cite(m):
        if m.group("key") in keys(m.group("nb")):
            return m.group(0)
        missing.append(f"{m.group('nb')}::{m.group('key')}")
        return NOT_IN_RUN

    def figure(m):
        if (stage_root / m.group("path")).exists():
            return m.group(0)
        missing.append(m.group("path"))
        return FIGURE_NOT_IN_RUN

    return GLUED_FIGURE.sub(figure, CROSS_GLUE.sub(cite, text)), missing


def _title(nb_path: Path, fallback: str) -> str:
    try:
        nb = json.loads(Path(nb_path).read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                for line in "".join(cell["source"]).splitlines():
                    if line.startswith("# "):
                        return line[2:].strip()
    except (OSError, ValueError, KeyError):
        pass
    return fallback


def _stage_notebook(src: Path, dst: Path, ctx=None) -> None:
    """Copy an executed chapter for rendering: code folds away behind a toggle (the reader sees
    the narrative, tables and figures first); papermill's injected cell becomes a "parameters of this
    run" box, which states every parameter with this run's value, its default and its allowed values, so the
    parameters cell itself is not shown twice; nothing of the machines that ran or built it stays on the page
    (helpers.book.staging)."""
    nb = json.loads(Path(src).read_text())
    clean_notebook(nb, ctx or RunContext(), Path(src).stem)
    # another page can show this chapter's figures: _glued/<stem>/<key>.png in the staged book
    stage_root = next((p for p in Path(dst).parents if (p / "_config.yml").exists()), Path(dst).parent)
    export_glued_figures(nb, stage_root / GLUED_DIR / Path(src).stem)
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "parameters" in tags and "remove-input" not in tags:
            tags.append("remove-input")   # every value, default and allowed value is in the box at the end
        elif not {"hide-input", "remove-input"} & set(tags):
            tags.append("hide-input")
    Path(dst).write_text(json.dumps(nb))


def stage(run_dir: Path, root: Path, stage_dir: Path) -> Path:
    """Lay out a buildable book in stage_dir from the repository's pages and the run's notebooks."""
    manifest = Manifest.load(run_dir)
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    cfg.setdefault("execute", {})["execute_notebooks"] = "off"
    # pages name the run they show: {{ site_run }}, {{ site_machine }}, ...
    subs = cfg.setdefault("parse", {}).setdefault("myst_substitutions", {})
    subs.update(run_substitutions(manifest))
    (stage_dir / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    shutil.copy(root / "_toc.yml", stage_dir / "_toc.yml")
    for extra in ("references.bib", "logo.png"):
        if (root / extra).exists():
            shutil.copy(root / extra, stage_dir / extra)
    shutil.copytree(root / TARGETS_DIR, stage_dir / TARGETS_DIR)  # shown on the re-running page
    if (root / "_static").is_dir():  # the book's CSS (jupyter-book includes every .css in it)
        shutil.copytree(root / "_static", stage_dir / "_static")
    ctx = RunContext.from_manifest(manifest, local_root=root, local_run_dir=run_dir)
    recs = {c["docname"]: c for c in manifest.chapters}
    titles = {}
    for doc in toc_entries(root):
        src_nb, src_md = root / f"{doc}.ipynb", root / f"{doc}.md"
        (stage_dir / doc).parent.mkdir(parents=True, exist_ok=True)
        if src_nb.exists():
            rec = recs.get(doc)
            titles[stem(doc)] = _title(src_nb, stem(doc))
            executed = run_dir / "notebooks" / f"{stem(doc)}.ipynb"
            if rec and rec["status"] in ("ok", "partial") and executed.exists():
                _stage_notebook(executed, stage_dir / f"{doc}.ipynb", ctx)
            else:
                rec = rec or {"stem": stem(doc), "status": "skipped", "duration_s": 0.0,
                              "error": {"ename": "Skipped", "evalue": "not part of this run"}}
                (stage_dir / f"{doc}.md").write_text(public_text(
                    problem_page(titles[stem(doc)], rec, manifest), ctx))
        elif src_md.exists():
            shutil.copy(src_md, stage_dir / f"{doc}.md")
    # pages that cite a chapter's values: a run made before a value existed shows "not in this run" there
    for doc in toc_entries(root):
        page = stage_dir / f"{doc}.md"
        if (root / f"{doc}.md").exists() and page.exists():
            text, missing = cite_only_what_the_run_has(page.read_text(), stage_dir)
            if missing:
                page.write_text(text)
                print(f"note: {doc}.md cites {len(missing)} value(s) this run's chapters do not have (made by an "
                      f"older book); shown as 'not in this run': {', '.join(missing[:4])}"
                      f"{' ...' if len(missing) > 4 else ''}", file=sys.stderr)
    (stage_dir / "appendix").mkdir(exist_ok=True)
    (stage_dir / "appendix" / "status.md").write_text(public_text(status_page(manifest, titles), ctx))
    return stage_dir
