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
    buf, data, size, after_cr = b"", [], 0, False
    async for piece in chunks:
        if after_cr or b"\r" in piece:   # CR LF and a lone CR become LF (a CR ending a piece may have its LF next)
            if after_cr and piece[:1] == b"\n":
                piece = piece[1:]
            after_cr = piece[-1:] == b"\r"
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf += piece
        while True:
            line, sep, rest = buf.partition(b"\n")
            if not sep:
                break
            buf = rest
            if not line:
                if data:
                    yield b"\n".join(data).decode("utf-8", "replace")
                    data, size = [], 0
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])   # one space after the colon is not data
                size += len(line)
            elif seen is not None and "other" not in seen and not line.startswith(_SSE_FIELDS):
                seen["other"] = line[:160].decode("utf-8", "replace")
        if len(buf) + size > MAX_EVENT_BYTES:
            raise EventTooLong(f"an event of the stream passed {MAX_EVENT_BYTES} bytes without its end (a line or "
                               "an event without end): not an event stream this client reads")
    if buf.startswith(b"data:"):
        data.append(buf[6:] if buf[5:6] == b" " else buf[5:])
    if data:
        yield b"\n".join(data).decode("utf-8", "replace")


#: what else a line of an event stream may start with: a comment or one of the standard's other fields
_SSE_FIELDS = (b":", b"event", b"id", b"retry")
