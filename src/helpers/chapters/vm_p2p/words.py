"""Small wording helpers the VM/P2P chapter's sentences share."""
from __future__ import annotations


def and_list(xs) -> str:
    """'a, b and c' (one item: itself; none: '')."""
    xs = [str(x) for x in xs]
    return ", ".join(xs[:-1]) + f" and {xs[-1]}" if len(xs) > 1 else "".join(xs)
