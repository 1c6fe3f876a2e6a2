"""The pages a run's status makes (helpers.book.staging lays them into the staged book): the status page
(`status_page`: what ran, from which commit, on what, how long each chapter took, with what parameters;
its summary first and the long parts folded) and the page standing in for a chapter that did not finish
(`problem_page`)."""
from __future__ import annotations

import json
import re

from helpers.book import environment, gputier
from helpers.book.manifest import STATUSES, Manifest, commit_provenance


def _fence(text: str) -> str:
    return "````text\n" + text.replace("````", "'''") + "\n````"


def problem_page(title: str, rec: dict, manifest: Manifest) -> str:
    err = rec.get("error") or {}
    if rec["status"] == "skipped":
        head = f"This chapter was **skipped** in run `{manifest.run_id}` ({err.get('evalue', '')})."
    elif rec["status"] in ("pending", "running", "interrupted"):
        said = {"pending": "**did not run**: the run ended before it started",
                "running": "**did not finish**: the run was stopped while it ran (its process was killed)",
                "interrupted": "**was interrupted** while it ran"}[rec["status"]]
        head = (f"This chapter {said} in run `{manifest.run_id}` (target `{manifest.target}`). "
                f"Continue the run with `python -m helpers.book.runbook --resume runs/{manifest.run_id}`: "
                f"finished chapters are kept and this one resumes from the points it had measured.")
    else:
        where = f" in cell {err['cell_index']}" if err.get("cell_index") is not None else ""
        head = (f"This chapter **failed**{where} in run `{manifest.run_id}` "
                f"(target `{manifest.target}`) after {rec['duration_s']:.1f} s. The other chapters "
                f"still ran; the executed notebook with the error is kept in the run folder as "
                f"`notebooks/{rec['stem']}.ipynb`.")
    body = [f"# {title}", "", head, ""]
    if err and rec["status"] not in ("skipped", "pending"):
        body += [f"**{err.get('ename', 'Error')}**: ", "", _fence(str(err.get("evalue", ""))), ""]
        if err.get("traceback"):
            tb = re.sub(r"\x1b\[[0-9;]*m", "", err["traceback"])
            body += ["Traceback (end):", "", _fence(tb[-3000:]), ""]
    body += ["See the [status page](../appendix/status.md) for the whole run."]
    return "\n".join(body) + "\n"


def _status_value(v) -> str:
    """A manifest value as a reader reads it: a list as its items, a mapping as key: value pairs."""
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "none"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {x}" for k, x in v.items()) or "none"
    return str(v)


def _fold(title: str, lines: list[str]) -> list[str]:
    """Markdown lines inside a closed dropdown whose visible line is `title`."""
    return ["", f":::{{dropdown}} {title}", *lines, ":::", ""]


def _presented_by(rp: dict) -> str:
    """The status page's line on who presented the run: the commit that measured it, or a later replay."""
    if not rp:
        return "the commit it was made from (executed and presented in one run)"
    modes = ", ".join(f"{s} ({mode})" for s, mode in (rp.get("modes") or {}).items())
    return (f"`{rp.get('book_commit')}` ({'clean' if rp.get('clean') else 'not clean'}), replayed "
            f"{str(rp.get('started'))[:16].replace('T', ' ')} UTC with `--replay`, measuring nothing; chapters: "
            f"{', '.join(rp.get('chapters') or [])}; modes: {modes or 'as recorded'}"
            + (f"; kept as measured (no replay mode): {', '.join(rp['kept'])}" if rp.get("kept") else ""))


