"""Small wording helpers the VM/P2P chapter's sentences share."""
from __future__ import annotations


def and_list(xs) -> str:
    """'a, b and c' (one item: itself; none: '')."""
    xs = [str(x) for x in xs]
    return ", ".join(xs[:-1]) + f" and {xs[-1]}" if len(xs) > 1 else "".join(xs)


class Sentence:
    """A sentence of the page glued as Markdown: `{glue:md}` renders its code spans as code and its text in
    the body's weight (myst-nb sets `{glue:text}` in bold, which turns a glued paragraph into a wall of
    bold). Its text form is the sentence itself, so a run's glued value reads back as the sentence. Not a
    str: helpers.core.glue turns strings into plain text."""

    def __init__(self, text: str):
        self.text = str(text)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        return str(other) == self.text

    __hash__ = None

    def _repr_markdown_(self) -> str:
        return self.text


def md(text: str) -> Sentence:
    """`text` as the page shows it: times in µs (the sentence functions write "us", the unit the committed
    runs glued and tests/test_findings.py compares word for word), and command-line flags (`--standalone`)
    as code outside the code spans it already has, so Markdown cannot turn their `--` into a dash."""
    import re

    parts = str(text).split("`")
    for i in range(0, len(parts), 2):   # outside code spans
        parts[i] = re.sub(r"(\d) us\b", "\\1 µs", parts[i])
        parts[i] = re.sub(r"(?<![\w-])(--[A-Za-z][\w-]*(?:\.[\w-]+)*(?:=[^\s,;)]*[^\s,;).])?)", "`\\1`", parts[i])
    return Sentence("`".join(parts))
