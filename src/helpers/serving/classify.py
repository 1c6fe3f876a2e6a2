"""Classify one attempt to serve a configuration: launch, smoke test, short decode under concurrency.

Outcomes (the recorded backend matrix uses the same words):
- ok: healthy, the smoke prompt gets the known answer, the concurrent decode finishes without errors;
- nan: non-finite outputs: the sampler's "probability tensor contains either inf, nan or element < 0"
  class of error, a NaN in an error or the log, a device-side assert;
- crash: the process exited (at start-up or under load); the log excerpt is kept;
- startup-timeout: the health URL did not answer within the time limit;
- wrong-answer: the smoke prompt (simple arithmetic) got a reply without the answer;
- unsupported: the engine rejected the configuration (unknown flag or value, "not supported").
"""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.serving import client as cl
from helpers.serving.server import Server, ServerExited, ServerSpec, StartupTimeout

#: the outcome words, from a serving configuration to a failure to start (the recorded backend matrix
#: uses the same words; plotting.outcome_matrix draws them in this order)
OUTCOMES = ("ok", "wrong-answer", "nan", "crash", "unsupported", "startup-timeout")

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

    def as_row(self) -> dict:
        return asdict(self)


def classify_exit(log_text: str) -> str:
    """Outcome of a server that exited: unsupported if it rejected its configuration, nan if its log
    shows non-finite values, crash otherwise."""
    if UNSUPPORTED_PATTERNS.search(log_text):
        return "unsupported"
    if NAN_PATTERNS.search(log_text):
        return "nan"
    return "crash"


def classify_errors(errors: list[str], log_text: str) -> str | None:
    """Outcome implied by request errors (None when there were none)."""
    if not errors:
        return None
    if any(NAN_PATTERNS.search(e) for e in errors) or NAN_PATTERNS.search(log_text):
        return "nan"
    if any(UNSUPPORTED_PATTERNS.search(e) for e in errors) or UNSUPPORTED_PATTERNS.search(log_text):
        return "unsupported"
    return "crash"


def smoke(base_url: str, model: str, test: SmokeTest, timeout_s: float = 60.0) -> tuple[str, str]:
    """Send the smoke prompt (chat, not streamed); return (reply, error)."""
    body = json.dumps({"model": model, "max_tokens": test.max_tokens,
                       "messages": [{"role": "user", "content": test.prompt}]}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            d = json.loads(r.read())
        return d["choices"][0]["message"]["content"] or "", ""
    except urllib.error.HTTPError as e:
        return "", f"HTTP {e.code}: {e.read()[:300].decode('utf-8', 'replace')}"
    except Exception as e:  # noqa: BLE001
        return "", f"{type(e).__name__}: {e}"[:300]


def attempt(name: str, spec: ServerSpec, model: str, log_dir: str | Path, startup_timeout_s: float = 120.0,
            test: SmokeTest = SmokeTest(), decode_concurrency: int = 4, decode_tokens: int = 32,
            request_timeout_s: float = 120.0, backend_line_parser=None) -> Attempt:
    """Launch `spec`, smoke-test it, run a short concurrent decode, stop it, and classify the attempt.

    The server is always stopped (process group gone) before this returns or raises."""
    t0 = time.monotonic()
    log_path = Path(log_dir) / f"{name}.log"
    log_path.unlink(missing_ok=True)
    srv = Server(spec, log_path, startup_timeout_s=startup_timeout_s)
    a = Attempt(name=name, outcome="crash", log_path=str(log_path))
    try:
        srv.start()
        try:
            a.startup_s = srv.wait_healthy()
        except ServerExited as e:
            a.outcome, a.detail = classify_exit(srv.log_text()), f"exited with code {e.returncode} during start-up"
            return a
        except StartupTimeout:
            a.outcome, a.detail = "startup-timeout", f"no healthy answer within {startup_timeout_s:g} s"
            return a
        reply, err = smoke(spec.base_url, model, test, request_timeout_s)
        a.smoke_reply = reply[:200]
        prompts = cl.make_prompts(decode_concurrency, 32, seed=1)
        results, _ = cl.run_sync(cl.run_requests(spec.base_url, model, prompts, decode_tokens, decode_concurrency,
                                             timeout_s=request_timeout_s))
        a.decode_completed = sum(r.ok for r in results)
        a.decode_failed = len(results) - a.decode_completed
        errors = ([err] if err else []) + [r.error for r in results if not r.ok]
        time.sleep(0.2)  # let the log pump catch up with the server's traceback
        log = srv.log_text()
        if not srv.running():
            a.outcome = classify_exit(log) if classify_exit(log) != "unsupported" else "crash"
            a.detail = f"process exited with code {srv.proc.returncode} while serving"
        elif (o := classify_errors(errors, log)) is not None:
            a.outcome, a.detail = o, errors[0][:300]
        elif not test.passes(reply):
            a.outcome, a.detail = "wrong-answer", f"{test.prompt!r} -> {reply[:80]!r} (expected {test.answer})"
        else:
            a.outcome, a.detail = "ok", f"{test.prompt!r} -> {reply[:40]!r}; {a.decode_completed} concurrent decodes"
        return a
    finally:
        srv.stop()
        a.wall_s = time.monotonic() - t0
        a.log_excerpt = srv.log_excerpt(15) if a.outcome != "ok" else ""
        parser = backend_line_parser or (lambda text: [])
        a.backend_lines = parser(srv.log_text())[:5]
