"""A target: the parameter set a run executes with (targets/<name>.yaml, or a YAML file by path).

`load_target` reads one and refuses, with one message naming the file, anything but a page of settings
with the known keys of the right types; `apply_overrides` lays the command line's `-p` items over it.
Every module of the runbook raises `RunbookError` for a problem with its inputs.
"""
from __future__ import annotations

import errno
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from helpers import repo_root
from helpers.core.params import short

TARGETS_DIR = "targets"
_TARGET_KEYS = {"description", "parameters", "chapters", "skip", "execution_timeout", "requires"}
MAX_EXECUTION_TIMEOUT_S = 7 * 24 * 3600
#: a target file is a page of settings (the largest in targets/ is about 3 KiB); more is refused unread
MAX_TARGET_BYTES = 256 * 1024


class RunbookError(RuntimeError):
    """A problem with the runbook's inputs (target, chapters, run directory)."""


#: libyaml's parser where PyYAML was built with it (its wheels are): the same nodes and marks as the pure-Python
#: parser's, some thirty times faster on a long value (the bad-input sweep parses hundreds of them)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SAFE_LOADER):
    """YAML's safe loader, refusing a mapping that holds one key twice (plain YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:   # an unhashable key: the base constructor says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} appears twice, at line {first + 1} and at line "
                        f"{key_node.start_mark.line + 1} (YAML would keep the second silently); keep one",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


#: the most values (scalars, lists and mappings, each alias counted as what it repeats) a YAML document may
#: expand to, and the deepest nesting: a target is a page of settings (the largest in targets/ has a few
#: hundred values, 4 levels); more is an alias tree (a few hundred bytes that expand exponentially) or a mistake.
#: A long plain list stays within it (the parameter's own check then says how many items it may have).
MAX_YAML_VALUES = 1_000_000
MAX_YAML_DEPTH = 32


class YamlTooLarge(yaml.constructor.ConstructorError):
    """A YAML document that expands to too many values, nests too deep or contains itself."""


def _too_large(problem: str, mark=None) -> YamlTooLarge:
    return YamlTooLarge(None, None, problem, mark)


def _expanded(node, marks: dict, depth: int = 1) -> int:
    """How many values `node` expands to, aliases followed (each distinct node is counted once, its count
    reused, so an alias tree is measured in time linear in its text); refuses past MAX_YAML_VALUES or
    MAX_YAML_DEPTH, or a node that contains itself, with a ConstructorError at the node."""
    key = id(node)
    if key in marks:
        if marks[key] is None:
            raise _too_large("a value that contains itself (a recursive alias); give the value in full",
                             node.start_mark)
        marks["aliased"] = True
        return marks[key]
    if depth > MAX_YAML_DEPTH:
        raise _too_large(f"values nested more than {MAX_YAML_DEPTH} deep (a target is a page of settings); "
                         "give a flat value", node.start_mark)
    marks[key] = None
    n = 1
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        for child in node.value:
            for c in (child if isinstance(node, yaml.MappingNode) else (child,)):
                n += _expanded(c, marks, depth + 1)
                if n > MAX_YAML_VALUES:
                    why = (" (aliases, *name, repeat what they name, and repeats of repeats grow exponentially); "
                           "give the values themselves, without aliases" if marks.get("aliased") else
                           "; a target is a page of settings")
                    raise _too_large(f"this value expands to more than {MAX_YAML_VALUES} values{why}", node.start_mark)
    marks[key] = n
    return n


def load_yaml(text: str):
    """YAML text as Python values, refusing duplicate keys (naming both lines), and a document that expands
    to more than MAX_YAML_VALUES values or nests deeper than MAX_YAML_DEPTH (checked on the parsed nodes,
    before any value is built, so an alias tree is refused at once)."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded(node, {})
        return loader.construct_document(node)
    except RecursionError:    # the parser itself recurses once a level: thousands of [[[...]]]
        raise _too_large(f"values nested more than {MAX_YAML_DEPTH} deep (a target is a page of settings); "
                         "give a flat value") from None
    except yaml.YAMLError as exc:   # libyaml's parser stops at its own depth (1,000) where Python's recursed
        if getattr(exc, "problem", None) != "exceeded maximum nesting depth":
            raise
        raise _too_large(f"values nested more than {MAX_YAML_DEPTH} deep (a target is a page of settings); "
                         "give a flat value", exc.problem_mark) from None
    finally:
        loader.dispose()


