"""Putting computed values into the book's prose.

`glue` is myst-nb's glue where myst-nb is installed. On a measurement host without the book
toolchain (the GPU machine runs papermill and the kernel, not Sphinx) it writes the same output that
myst-nb's glue writes (a display_data output whose metadata names the key, with the
`application/papermill.record/` MIME prefix when not displayed), so a run executed there renders here
exactly as one executed here.
"""
from __future__ import annotations

from typing import Any

_PREFIX = "application/papermill.record/"


class _Text(str):
    """A string whose plain-text display is the string itself (no quotes), so that
    {glue:}`key` and {glue:text}`key` put the bare text into prose."""

    def __repr__(self) -> str:
        return str(self)


def plain(variable: Any) -> Any:
    """matplotlib Figures become PNG images; numpy / pandas scalars become Python scalars (their text form is then `11.0`, not
    `np.float64(11.0)`, which glue's number formatting cannot read); strings display bare."""
    if isinstance(variable, str):
        return _Text(variable)
    if type(variable).__name__ == "Figure" and hasattr(variable, "savefig"):
        from helpers.core.plotting import figure_image  # a bare Figure has no PNG display under Agg

        return figure_image(variable)  # with alt text describing it, for the page's <img>
    item = getattr(variable, "item", None)
    if item is not None and getattr(variable, "ndim", None) == 0:
        try:
            return item()
        except (TypeError, ValueError):
            return variable
    return variable


def glue(name: str, variable: Any, display: bool = False) -> None:
    """Store `variable` under `name` for {glue:text}`name:.1f` and {glue:figure} (same page) or
    {glue:text}`path/to/page.ipynb::name:.1f` (another page). Strings: {glue:}`name`."""
    variable = plain(variable)
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover - exercised on the GPU host
        _glue = None
    if _glue is not None:
        _glue(name, variable, display=display)
        return
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    mimebundle, metadata = format_display_data(variable)
    prefix = "" if display else _PREFIX
    metadata = dict(metadata or {})
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in mimebundle.items()}, raw=True, metadata=metadata)


def read_glued(nb_path) -> dict[str, str]:
    """Every value an executed notebook glued: key -> its text/plain form ("<image>" for a figure).
    For comparing two renderings of a chapter and for tests that check a chapter's glued numbers."""
    import json
    from pathlib import Path

    nb = json.loads(Path(nb_path).read_text())
    out: dict[str, str] = {}
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []):
            meta = (o.get("metadata") or {}).get("scrapbook")
            if not meta:
                continue
            data = o.get("data", {})
            prefix = meta.get("mime_prefix", "")
            text = data.get(prefix + "text/plain")
            if isinstance(text, list):
                text = "".join(text)
            out[meta["name"]] = "<image>" if (prefix + "image/png") in data else str(text)
    return out


def glue_all(values: Any, *more: Any) -> None:
    """Glue every field of a dataclass of values (a chapter module's, helpers.chapters) under the field's
    name: the dataclass is where a reader finds each key the page cites. Several dataclasses (a section's
    `Part.values`) are glued in order; every one is checked before any is glued."""
    import dataclasses

    for v in (values, *more):
        if not dataclasses.is_dataclass(v) or isinstance(v, type):
            raise TypeError(f"glue_all takes dataclass instances of glued values, not {type(v).__name__}; "
                            "declare the chapter's values as a dataclass in helpers.chapters.<chapter>")
    for v in (values, *more):
        for f in dataclasses.fields(v):
            glue(f.name, getattr(v, f.name))
