"""Classify one attempt to serve a configuration: launch, smoke test, short decode under concurrency.

Outcomes (the recorded backend matrix uses the same words):
- ok: healthy, the smoke prompt gets the known answer, the concurrent decode finishes without errors;
- nan: non-finite outputs: the sampler's "probability tensor contains either inf, nan or element < 0"
  class of error (in an HTTP error, in an error object inside an HTTP 200 reply, or in the log), a NaN
  in an error or the log, a device-side assert;
- crash: the process exited (at start-up or under load), also when the memory cap ended it; the log
  excerpt is kept;
- startup-timeout: the health URL did not answer within the time limit;
- hang: the server is up (its process runs) but a request did not finish within the request time limit
  (connect, first byte or the whole reply);
- error: the server is up but answers with errors (HTTP errors, malformed replies) that are neither NaN
  nor a rejected configuration;
- wrong-answer: well-formed replies that are wrong: the smoke prompt (simple arithmetic) got a reply
  without the answer, or a reply with empty content;
- unsupported: the engine rejected the configuration (unknown flag or value, "not supported").

The request phase (smoke test and decode) runs within one time limit, `request_timeout_s`: the smoke
request gets all of it, the decode what is left. Every attempt keeps its evidence: what the server sent
(`evidence`: an error body or the start of a reply), how long the request phase took (`request_s`), the
log tail, and the server's peak memory under its cap (`memory`).
"""
from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.serving import client as cl
from helpers.serving.fetch import Deadlines, ReplyError, RequestTimeout, fetch
from helpers.serving.server import Server, ServerExited, ServerSpec, StartupTimeout

#: the outcome words, from a serving configuration to a failure to start (the recorded backend matrix
#: uses the same words; plotting.outcome_matrix draws them in this order)
OUTCOMES = ("ok", "wrong-answer", "nan", "crash", "hang", "error", "unsupported", "startup-timeout")

NAN_PATTERNS = re.compile(
    r"probability tensor contains either|\bnan\b.*(logit|prob|output|tensor)|device-side assert|"
    r"non-finite|contains (?:inf|nan)|\binf\b.*\bnan\b", re.I)
UNSUPPORTED_PATTERNS = re.compile(
    r"unrecognized arguments|no such option|invalid choice|is not supported|not supported on|"
    r"unsupported (?:attention|option|configuration|backend|implementation)|only supported on|"
    r"is not a valid (?:choice|experts implementation|attention)|"
    r"\brequires (?:bfloat16|the `?kernels`? package|a GPU|CUDA|sm_?\d+)", re.I)


@dataclass(frozen=True)
class SmokeTest:
    prompt: str = "What is 3+5?"
    answer: str = "8"
    max_tokens: int = 8

    def passes(self, reply: str) -> bool:
        """The answer appears as a whole number in the reply (not inside a longer number)."""
        return re.search(rf"(?<![\d.]){re.escape(self.answer)}(?![\d])", reply or "") is not None


@dataclass
class Attempt:
    name: str
    outcome: str
    detail: str = ""
    startup_s: float | None = None
    wall_s: float = 0.0
    smoke_reply: str = ""
    decode_completed: int = 0
    decode_failed: int = 0
    log_excerpt: str = ""
    backend_lines: list[str] = field(default_factory=list)
    log_path: str = ""
    evidence: str = ""                 # what the server sent: an error body, the start of a reply
    request_s: float | None = None     # how long the request phase (smoke + decode) took
    memory: str = ""                   # the server's peak resident memory and the cap it ran under
    peak_rss_mib: float | None = None
    memory_cap_mib: float | None = None

    def as_row(self) -> dict:
        return asdict(self)


@dataclass
class SmokeReply:
    reply: str = ""
    error: str = ""
    kind: str = ""          # "" (a reply), timeout, connect, http, error-body, bad-body, empty, protocol, too-large,
    #                         truncated (fetch.ReplyError)
    body: str = ""          # the start of what the server sent
    elapsed_s: float = 0.0


def classify_exit(log_text: str) -> str:
    """Outcome of a server that exited: unsupported if it rejected its configuration, nan if its log
    shows non-finite values, crash otherwise."""
    if UNSUPPORTED_PATTERNS.search(log_text):
        return "unsupported"
    if NAN_PATTERNS.search(log_text):
        return "nan"
    return "crash"


def classify_errors(errors: list[str], log_text: str, timed_out: bool = False) -> str | None:
    """Outcome implied by request errors of a server that is still up (None when there were none):
    nan, unsupported, hang (a request ran out of time), else error."""
    if not errors:
        return None
    if any(NAN_PATTERNS.search(e) for e in errors) or NAN_PATTERNS.search(log_text):
        return "nan"
    if any(UNSUPPORTED_PATTERNS.search(e) for e in errors) or UNSUPPORTED_PATTERNS.search(log_text):
        return "unsupported"
    return "hang" if timed_out else "error"


def smoke_test(base_url: str, model: str, test: "SmokeTest", deadlines: Deadlines) -> SmokeReply:
    """Send the smoke prompt (chat, not streamed) within `deadlines`; say what came back."""
    body = {"model": model, "max_tokens": test.max_tokens, "messages": [{"role": "user", "content": test.prompt}]}
    t0 = time.monotonic()
    try:
        r = fetch(base_url.rstrip("/") + "/v1/chat/completions", "POST", body, deadlines)
    except RequestTimeout as e:
        return SmokeReply(error=str(e), kind="timeout", body=e.received[:300].decode("utf-8", "replace"),
                          elapsed_s=e.elapsed_s)
    except ReplyError as e:   # not HTTP/1.1, past a limit, or cut short: named with what arrived (issue 47)
        return SmokeReply(error=str(e)[:300], kind=e.kind, elapsed_s=time.monotonic() - t0)
    except (OSError, ValueError) as e:
        return SmokeReply(error=f"{type(e).__name__}: {e}"[:300], kind="connect", elapsed_s=time.monotonic() - t0)
    content, kind, error = cl.parse_reply(r.status, r.text, chat=True)   # the one reader of whole replies
    return SmokeReply(reply=content, error=error, kind=kind, body=r.text[:300], elapsed_s=r.elapsed_s)


