"""Which Python environment executes the book, and why.

`make` (through scripts/book-env.sh) chooses one of three before it installs anything, by asking the
Python it was told to use (`PY`, default python3) with `python -m helpers.book.environment choose`:

- ``host``: PY has a CUDA build of torch and an NVIDIA driver answers. The book's environment is a venv
  over PY's own packages (`--system-site-packages`, and a .pth naming PY's site directories, so that a PY
  which is itself a venv counts too): torch, NCCL and sglang are the host's; nothing replaces them.
- ``isolated-gpu``: a driver answers but PY has no CUDA torch: a fresh venv, torch from the registry
  within pyproject.toml's range (a CUDA build).
- ``isolated-cpu``: no driver answers: a fresh venv with the CPU pin of constraints/cpu.txt.

`ENV_KIND=host` or `ENV_KIND=isolated` overrides the choice. The choice, its reason and PY are written to
`<venv>/book-env.json`; `record()` reads that back together with what the running Python really
imports (torch, NCCL, sglang and where each lives) for the run manifest, and `lines()` shows it on the
status page. This module needs only the standard library: it runs under PY before anything is installed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shlex
import site
import sys
from importlib import metadata
from pathlib import Path

KINDS = ("host", "isolated-gpu", "isolated-cpu")
RECORD_FILE = "book-env.json"
CONSTRAINTS = Path("constraints") / "cpu.txt"


# ----------------------------------------------------------------------------- facts
def torch_facts(path: list[str] | None = None) -> dict:
    """torch in this Python (on `path`, default sys.path), read without importing it: version, the CUDA it
    was built for (None for a CPU build), and where it lives. {"installed": False} where there is none."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("torch", path)  # the files, whether or not torch is imported already
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False}
    pkg = Path(list(spec.submodule_search_locations)[0])
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = None
    cuda = None
    vfile = pkg / "version.py"
    if vfile.exists():
        text = vfile.read_text(errors="replace")
        version = version or _first(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text)
        cuda = _first(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text)
    return {"installed": True, "version": version, "cuda": cuda, "location": str(pkg.parent)}


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.M)
    return m.group(1) if m else None


