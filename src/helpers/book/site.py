"""Sphinx extension: the site as a reader opens it, from disk or any web server, with no network.

Registered in _config.yml (`sphinx: extra_extensions`). Sphinx's MathJax loads its script from a CDN by
default, so a reader without internet access (or inside a closed network) sees raw LaTeX. This extension
points `mathjax_path` at a copy of MathJax 3 that ships with the site: it is taken from the installed
PyPI package `django-static-mathjax` (the MathJax release's static files, no Django needed) and copied
into `_static/mathjax/` when the build finishes. Nothing is downloaded, at build or at view time. The
theme's own fonts and icons (FontAwesome) are bundled by pydata-sphinx-theme already.

A glued sentence is set in the text's weight, not in myst-nb's bold (`SENTENCE_CHARS`). It also keeps the
pages free of console errors a reader's browser would log: sphinx-thebe's inline
configuration is added twice to every page (`Identifier 'THEBE_JS_URL' has already been declared`) and
names a CDN, so with the book's launch buttons off (`launch_buttons: thebe: false`) its scripts are
left out; and the theme's colour mode defaults to `auto` (unset, pydata-sphinx-theme logs "invalid theme
mode" on a reader's first visit).

Only what the page needs is copied (about 3 MiB of the package's 24): the `tex-mml-chtml` component
(TeX and MathML in, HTML-CSS out, the one Sphinx loads from the CDN), its fonts, the TeX and MathML
extensions it may autoload, the menu, and the accessibility tools with their English speech rules.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

#: what `mathjax_path` names, relative to _static
ENTRY = "mathjax/tex-mml-chtml.js"
#: paths under the package's es5/ folder that are copied (files or folders)
KEEP = ("tex-mml-chtml.js", "output/chtml", "output/chtml.js", "input/tex", "input/mml", "ui", "a11y",
        "sre/mathmaps/en.json", "sre/mathmaps/base.json", "sre/mathmaps/nemeth.json", "adaptors")
PACKAGE = "django-static-mathjax"


class OfflineError(RuntimeError):
    pass


def mathjax_source() -> Path:
    """The es5/ folder of the installed MathJax package (import name `mathjax`)."""
    spec = importlib.util.find_spec("mathjax")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        es5 = Path(root) / "static" / "mathjax" / "es5"
        if (es5 / "tex-mml-chtml.js").exists():
            return es5
    raise OfflineError(f"MathJax's static files were not found: the book bundles them from the PyPI package "
                       f"{PACKAGE} (a dependency in pyproject.toml); install it with "
                       f"`pip install {PACKAGE}` (import name `mathjax`, looked in {roots or 'nowhere'})")


def copy_mathjax(static_dir: Path) -> Path:
    """Copy the MathJax files the site needs into <static_dir>/mathjax; return that folder."""
    src = mathjax_source()
    dst = Path(static_dir) / "mathjax"
    if dst.exists():
        shutil.rmtree(dst)
    for rel in KEEP:
        s = src / rel
        if s.is_dir():
            shutil.copytree(s, dst / rel)
        elif s.exists():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dst / rel)
    return dst


def _config_inited(app, config) -> None:
    mathjax_source()  # fail at the start of a build, not after it, when the package is missing
    config.mathjax_path = ENTRY
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def _thebe_wanted(app) -> bool:
    opts = app.config.html_theme_options or {}
    return bool((opts.get("launch_buttons") or {}).get("thebe")) or bool(
        (getattr(app.config, "thebe_config", None) or {}).get("always_load"))


def _page_context(app, pagename, templatename, context, doctree) -> None:
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    scripts = context.get("script_files")
    if not scripts:
        return
    keep, seen = [], set()
    for js in scripts:
        name = str(getattr(js, "filename", js) or "")
        body = str((getattr(js, "attributes", None) or {}).get("body", ""))
        if not _thebe_wanted(app) and ("sphinx-thebe" in name or "THEBE_JS_URL" in body or "thebe@" in name):
            continue
        key = (name, body)
        if key in seen:
            continue
        seen.add(key)
        keep.append(js)
    context["script_files"] = keep
    if not _thebe_wanted(app) and context.get("css_files"):
        context["css_files"] = [c for c in context["css_files"]
                                if "sphinx-thebe" not in str(getattr(c, "filename", c) or "")]


def _build_finished(app, exc) -> None:
    if exc is None and app.builder.format == "html":
        copy_mathjax(Path(app.outdir) / "_static")


#: a glued value longer than this is a sentence, not a figure: myst-nb sets every glued value in bold
#: (`span.pasted-text`), which turns a glued sentence into a wall of bold text (reader review, defect 9);
#: such spans get the class `pasted-sentence`, which _static/custom.css sets in the text's own weight
SENTENCE_CHARS = 40


def _unbold_sentences(app, doctree, docname) -> None:
    from docutils import nodes

    for node in doctree.findall(nodes.inline):
        if "pasted-text" in node.get("classes", []) and len(node.astext()) > SENTENCE_CHARS:
            node["classes"].append("pasted-sentence")


def setup(app):
    app.connect("doctree-resolved", _unbold_sentences)
    app.connect("config-inited", _config_inited, priority=900)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("build-finished", _build_finished)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