def known_targets(root: Path | None = None) -> list[str]:
    root = root or repo_root()
    return sorted(p.stem for p in (root / TARGETS_DIR).glob("*.yaml"))


@dataclass
class Target:
    name: str
    description: str
    parameters: dict = field(default_factory=dict)
    chapters: dict = field(default_factory=dict)
    skip: list = field(default_factory=list)
    execution_timeout: int = 900
    requires: dict = field(default_factory=dict)  # see unmet_requirements
    path: str = ""                                  # the file it was read from
    origins: dict = field(default_factory=dict)     # (chapter or "", parameter) -> where the value came from
    overrides: list = field(default_factory=list)   # the -p items applied
    cli: list = field(default_factory=list)         # [(chapter or "", parameter)] given with -p, in order

    def origin(self, chapter: str, name: str) -> str:
        return self.origins.get((chapter, name)) or self.origins.get(("", name)) or self.path or "the target"

    def step_origin(self, chapter: str, name: str) -> str:
        """Where the value `chapter` receives for `name` comes from, the command line first (it wins)."""
        if (chapter, name) in self.cli or ("", name) in self.cli:
            return self.origins.get((chapter, name)) if (chapter, name) in self.cli else self.origins[("", name)]
        return self.origin(chapter, name)

    def as_plan(self) -> dict:
        """What the manifest records, so that --resume runs the same plan."""
        return {"target": self.name, "target_file": self.path, "description": self.description,
                "parameters": self.parameters, "chapters": self.chapters, "skip": self.skip,
                "execution_timeout": self.execution_timeout, "requires": self.requires,
                "overrides": self.overrides, "cli": [list(x) for x in self.cli],
                "origins": [[c, n, w] for (c, n), w in self.origins.items()]}

    @classmethod
    def from_plan(cls, p: dict) -> "Target":
        t = cls(p["target"], p.get("description", ""), dict(p.get("parameters") or {}),
                {k: dict(v or {}) for k, v in (p.get("chapters") or {}).items()}, list(p.get("skip") or []),
                int(p.get("execution_timeout", 900)), dict(p.get("requires") or {}), p.get("target_file", ""),
                {(c, n): w for c, n, w in p.get("origins") or []}, list(p.get("overrides") or []),
                [tuple(x) for x in p.get("cli") or []])
        return t


def target_path(name: str, root: Path | None = None) -> Path:
    """targets/<name>.yaml for a plain name; a path (it holds '/' or ends in .yaml/.yml) as given."""
    root = root or repo_root()
    if "/" in name or name.endswith((".yaml", ".yml")) or name in (".", ".."):
        p = Path(name)
        return p if p.is_absolute() else Path.cwd() / p
    return root / TARGETS_DIR / f"{name}.yaml"


def load_target(name: str, root: Path | None = None) -> Target:
    """Read a target (targets/<name>.yaml, or a YAML file by path); refuse, with one message naming the
    file, a missing file or a directory, YAML that does not parse, a top level that is not a mapping,
    unknown keys, and keys of the wrong type."""
    root = root or repo_root()
    if not isinstance(name, str) or not name.strip():
        raise RunbookError(f"--target {short(name)}: give a target name ({', '.join(known_targets(root))}) or a YAML file")
    path = target_path(name, root)
    raw = _read_mapping(path, name, root)
    bad = []
    extra = set(map(str, raw)) - _TARGET_KEYS
    if extra:
        bad.append(f"unknown key(s) {sorted(extra)}; allowed: {sorted(_TARGET_KEYS)}")
    desc = raw.get("description")
    if not isinstance(desc, str) or not desc.strip():
        bad.append(f"needs a `description` (a sentence saying what the target runs); got {short(desc)}")
    params, chap = _parameters(raw, bad), _chapters(raw, bad)
    skip, timeout = _skip(raw, bad), _timeout(raw, bad)
    try:
        requires = _requires(path, raw.get("requires"))
    except RunbookError as e:
        bad.append(str(e).split(": ", 1)[1])
        requires = {}
    if bad:
        raise RunbookError("\n".join(f"{path}: {b}" for b in bad))
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
    is_path = "/" in name or name.endswith((".yaml", ".yml"))
    return Target(path.stem if is_path else name, desc, dict(params),
                  {str(k): dict(v) for k, v in chap.items()}, list(skip), int(timeout), requires, shown)