def driver_facts() -> dict:
    """The NVIDIA driver as NVML reports it (through ctypes, as nvidia-ml-py does; no CUDA context):
    {"driver": "580.159.04", "gpus": 1}, or {"driver": None, "why": ...} where none answers."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return {"driver": None, "why": f"no NVIDIA driver library ({exc})"}
    try:
        rc = nvml.nvmlInit_v2()
        if rc != 0:
            return {"driver": None, "why": f"the NVIDIA driver did not initialise (nvmlInit returned {rc})"}
        buf = ctypes.create_string_buffer(96)
        nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96))
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        nvml.nvmlShutdown()
        return {"driver": buf.value.decode() or "unknown", "gpus": int(count.value)}
    except (AttributeError, OSError) as exc:
        return {"driver": None, "why": f"NVML could not be read ({exc})"}


def cpu_pin(root: Path | None = None) -> str:
    """The CPU torch pin the isolated-cpu environment gets (from constraints/cpu.txt)."""
    path = (root or Path(__file__).resolve().parents[3]) / CONSTRAINTS
    try:
        for line in path.read_text().splitlines():
            if re.match(r"\s*torch\s*==", line):
                return line.split("#")[0].strip()
    except OSError:
        pass
    return "torch (CPU build)"


# ----------------------------------------------------------------------------- the choice
class ChoiceError(ValueError):
    """ENV_KIND asks for an environment the given Python cannot provide."""


def choose(want: str, torch: dict, driver: dict, python: str = "PY", pin: str = "torch==2.13.0") -> tuple[str, str]:
    """(kind, reason): which environment the book gets. `want`: "auto", "host" or "isolated"."""
    t = (f"torch {torch.get('version')} built for CUDA {torch['cuda']}" if torch.get("cuda")
         else f"torch {torch.get('version')} (a CPU build)" if torch.get("installed") else "no torch")
    d = (f"the NVIDIA driver {driver['driver']} answers ({driver.get('gpus', '?')} GPU(s))" if driver.get("driver")
         else driver.get("why") or "no NVIDIA driver answers")
    if want == "host":
        if not torch.get("installed"):
            raise ChoiceError(f"ENV_KIND=host: {python} has no torch to use; install torch there, name another "
                              f"Python with PY=..., or leave ENV_KIND unset")
        return "host", (f"asked for (ENV_KIND=host): {python} has {t}; {d}. The book uses {python}'s own "
                        "packages (torch, NCCL, sglang where installed) and installs only what is missing")
    if want not in ("auto", "isolated"):
        raise ChoiceError(f"ENV_KIND={want!r}: expected auto, host or isolated")
    if want == "auto" and torch.get("cuda") and driver.get("driver"):
        return "host", (f"{python} has {t} and {d}: the book uses {python}'s own torch, NCCL and sglang (where "
                        "installed) instead of installing another; only what is missing is installed")
    why = "asked for (ENV_KIND=isolated)" if want == "isolated" else f"{python} has {t}"
    if driver.get("driver"):
        return "isolated-gpu", (f"{why}, and {d}: a fresh venv takes torch from the registry within "
                                "pyproject.toml's range (a CUDA build), with no CPU pin")
    return "isolated-cpu", (f"{why}, and {d}: a fresh venv with the CPU build pinned ({pin}, "
                            "constraints/cpu.txt)")


def site_dirs() -> list[str]:
    """This Python's site directories (what a venv over it must see): its site-packages, those of the
    installation it is a venv of where it includes them, and the user site where that is enabled."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def host_pth(dirs: list[str]) -> str:
    """The .pth line that adds `dirs` to a venv with their own .pth files honoured (editable installs)."""
    # one line, run by site.addpackage inside a function: no comprehension (its scope cannot see `site`)
    return "import site; list(map(site.addsitedir, %r))\n" % (list(dirs),)


# ----------------------------------------------------------------------------- the record
def _where(dist: str, prefix: str) -> dict | None:
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    loc = str(Path(d.locate_file("")).resolve())
    inside = loc.startswith(str(Path(prefix).resolve()) + os.sep)
    return {"version": d.version, "location": loc,
            "from": "this environment" if inside else "outside this environment (the host's Python)"}


