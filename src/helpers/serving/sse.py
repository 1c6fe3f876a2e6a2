"""Server-sent events as they arrive (the load generator's stream reader): the `data:` payload of each event.

    async for data in sse_data(reply.chunks(), seen):   # '{"choices": ...}', ..., '[DONE]'

Lines end in CR LF, LF or CR alone, as the SSE standard allows (issue 47: a stream whose lines ended in CR alone
was read as empty, and blamed on the server sending `[DONE]` first); an event's `data:` lines are joined with a
newline; comments and the other fields are skipped, and the first line that is neither is kept in `seen` (a
body that is not an event stream is named, not read as an empty one). One event, or one line, of more than
MAX_EVENT_BYTES raises EventTooLong: a server sending a line without end is not held in memory until its deadline.
"""
from __future__ import annotations

#: the most bytes one event (its lines together), or a line not yet ended, may hold (a chunk of one token is a few
#: hundred bytes of JSON, with logprobs a few KiB)
MAX_EVENT_BYTES = 1 << 20


class EventTooLong(ValueError):
    """An event of the stream, or a line of it, passed MAX_EVENT_BYTES."""

    kind = "too-large"


async def sse_data(chunks, seen: dict | None = None):
    """The `data:` payloads of a server-sent event stream (the body's bytes as they arrive), one per event;
    comments (`: keep-alive`) and the other fields are skipped. Lines end in CR LF, LF or CR alone (the SSE
    standard allows each; issue 47: a stream with CR-only ends read as empty). With `seen`, the first line that is
    neither a field nor a comment is kept there (`seen["other"]`: a body that is not an event stream)."""
    buf, data, after_cr = b"", [], False
    async for piece in chunks:
        if after_cr and piece[:1] == b"\n":   # the LF of a CR LF split between two pieces
            piece = piece[1:]
        if not piece:
            continue
        buf += piece
        lines = buf.splitlines(keepends=True)
        buf = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        after_cr = not buf and bool(lines) and lines[-1].endswith(b"\r")
        if len(buf) + sum(map(len, data)) > MAX_EVENT_BYTES:
            raise EventTooLong(f"an event of the stream passed {MAX_EVENT_BYTES} bytes without its end (a line or "
                               "an event without end): not an event stream this client reads")
        for line in lines:
            event = _sse_line(line.rstrip(b"\r\n"), data, seen)
            if event is not None:
                yield event
    if buf:
        event = _sse_line(buf, data, seen)
        if event is not None:
            yield event
    if data:
        yield b"\n".join(data).decode("utf-8", "replace")


def _sse_line(line: bytes, data: list, seen: dict | None) -> str | None:
    """Take one line of an event stream: an empty line ends an event (returned where it had data)."""
    if not line:
        if data:
            event = b"\n".join(data).decode("utf-8", "replace")
            data.clear()
            return event
        return None
    if line.startswith(b"data:"):
        data.append(line[6:] if line[5:6] == b" " else line[5:])   # one space after the colon is not data
    elif seen is not None and "other" not in seen and not line.startswith(_SSE_FIELDS):
        seen["other"] = line[:160].decode("utf-8", "replace")
    return None


#: what else a line of an event stream may start with: a comment or one of the standard's other fields
_SSE_FIELDS = (b":", b"event", b"id", b"retry")
