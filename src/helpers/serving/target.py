"""What a load study measured, said on the page: the engine, the model and the hardware, and how each is known
(asked from the server, given by the reader, launched here, or unknown).

A given server is asked where it says: vLLM answers `/version`, sglang `/get_server_info` (its version and
TP size), every OpenAI-compatible server `/v1/models` (the model and, often, `owned_by`: the engine's name).
Hardware is never asked (no server says it): the reader gives it (`served_hardware`) or it is unknown.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ServerChoice
from .fetch import Deadlines, fetch

#: how long one question to the server may take (s)
ASK_S = 3.0


@dataclass(frozen=True)
class Target:
    what: str           # one phrase: what the study's figures are of
    engine: str
    model: str
    hardware: str
    how: str            # how engine and hardware are known
    real: bool          # a real serving engine (not the stand-in, not a tiny random-weight model)

    @classmethod
    def unknown(cls) -> "Target":
        return cls("nothing (the study did not start)", "unknown", "unknown", "unknown", "unknown", False)

    @classmethod
    def standin(cls, check: dict) -> "Target":
        return cls(f"the stand-in server (a few lines of Python streaming a token every "
                   f"{check['interval_s'] * 1e3:g} ms after a first chunk at {check['ttft_s'] * 1e3:g} ms, both "
                   f"{check['past_knee']:g} times longer for a request arriving past {check['knee']} in flight)", "the stand-in (no model)", "none",
                   "this machine's CPU", "built here with a known knee", False)


def _ask(url: str, path: str) -> dict:
    try:
        r = fetch(url.rstrip("/") + path, deadlines=Deadlines(ASK_S, ASK_S, ASK_S))
        return r.json() if r.status == 200 else {}
    except Exception:  # noqa: BLE001 - a server that does not answer this question says nothing
        return {}


def ask_engine(url: str) -> str:
    """The engine and version a server says it runs ('' where it says nothing)."""
    v = _ask(url, "/version")
    if isinstance(v, dict) and v.get("version"):
        return f"vLLM {v['version']}"
    s = _ask(url, "/get_server_info")
    if isinstance(s, dict) and s.get("version"):
        tp = f" TP{s['tp_size']}" if s.get("tp_size") else ""
        return f"sglang {s['version']}{tp}"
    m = _ask(url, "/v1/models")
    data = m.get("data") if isinstance(m, dict) else None
    owner = data[0].get("owned_by") if data and isinstance(data[0], dict) else None
    return f"a server whose /v1/models says owned_by {owner!r}" if owner else ""


def describe_given(server: ServerChoice, model: str) -> Target:
    asked = ask_engine(server.url)
    engine = server.served_engine or asked or "unknown (the server does not say; give served_engine)"
    how = "given by the reader" if server.served_engine else "asked from the server" if asked else "unknown"
    hw = server.served_hardware or "unknown (not given; give served_hardware)"
    how += "; hardware " + ("given by the reader" if server.served_hardware else "unknown")
    return Target(f"the server at {server.url} ({engine}, model {model}, hardware: {hw})", engine, model, hw, how,
                  True)


def describe_launched(server: ServerChoice, what: str) -> Target:
    if server.engine == "sglang":
        return Target(f"sglang launched here (model {what}, TP{server.tp_size})", "sglang", what,
                      f"this machine ({server.device})", "launched here", True)
    return Target(f"transformers serve launched here on {server.device} with {what}", "transformers serve", what,
                  f"this machine ({server.device})", "launched here", False)