def record(prefix: str | None = None) -> dict:
    """Which environment this Python is and why, for the run manifest: the choice `make` wrote
    (<prefix>/book-env.json) where there is one, and what this Python really imports."""
    prefix = prefix or sys.prefix
    chosen: dict = {}
    path = Path(prefix) / RECORD_FILE
    if path.exists():
        try:
            chosen = json.loads(path.read_text())
        except ValueError:
            chosen = {}
    out = {
        "kind": chosen.get("kind") or "as found",
        "reason": chosen.get("reason") or (
            f"not made by `make`: the runbook ran in {sys.executable} as it was (nothing was chosen or "
            "installed for it), with whatever that Python imports"),
        "made_by": chosen.get("made_by"),
        "base_python": chosen.get("python"),
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "prefix": prefix,
        "venv": sys.prefix != sys.base_prefix,
        "pythonpath": os.environ.get("PYTHONPATH") or None,
    }
    t = torch_facts()
    tw = _where("torch", prefix) or {}
    out["torch"] = ({"version": t.get("version"), "cuda": t.get("cuda"), "location": t.get("location"),
                     "from": tw.get("from", "outside this environment (on PYTHONPATH)")}
                    if t.get("installed") else None)
    nccl = next((w for w in (_where(n, prefix) for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"))
                 if w), None)
    out["nccl"] = nccl
    out["sglang"] = _where("sglang", prefix)
    out["flashinfer"] = _where("flashinfer-python", prefix)
    out["driver"] = driver_facts()
    return out


def sentence(rec: dict | None = None) -> str:
    """One sentence for a page: which environment ran the book, and why."""
    rec = rec or record()
    t = rec.get("torch") or {}
    torch_s = (f"torch {t.get('version')}" + (f" (CUDA {t['cuda']})" if t.get("cuda") else " (CPU build)")
               + f" from {t.get('from')}") if t else "no torch"
    sg = rec.get("sglang")
    sg_s = f"sglang {sg['version']} from {sg['from']}" if sg else "no sglang"
    return (f"Executed in the {rec.get('kind')} environment ({rec.get('python')}, {torch_s}; {sg_s}): "
            f"{str(rec.get('reason', '')).rstrip('.')}.")


def lines(manifest) -> list[str]:
    """The status page's environment section (Markdown lines) of a run's helpers.book.manifest.Manifest."""
    rec = manifest.environment
    out = ["", "## Environment", ""]
    if not rec:
        return out + ["Not recorded: this run predates environment records (its software versions are above).", ""]

    def row(*cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    def pkg(p):
        return "not installed" if not p else f"{p.get('version')} ({p.get('from')}: `{p.get('location')}`)"

    t = rec.get("torch")
    drv = rec.get("driver") or {}
    out += ["Which Python executed this run, and why: `make` chose it before installing anything "
            "(see the page on re-running); a run made without `make` says so.", "",
            row("item", "value"), row("---", "---"),
            row("environment", f"`{rec.get('kind')}`"), row("why", rec.get("reason")),
            row("made by", rec.get("made_by") or "not by make (run as found)"),
            row("python", f"`{rec.get('python')}` ({rec.get('python_version')})")]
    if rec.get("base_python"):
        out.append(row("made from (PY)", f"`{rec['base_python']}`"))
    if rec.get("pythonpath"):
        out.append(row("PYTHONPATH", f"`{rec['pythonpath']}`"))
    out += [row("torch", "not installed" if not t else
                f"{t.get('version')}, {'CUDA ' + str(t['cuda']) if t.get('cuda') else 'CPU build'} "
                f"({t.get('from')}: `{t.get('location')}`)"),
            row("NCCL (pip)", pkg(rec.get("nccl"))), row("sglang", pkg(rec.get("sglang"))),
            row("flashinfer", pkg(rec.get("flashinfer"))),
            row("NVIDIA driver", f"{drv['driver']} ({drv.get('gpus')} GPU(s))" if drv.get("driver")
                else drv.get("why", "none"))]
    return out + [""]


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.book.environment", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("choose", help="print the choice for this Python as shell assignments")
    c.add_argument("--want", default="auto", help="auto (default), host or isolated")
    c.add_argument("--name", default=None, help="how to call this Python in the reason (default: its path)")
    sub.add_parser("site-dirs", help="print the .pth line that shows this Python's packages to a venv")
    sub.add_parser("show", help="print the record of this Python's environment as JSON")
    args = p.parse_args(argv)
    if args.cmd == "choose":
        name = args.name or sys.executable
        torch, driver = torch_facts(), driver_facts()
        try:
            kind, reason = choose(args.want, torch, driver, python=name, pin=cpu_pin())
        except ChoiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        rec = {"kind": kind, "reason": reason, "python": sys.executable, "torch": torch, "driver": driver,
               "made_by": "make (scripts/book-env.sh)"}
        for k, v in (("BOOK_ENV_KIND", kind), ("BOOK_ENV_REASON", reason), ("BOOK_ENV_JSON", json.dumps(rec)),
                     ("BOOK_ENV_TORCH", torch.get("version") or "")):
            print(f"{k}={shlex.quote(v)}")
        return 0
    if args.cmd == "site-dirs":
        sys.stdout.write(host_pth(site_dirs()))
        return 0
    print(json.dumps(record(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