def status_page(manifest: Manifest, titles: dict[str, str]) -> str:
    """The appendix status page, generated from a run's manifest: what ran where and how it ended first,
    the chapters, then the run's details, hardware, software, environment and parameters folded."""
    def row(*cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    m = manifest
    counts = {s: sum(1 for c in m.chapters if c["status"] == s) for s in STATUSES}
    total = sum(c.get("duration_s") or 0.0 for c in m.chapters)
    said = ", ".join(f"{counts[s]} {s}" for s in ("ok", "failed", "skipped")) + "".join(
        f", {counts[s]} {s}" for s in ("partial", "interrupted", "running", "pending") if counts[s])
    hw = m.hardware or {}
    names = hw.get("gpu_names") or []
    machine = (f"{hw.get('gpu_count') or len(names)} x {names[0]}" if names and len(set(names)) == 1
               else ", ".join(names) or "no GPU")
    if hw.get("virtualization") and hw["virtualization"] not in ("none", "bare metal"):
        machine += f", {hw['virtualization']}"
    made_from = commit_provenance(m)[0]
    rp = m.replayed or {}
    presented = (f" Measured on that machine and presented again by commit `{rp.get('book_commit')}`"
                 f"{'' if rp.get('clean') else ' (not a clean commit)'} on {str(rp.get('started'))[:10]}, measuring "
                 f"nothing: {len(rp.get('chapters') or [])} chapters re-executed from the run's saved results."
                 if rp else "")
    lines = [
        "# Run status", "",
        ":::{admonition} This run",
        ":class: tip book-answer",
        f"Run `{m.run_id}` of target `{m.target}` executed on {machine}; {made_from}. Chapters: "
        f"{said}, {total:.1f} s of execution, started "
        f"{str(m.started)[:16].replace('T', ' ') + ' UTC' if m.started else 'at an unrecorded time'}."
        + presented + f" GPU test tier: {gputier.summary(m)}.",
        ":::", "",
        "This page is generated from the run's `manifest.json` each time the site is built, so it always "
        "describes the run being shown.", "",
        "## Chapters", "",
    ]
    errors = any(c.get("error") for c in m.chapters)  # no empty error column on a run without errors
    lines += [row("#", "chapter", "status", "time (s)", *(["error"] if errors else [])),
              row("---", "---", "---", "---:", *(["---"] if errors else []))]
    for i, c in enumerate(m.chapters, 1):
        err = c.get("error") or {}
        e = f"{err.get('ename', '')}: {str(err.get('evalue', '')).splitlines()[0][:200] if err.get('evalue') else ''}" if err else ""
        lines.append(row(i, titles.get(c["stem"], c["stem"]), f"**{c['status']}**", f"{c.get('duration_s') or 0.0:.1f}",
                         *([e] if errors else [])))
    lines += ["", "## The run, its hardware and software"]
    lines += _fold("Run id, target, times, commit and sessions", [
        row("field", "value"), row("---", "---"),
        row("run id", f"`{m.run_id}`"),
        row("target", f"`{m.target}`: {m.target_description}"),
        row("started (UTC)", m.started), row("finished (UTC)", m.finished or "not finished"),
        row("overall status", m.status),
        row("made from", made_from),
        row("GPU test tier (pytest -m gpu)", gputier.summary(m)),
        row("chapters", said),
        row("sessions", f"{len(m.sessions or [])} (a run continued with `--resume` has more than one)"
            if m.sessions else "not recorded"),
        row("execution time, all chapters (s)", f"{total:.1f}"),
        row("presented by", _presented_by(rp))])
    hw_rows = [row("item", "value"), row("---", "---")]
    for k, v in hw.items():
        if k == "hostname":  # the machine's name tells a reader nothing and is not for publishing
            continue
        hw_rows.append(row(k, _status_value(v)))
    lines += _fold(f"Hardware: {machine}", hw_rows)
    sw_rows = [row("package", "version"), row("---", "---")]
    for k, v in (m.versions or {}).items():
        sw_rows.append(row(k, v))
    lines += _fold("Software versions", sw_rows)
    p_rows = [row("chapter", "parameters"), row("---", "---")]
    for c in m.chapters:
        p = {k: v for k, v in (c.get("parameters") or {}).items() if k != "run_dir"}
        p_rows.append(row(c["stem"], "`" + json.dumps(p) + "`" if p else "defaults"))
    lines += _fold("Parameters per chapter", p_rows)
    env = environment.lines(m)
    lines += ["## Environment"]
    lines += _fold(f"Which Python executed the run, and why: {(m.environment or {}).get('kind') or 'not recorded'}",
                   [ln for ln in env if ln.strip() != "## Environment"])
    return "\n".join(lines) + "\n"