def smoke(base_url: str, model: str, test: "SmokeTest", timeout_s: float = 60.0) -> tuple[str, str]:
    """Send the smoke prompt within `timeout_s` in all; return (reply, error)."""
    r = smoke_test(base_url, model, test, Deadlines.from_timeout(timeout_s))
    return r.reply, r.error


def attempt(name: str, spec: ServerSpec, model: str, log_dir: str | Path, startup_timeout_s: float = 120.0,
            test: SmokeTest = SmokeTest(), decode_concurrency: int = 4, decode_tokens: int = 32,
            request_timeout_s: float = 120.0, backend_line_parser=None) -> Attempt:
    """Launch `spec`, smoke-test it, run a short concurrent decode, stop it, and classify the attempt.

    The request phase (smoke and decode together) ends within `request_timeout_s`. The server is always
    stopped (its whole process tree gone) before this returns or raises."""
    t0 = time.monotonic()
    log_path = Path(log_dir) / f"{name}.log"
    log_path.unlink(missing_ok=True)
    srv = Server(spec, log_path, startup_timeout_s=startup_timeout_s)
    a = Attempt(name=name, outcome="crash", log_path=str(log_path), memory_cap_mib=spec.memory_mb)
    try:
        srv.start()
        try:
            a.startup_s = srv.wait_healthy()
        except ServerExited as e:
            a.outcome, a.detail = classify_exit(srv.log_text()), f"exited with code {e.returncode} during start-up"
            return a
        except StartupTimeout as e:   # its own words: "answered, but after N s ... raise health_timeout_s" included
            said = str(e).split("\n--- last lines", 1)[0]
            a.outcome, a.detail = "startup-timeout", f"no healthy answer within {startup_timeout_s:g} s: {said}"[:600]
            return a
        phase = Deadlines.from_timeout(request_timeout_s)
        t_req = time.monotonic()
        sm = smoke_test(spec.base_url, model, test, phase)
        a.smoke_reply = sm.reply[:200]
        a.evidence = (sm.body or sm.error)[:300]
        results = []
        left = request_timeout_s - (time.monotonic() - t_req)
        if sm.kind != "timeout" and left > 0.05 and srv.running():
            prompts = cl.make_prompts(decode_concurrency, 32, seed=1)
            results, _ = cl.run_sync(cl.run_requests(spec.base_url, model, prompts, decode_tokens, decode_concurrency,
                                                 deadlines=phase.within(left), until=t_req + request_timeout_s))
        a.request_s = round(time.monotonic() - t_req, 2)
        a.decode_completed = sum(r.ok for r in results)
        a.decode_failed = len(results) - a.decode_completed
        failed = [r for r in results if not r.ok and r.error_kind != "empty"]
        empty = [r for r in results if r.error_kind == "empty"]
        errors = ([sm.error] if sm.error else []) + [r.error for r in failed]
        timed_out = sm.kind == "timeout" or any(r.error_kind in ("timeout", "not-run") for r in failed)
        if not a.evidence and failed:
            a.evidence = failed[0].error[:300]
        time.sleep(0.2)  # let the log pump catch up with the server's traceback
        log = srv.log_text()
        if not srv.running():
            a.outcome = classify_exit(log) if classify_exit(log) != "unsupported" else "crash"
            a.detail = f"process exited with code {srv.proc.returncode} while serving"
        elif (o := classify_errors(errors, log, timed_out)) is not None:
            a.outcome = o
            if o == "hang":
                n_to = sum(r.error_kind in ("timeout", "not-run") for r in failed)
                a.detail = (f"up but no complete reply within {request_timeout_s:g} s: "
                            + (f"smoke request cut off after {sm.elapsed_s:.1f} s" if sm.kind == "timeout"
                               else f"{n_to} of {len(results)} decode requests cut off")
                            + f" ({errors[0][:160]})")
            else:
                a.detail = errors[0][:300]
        elif sm.kind == "empty" or empty:
            a.outcome = "wrong-answer"
            a.detail = ("empty reply to the smoke prompt" if sm.kind == "empty" else
                        f"{len(empty)} of {len(results)} decode replies were empty") + " (well-formed, no content)"
        elif not test.passes(sm.reply):
            a.outcome, a.detail = "wrong-answer", f"{test.prompt!r} -> {sm.reply[:80]!r} (expected {test.answer})"
        else:
            a.outcome, a.detail = "ok", f"{test.prompt!r} -> {sm.reply[:40]!r}; {a.decode_completed} concurrent decodes"
        return a
    finally:
        srv.stop()
        a.wall_s = time.monotonic() - t0
        a.log_excerpt = srv.log_excerpt(15) if a.outcome != "ok" else ""
        parser = backend_line_parser or (lambda text: [])
        a.backend_lines = parser(srv.log_text())[:5]
        a.peak_rss_mib = srv.peak_rss_mib()
        a.memory = srv.memory_note
        if (srv.report or {}).get("reason") == "memory":
            a.outcome = "crash"
            a.detail = f"killed by its memory cap of {spec.memory_mb:g} MiB ({a.memory}); " + a.detail
