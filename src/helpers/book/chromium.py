"""Headless Chromium driven over its DevTools protocol through a pipe (`--remote-debugging-pipe`): no
webdriver, no browser download; the network is off (every host name resolves nowhere, the proxy is a closed
port). Used by the browser check (helpers.book.browser) and its screenshots (helpers.book.shots).

Navigation is robust to redirects: `Chromium.goto` follows a page's meta refresh (the site's index.html)
to the page it leads to, and `Chromium.evaluate` runs an expression again on the next page where the page
navigated away while it ran (Chromium's "Inspected target navigated or closed", which once crashed the
first check after an install).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from helpers.book import pagecheck as pc

WIDTH, HEIGHT = pc.DESKTOP
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "chrome",
              "chromium-headless-shell")
INSTALL_HINT = ("headless Chromium was not found: `make browser` installs Debian's package "
                "(apt-get install -y chromium), or set CHROMIUM=/path/to/chromium")


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env if (Path(env).exists() or shutil.which(env)) else None
    for c in CANDIDATES:
        p = c if c.startswith("/") and Path(c).exists() else shutil.which(c) if not c.startswith("/") else None
        if p:
            return p
    return None


class CDPError(RuntimeError):
    pass


def navigated(exc: Exception) -> bool:
    """Whether a failed command failed because the page navigated away (a redirect) while it ran."""
    return bool(re.search(r"navigated or closed|Cannot find context|context was destroyed|"
                          r"Execution context|No frame", str(exc), re.I))


#: the delay in seconds of the page's meta refresh (a redirect), or null where it has none
_REFRESH = r"""(() => { const m = document.querySelector('meta[http-equiv="refresh" i]');
  if (!m) return null; const d = parseFloat((m.getAttribute('content') || '').split(';')[0]);
  return isNaN(d) ? 0 : d; })()"""


class Chromium:
    """A headless Chromium driven over --remote-debugging-pipe (fd 3: commands in, fd 4: replies out)."""

    def __init__(self, executable: str, width: int = WIDTH, height: int = HEIGHT):
        self.profile = tempfile.mkdtemp(prefix="book-browser-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(res_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(res_w)

        def child():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                # the network is off: nothing resolves, and the proxy is a closed local port
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", "about:blank"]
        self.proc = subprocess.Popen(args, preexec_fn=child, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(hi_r)
        os.close(hi_w)
        self._id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr_tail: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.session = None

    def _drain_stderr(self):
        for line in iter(self.proc.stderr.readline, b""):
            self._stderr_tail = (self._stderr_tail + [line.decode(errors="replace")])[-20:]

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._res_r, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                data = json.loads(msg)
                with self._cond:
                    if "id" in data:
                        self._replies[data["id"]] = data
                    else:
                        self.events.append(data)
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = "default",
             timeout: float = 60) -> dict:
        with self._lock:
            self._id += 1
            mid = self._id
        msg = {"id": mid, "method": method, "params": params or {}}
        sid = self.session if session == "default" else session
        if sid:
            msg["sessionId"] = sid
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or getattr(self, "_closed", False):
                    raise CDPError(f"{method}: no reply from Chromium within {timeout:.0f} s"
                                   f" (its stderr ends: {''.join(self._stderr_tail)[-800:]})")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, since: int, timeout: float = 30) -> dict | None:
        i = self.wait_index(method, since, timeout)
        return None if i is None else self.events[i]

    def wait_index(self, method: str, since: int, timeout: float = 30) -> int | None:
        """The index in `events` of the first `method` event from `since` on, waiting up to `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(since, len(self.events)):
                    if self.events[i].get("method") == method:
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def open_tab(self, width: int = WIDTH, height: int = HEIGHT, mobile: bool = False) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=None)["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.send(m)
        self.set_size(width, height, mobile)

    def set_size(self, width: int, height: int, mobile: bool = False) -> None:
        """The window's size; `mobile` emulates a phone (its viewport and scroll bars), at scale 1."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def evaluate(self, expression: str, timeout: float = 30, retries: int = 3):
        """`expression`'s value in the page. Where the page navigated meanwhile (a redirect: the context the
        expression ran in is gone), wait for the next page to load and run it there, up to `retries` times."""
        for attempt in range(retries + 1):
            since = len(self.events)
            try:
                r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                   "returnByValue": True}, timeout=timeout)
            except CDPError as exc:
                if attempt == retries or not navigated(exc):
                    raise
                self.wait_index("Page.loadEventFired", since, timeout=30)
                continue
            if "exceptionDetails" in r:
                raise CDPError(f"evaluate failed: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
            return r["result"].get("value")

    def goto(self, url: str, timeout: float = 30) -> bool:
        """Open `url` and wait for it to load; where it redirects at once (a meta refresh of a few seconds
        at most, like the site's index.html), wait for the page it leads to as well. False: it did not
        load within `timeout` s."""
        since = len(self.events)
        self.send("Page.navigate", {"url": url})
        loaded = self.wait_index("Page.loadEventFired", since, timeout)
        for _ in range(3):
            if loaded is None:
                return False
            delay = self.evaluate(_REFRESH)
            if delay is None or delay > 5:
                return True
            loaded = self.wait_index("Page.loadEventFired", loaded + 1, timeout + delay)
        return loaded is not None

    def close(self):
        try:
            self.send("Browser.close", session=None, timeout=5)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


SETTLE = """(async () => {
  const images = [...document.images].map(i => i.complete ? null :
      new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); }));
  await Promise.race([Promise.all(images), new Promise(r => setTimeout(r, 10000))]);
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await Promise.race([MathJax.startup.promise, new Promise(r => setTimeout(r, 15000))]);
  }
  if (document.fonts) { await document.fonts.ready; }
  return true;
})()"""