def _read_mapping(path: Path, name: str, root: Path) -> dict:
    """The target file's top level, a mapping; a missing, unreadable or unparsable file is refused, and
    so is a top level that is not a mapping or holds unknown keys."""
    known = known_targets(root)
    try:
        path.stat()
    except OSError as e:     # not there, or a name longer than the file system allows: no such target
        if e.errno != errno.ENOENT and len(str(path)) < 1024:
            raise RunbookError(f"target {short(name)}: {path} cannot be read ({e.strerror})") from None
        raise RunbookError(f"unknown target {short(name)}; known targets: {', '.join(known)} "
                           f"(each is a file {TARGETS_DIR}/<name>.yaml, or give the path of a YAML file)") from None
    if path.is_dir():
        raise RunbookError(f"target {short(name)}: {path} is a directory; a target is a YAML file "
                           f"({TARGETS_DIR}/<name>.yaml); known targets: {', '.join(known)}")
    if not path.exists():
        raise RunbookError(f"unknown target {short(name)}; known targets: {', '.join(known)} "
                           f"(each is a file {TARGETS_DIR}/<name>.yaml, or give the path of a YAML file)")
    try:
        size = path.stat().st_size
        if size > MAX_TARGET_BYTES:
            raise RunbookError(f"{path}: {size / 1024:.0f} KiB is too large for a target (at most "
                               f"{MAX_TARGET_BYTES // 1024} KiB: a target is a page of settings, like the files in "
                               f"{TARGETS_DIR}/); give the right file")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RunbookError(f"{path}: cannot be read as text ({e})") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        said = "refused" if isinstance(e, YamlTooLarge) else "not valid YAML"
        raise RunbookError(f"{path}: {said}{where}: {getattr(e, 'problem', None) or e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RunbookError(f"{path}: a target is a mapping with the keys {sorted(_TARGET_KEYS)}; this file's top "
                           f"level is a {type(raw).__name__} ({str(raw)[:60]!r})")
    return raw


def _parameters(raw: dict, bad: list) -> dict:
    """The target's `parameters` (a problem appended to `bad`)."""
    params = raw.get("parameters")
    if params is None:
        params = {}
    elif not isinstance(params, dict):
        bad.append(f"`parameters` must be a mapping NAME: VALUE (applied to every chapter that declares NAME); "
                   f"got a {type(params).__name__}: {str(params)[:60]}")
        params = {}
    return params


def _chapters(raw: dict, bad: list) -> dict:
    """The target's per-chapter overrides, `chapters` (a problem appended to `bad`)."""
    chap = raw.get("chapters")
    if chap is None:
        chap = {}
    elif not isinstance(chap, dict):
        bad.append(f"`chapters` must be a mapping CHAPTER: {{NAME: VALUE}} (per-chapter overrides, by notebook "
                   f"stem); got a {type(chap).__name__}: {str(chap)[:60]}")
        chap = {}
    else:
        for k, v in list(chap.items()):
            if v is None:
                chap[k] = {}
            elif not isinstance(v, dict):
                bad.append(f"`chapters: {k}:` must be a mapping NAME: VALUE; got a {type(v).__name__}: {str(v)[:60]}")
                chap[k] = {}
    return chap


