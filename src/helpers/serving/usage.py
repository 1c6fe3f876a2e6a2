"""A stream's token counts, checked against the stream that carried them (issue 36, item 3; issue 47, item 5).

The server's `usage` is the only token count the load generator takes (a chunk may carry several tokens), but it
is not taken on trust: `usage_problem` says why the reports of one stream cannot be its counts, and the request
then fails as "bad-usage", so no throughput rests on them. Refused:
- reports that disagree: the prompt count changes, the completion count falls, or it rises with no content
  streamed between the two reports. Usage in every chunk (vLLM's `continuous_usage_stats`) counts up with the
  content and is read as cumulative: the last report is the stream's count;
- a count that is missing, negative or not a whole number;
- more completion tokens than the request's `max_tokens`;
- 0 completion tokens while content streamed;
- more content chunks than completion tokens, beyond CHUNK_TOLERANCE and CHUNK_SLACK: every content chunk
  carries at least one token (servers group tokens into chunks, never split one token's text over two), so 48
  chunks counted as 16 tokens, or 16 as 1, cannot be right (issue 47: both were "ok" points, the first with a
  TPOT over 16 tokens where 48 had streamed). Fewer chunks than tokens is normal (multi-token chunks), and
  without the tokenizer the text cannot say how many more; the check is one-sided.
"""
from __future__ import annotations

#: content chunks may exceed the completion tokens by this share of them plus CHUNK_SLACK before the usage is
#: refused (a stated allowance for a server that sends one token's text in two pieces at a stream's edges)
CHUNK_TOLERANCE = 0.05
CHUNK_SLACK = 1


def tokens(usage, name: str):
    """`usage.<name>` as a whole number, or None where it is missing or not a whole number."""
    v = getattr(usage, name, None)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _disagree(counts: list[tuple], chunks_at: list[int]) -> bool:
    """Whether successive reports cannot all be one stream's running count (see the module docstring)."""
    for (p0, c0), (p1, c1), n0, n1 in zip(counts, counts[1:], chunks_at, chunks_at[1:]):
        if p0 != p1 or c0 is None or c1 is None or c1 < c0 or (c1 > c0 and n1 <= n0):
            return True
    return False


def usage_problem(usages: list, max_tokens: int, chunks: int, chunks_at: list[int] | None = None) -> str | None:
    """Why the usage reports of one stream cannot be its token counts (None where they can). `usages`: the
    reports in the order they came; `chunks`: the stream's content chunks; `chunks_at[i]`: the content chunks that
    had arrived when report i came, the one carrying it included (default: all of them, as for reports after the
    content)."""
    counts = [(tokens(u, "prompt_tokens"), tokens(u, "completion_tokens")) for u in usages]
    at = list(chunks_at) if chunks_at is not None else [chunks] * len(usages)
    if len(counts) > 1 and _disagree(counts, at):
        return ("two usage reports of one stream disagree: completion_tokens " + ", then ".join(
            str(c) for _, c in counts[:3]) + "; the server's counts cannot be trusted (reports that count up with "
            "the content, as vLLM's continuous_usage_stats, are read as cumulative)")
    prompt, completion = counts[-1]
    if prompt is None or completion is None or prompt < 0 or completion < 0:
        return (f"usage reports prompt_tokens {getattr(usages[-1], 'prompt_tokens', None)!r} and completion_tokens "
                f"{getattr(usages[-1], 'completion_tokens', None)!r}: expected whole numbers >= 0")
    if completion > max_tokens:
        return (f"usage reports {completion} completion tokens for a request of at most max_tokens = {max_tokens}: "
                "the server's count cannot be right")
    if completion == 0 and chunks:
        return "usage reports 0 completion tokens although content streamed: the server's count cannot be right"
    if chunks > completion * (1 + CHUNK_TOLERANCE) + CHUNK_SLACK:
        return (f"usage reports {completion} completion tokens, but the stream carried {chunks} content chunks, each "
                f"at least one token (allowed: {CHUNK_TOLERANCE:.0%} + {CHUNK_SLACK} more chunks than tokens): the "
                "server's count cannot be right")
    return None