def _skip(raw: dict, bad: list) -> list:
    """The target's `skip`, a list of chapter stems (a problem appended to `bad`)."""
    skip = raw.get("skip")
    if skip is None:
        skip = []
    elif isinstance(skip, str) or not isinstance(skip, list) or not all(isinstance(x, str) for x in skip):
        bad.append(f"`skip` must be a list of chapter stems, e.g. `skip: [06_vm_p2p]`; got {short(skip)}"
                   + (" (a string, which would be read letter by letter)" if isinstance(skip, str) else ""))
        skip = []
    return skip


def _timeout(raw: dict, bad: list):
    """The target's `execution_timeout`, whole seconds (a problem appended to `bad`)."""
    timeout = raw.get("execution_timeout", 900)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout)
            or timeout < 1 or timeout > MAX_EXECUTION_TIMEOUT_S or float(timeout) != int(timeout)):
        bad.append(f"`execution_timeout` must be a whole number of seconds from 1 to {MAX_EXECUTION_TIMEOUT_S} "
                   f"(the time limit of one notebook cell); got {short(timeout)}"
                   + (" (0 would remove the time limit)" if timeout == 0 and not isinstance(timeout, bool) else ""))
        timeout = 900
    return timeout


_REQUIRE_KEYS = ("parameters", "paths", "packages")


def _requires(path: Path, raw) -> dict:
    """A target's `requires` as {kind: {name: what it is}}; a list gives names without a description."""
    if not raw:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(_REQUIRE_KEYS):
        raise RunbookError(f"{path}: `requires` takes the keys {', '.join(_REQUIRE_KEYS)}, each a list of names "
                           f"or a mapping name -> what it is; got {short(raw)}")
    return {k: ({str(n): "" for n in v} if isinstance(v, list) else {str(n): str(d or "") for n, d in v.items()})
            for k, v in raw.items() if v}


def _item(text: str, chars: int = 80) -> str:
    """A -p item as a message shows it: a long one cut, saying how long it was."""
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} characters)"


def apply_overrides(target: Target, items: list[str]) -> None:
    """`-p NAME=VALUE` (every chapter that declares NAME) or `-p CHAPTER.NAME=VALUE` (one chapter);
    VALUE is read as YAML (`-p tolerance=0.3`, `-p concurrencies=[1,4]`). The command line wins: a value given
    here replaces the target's, its per-chapter values included, and `-p CHAPTER.NAME` wins over `-p NAME`;
    `plan` checks every value that a chapter will receive, whoever gave it."""
    bad, given = [], {}
    for item in items or []:
        key, sep, value = item.partition("=")
        chapter, dot, name = key.strip().rpartition(".")
        if not sep or not name.strip() or (dot and not chapter.strip()):
            bad.append(f"-p {short(item)}: expected NAME=VALUE or CHAPTER.NAME=VALUE (e.g. -p tolerance=0.3 or "
                       f"-p 06_vm_p2p.sweep=full)")
            continue
        try:
            val = load_yaml(value)
        except YamlTooLarge as exc:
            bad.append(f"-p {short(item)}: the value is refused: {exc.problem}")
            continue
        except yaml.YAMLError as exc:
            bad.append(f"-p {short(item)}: the value is not valid YAML ({str(exc).splitlines()[0]})")
            continue
        if dot:
            target.chapters.setdefault(chapter, {})[name] = val
            target.origins[(chapter, name)] = f"the command line (-p {_item(item)})"
        else:
            target.parameters[name] = val
            target.origins[("", name)] = f"the command line (-p {_item(item)})"
        key = (chapter if dot else "", name)
        if key in given and given[key][1] != val:
            bad.append(f"-p {short(item)}: {key[0] + '.' if dot else ''}{name} is given twice, as -p "
                       f"{short(given[key][0])} before; give it once (the command line would keep the last silently)")
            continue
        given[key] = (item, val)
        if key in target.cli:
            target.cli.remove(key)
        target.cli.append(key)
        target.overrides.append(item)
    if bad:
        raise RunbookError("\n".join(bad))
