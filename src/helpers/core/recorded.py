"""Recorded figures of the original investigation, loaded from data/ and checked against a schema.

Every table under data/ is tidy (one observation a row) and every row names its source (an id in
data/sources.yaml) and the phase of the investigation it belongs to. `load("recorded/serving.csv")`
returns a validated DataFrame; a malformed file fails with a message naming the file, the row and
the column.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

from helpers import repo_root

_TYPES = {"str": "string", "int": "Int64", "float": "Float64", "bool": "boolean"}
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


class DataError(ValueError):
    """A data file does not match data/schema.yaml."""


def data_dir() -> Path:
    return repo_root() / "data"


#: libyaml's safe loader where PyYAML has it (its wheels do): the repository's own YAML, parsed in every chapter,
#: took about 0.6 s of a chapter's CPU with the pure-Python parser (schema, sources and the model) and about
#: 0.05 s with libyaml; the same documents, the same values
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str):
    """A YAML document of the repository's own (data/, _toc.yml) as yaml.safe_load reads it, by SAFE_LOADER."""
    return yaml.load(text, Loader=SAFE_LOADER)


@lru_cache(maxsize=None)
def schema() -> dict:
    return load_yaml((data_dir() / "schema.yaml").read_text())


@lru_cache(maxsize=None)
def sources() -> dict:
    return load_yaml((data_dir() / "sources.yaml").read_text())


def source_url(source_id: str, entries: dict | None = None) -> str | None:
    """The web address of a source in data/sources.yaml (its `url` field), or None: an unknown id, an
    entry without a url (a seed document, an entry not yet given one) or a url that is not http(s).
    `entries` stands for the sources file's contents (tests)."""
    src = sources() if entries is None else entries
    entry = src.get(str(source_id)) if isinstance(src, dict) else None
    url = entry.get("url") if isinstance(entry, dict) else None
    if not isinstance(url, str) or not url.strip().startswith(("https://", "http://")):
        return None
    return url.strip()


def _convert(name: str, col: str, kind: str, raw: pd.Series) -> pd.Series:
    if kind == "str":
        # text stays text: a recorded outcome "nan" (a NaN crash) is the string "nan", never a missing
        # value (`load` reads every cell as a string with keep_default_na=False)
        return raw.astype("string").str.strip().replace("", pd.NA)
    out = []
    for i, v in raw.items():
        if pd.isna(v) or str(v).strip() == "":
            out.append(None)
            continue
        s = str(v).strip()
        try:
            if kind == "int":
                f = float(s)
                if f != int(f):
                    raise ValueError
                out.append(int(f))
            elif kind == "float":
                out.append(float(s))
            elif kind == "bool":
                if s.lower() in _TRUE:
                    out.append(True)
                elif s.lower() in _FALSE:
                    out.append(False)
                else:
                    raise ValueError
        except ValueError:
            raise DataError(
                f"data/{name}, row {i + 2}, column '{col}': {s!r} is not a {kind}; "
                f"fix the value or the column's type in data/schema.yaml"
            ) from None
    return pd.Series(out, index=raw.index, dtype=_TYPES[kind])


def validate(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Type and check `df` (read as strings) against the schema entry `name`."""
    sch = schema()
    if name not in sch:
        known = ", ".join(k for k in sch if not k.startswith("_"))
        raise DataError(f"data/{name} has no schema entry in data/schema.yaml; known tables: {known}")
    spec = sch[name]
    cols = spec["columns"]
    missing = [c for c in cols if c not in df.columns]
    extra = [c for c in df.columns if c not in cols]
    if missing or extra:
        raise DataError(
            f"data/{name}: columns do not match data/schema.yaml "
            f"(missing: {missing or 'none'}; unexpected: {extra or 'none'})"
        )
    out = pd.DataFrame({c: _convert(name, c, cols[c], df[c]) for c in cols})
    for c in spec.get("required", []):
        bad = out.index[out[c].isna()]
        if len(bad):
            raise DataError(f"data/{name}, row {bad[0] + 2}: required column '{c}' is empty")
    for c, allowed in spec.get("choices", {}).items():
        bad = out.index[~out[c].isna() & ~out[c].isin(allowed)]
        if len(bad):
            raise DataError(
                f"data/{name}, row {bad[0] + 2}, column '{c}': {out[c][bad[0]]!r} is not one of {allowed}"
            )
    for group in spec.get("one_of", []):
        filled = out[group].notna().all(axis=1)
        others = [g for g in spec["one_of"] if g is not group]
        for g in others:
            filled |= out[g].notna().all(axis=1)
        bad = out.index[~filled]
        if len(bad):
            raise DataError(
                f"data/{name}, row {bad[0] + 2}: needs one of {spec['one_of']} filled in"
            )
        break
    for c in spec.get("unique", []):
        dup = out[c][out[c].duplicated()]
        if len(dup):
            raise DataError(f"data/{name}: column '{c}' repeats {dup.iloc[0]!r}; it must be unique")
    known_sources = sources()
    bad = out.index[~out["source"].isin(list(known_sources))]
    if len(bad):
        raise DataError(
            f"data/{name}, row {bad[0] + 2}: source {out['source'][bad[0]]!r} is not an id in "
            f"data/sources.yaml ({', '.join(known_sources)})"
        )
    if "phase" in out.columns:
        phases = sch["_phases"]
        bad = out.index[~out["phase"].isin(phases)]
        if len(bad):
            raise DataError(
                f"data/{name}, row {bad[0] + 2}: phase {out['phase'][bad[0]]!r} is not one of {phases}"
            )
    return out


def load(name: str) -> pd.DataFrame:
    """Load and validate the table data/<name> (for example "recorded/serving.csv")."""
    path = data_dir() / name
    if not path.exists():
        known = ", ".join(k for k in schema() if not k.startswith("_"))
        raise DataError(f"data/{name} does not exist; known tables: {known}")
    text = path.read_bytes()
    # the same bytes under the same schema and sources validate to the same table: kept, and a copy handed
    # out (the caller may change it); a file rewritten since, even within the clock's tick, has other bytes.
    # The schema and sources objects are held beside the table, so their ids are not reused while it is kept.
    sch, src = schema(), sources()
    key = (name, hashlib.sha1(text).hexdigest(), id(sch), id(src))
    kept = _LOADED.get(key)
    if kept is None or kept[0] is not sch or kept[1] is not src:
        out = validate(name, pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False))
        out.attrs["table"] = f"data/{name}"  # named in value()'s errors
        if len(_LOADED) >= 256:
            _LOADED.clear()
        kept = _LOADED[key] = (sch, src, out)
    return kept[2].copy()


#: validated tables by (name, content hash, schema, sources): `load` validates a file's bytes once a process
_LOADED: dict = {}


def derived(*names: str, reads: tuple = ()):
    """Keep the result of a function without arguments that reads only the tables data/<names> through `load`
    (and the functions `reads` names, (module, attribute) pairs looked up at each call): computed again when a
    file's bytes change, or the schema, the sources, `load` or one of `reads` is another object (a test that
    patches one gets its own result); a deep copy is handed out (the caller may change it). The diagnosis asked
    for the same observations about 60 times a page."""
    def deco(fn):
        kept: dict = {}

        @functools.wraps(fn)
        def wrapper():
            d = data_dir()
            deps = (globals()["load"], schema(), sources()) + tuple(getattr(m, a) for m, a in reads)
            key = (str(d),) + tuple(hashlib.sha1((d / n).read_bytes()).hexdigest() if (d / n).exists() else ""
                                    for n in names)
            hit = kept.get(key)
            if hit is None or any(x is not y for x, y in zip(hit[0], deps)):
                kept.clear()
                hit = kept[key] = (deps, fn())
            return copy.deepcopy(hit[1])
        return wrapper
    return deco


@dataclass(frozen=True)
class Study:
    """One measured study: a folder data/measured/<id>/ and its entry in data/sources.yaml."""

    id: str
    path: Path
    role: str
    entry: dict


def measured_studies(role: str | None = None) -> list[Study]:
    """The registered measured studies (of one `role`), checked both ways: every folder under
    data/measured/ has a sources.yaml entry with the keys data/schema.yaml's `_measured` lists, and every
    measured entry names its folder, which exists."""
    spec = schema()["_measured"]
    src = sources()
    root = data_dir() / "measured"
    entries = {k: v for k, v in src.items() if v.get("kind") == "measured"}
    folders = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    for f in folders:
        if f not in entries:
            raise DataError(f"data/measured/{f}/ has no entry in data/sources.yaml: add one with the keys "
                            f"{spec['keys']} (kind: measured), or remove the folder")
    out = []
    for k, v in entries.items():
        missing = [key for key in spec["keys"] if not v.get(key)]
        if missing:
            raise DataError(f"data/sources.yaml: measured study {k!r} lacks {missing}; every measured study "
                            f"needs {spec['keys']}")
        if v["file"].rstrip("/") != f"data/measured/{k}" or k not in folders:
            raise DataError(f"data/sources.yaml: measured study {k!r} names file {v['file']!r}; expected the "
                            f"folder data/measured/{k}/, which must exist")
        if v["role"] not in spec["roles"]:
            raise DataError(f"data/sources.yaml: measured study {k!r} has role {v['role']!r}; known roles "
                            f"(data/schema.yaml _measured): {spec['roles']}")
        if role is None or v["role"] == role:
            out.append(Study(k, root / k, v["role"], v))
    if role is not None and role not in spec["roles"]:
        raise DataError(f"no study role {role!r}; known roles (data/schema.yaml _measured): {spec['roles']}")
    return out


def study(role: str) -> Study:
    """The one registered study of `role`; an error names the role and the studies found."""
    found = measured_studies(role)
    if len(found) != 1:
        raise DataError(f"expected exactly one measured study of role {role!r} in data/sources.yaml, found "
                        f"{[s.id for s in found]}")
    return found[0]


def tables() -> list[str]:
    """Names of every table in the schema."""
    return [k for k in schema() if not k.startswith("_")]


def value(df: pd.DataFrame, column: str = "value", **where):
    """The `column` of the row of `df` matching `where` (column=value pairs), for example
    `value(serving, experiment="sweep_256_256", metric="output_throughput", concurrency=64)`.

    Rows that repeat one figure (the same figure from several sources) count once. A DataError names the
    table, the condition and what the table holds instead when no row matches (a renamed label, a removed
    row), when the matching rows disagree, or when the cell is empty."""
    table = df.attrs.get("table", "the table")
    cond = ", ".join(f"{k}={v!r}" for k, v in where.items())
    for k in (*where, column):
        if k not in df.columns:
            raise DataError(f"{table} has no column '{k}' (columns: {', '.join(df.columns)})")
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        hit = m & (df[k] == v).fillna(False).astype(bool)
        if not hit.any():
            have = ", ".join(sorted(str(x) for x in df.loc[m, k].dropna().unique())) or "none"
            raise DataError(f"{table} has no row where {cond}: no {k}={v!r} among the rows matching the "
                            f"conditions before it ({k} there: {have})")
        m = hit
    vals = df.loc[m, column].drop_duplicates()
    if len(vals) > 1:
        raise DataError(f"{table}: the {int(m.sum())} rows where {cond} disagree on {column} ({list(vals)})")
    if pd.isna(vals.iloc[0]):
        raise DataError(f"{table}: the row where {cond} has no {column}")
    return vals.iloc[0]


@dataclass(frozen=True)
class Cited:
    """A recorded figure with where it came from."""

    value: object
    unit: str
    source: str

    @property
    def seed_file(self) -> str:
        return sources()[self.source]["file"]


def hardware() -> dict[str, Cited]:
    """The original machine, item -> Cited value."""
    df = load("recorded/hardware.csv")
    return {r.item: Cited(r.value, r.unit if pd.notna(r.unit) else "", r.source) for r in df.itertuples()}


def model_config(name: str = "glm5") -> dict:
    """A model configuration from data/models/<name>.yaml (`name` is a plain file stem: nothing outside
    data/models/ is read)."""
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", name) or ".." in name:
        known = sorted(p.stem for p in (data_dir() / "models").glob("*.yaml"))
        raise DataError(f"model {str(name)[:80]!r} is not a file stem under data/models/ (letters, digits, '.', '_', "
                        f"'-'; no '/' or '..'); known: {known}")
    path = data_dir() / "models" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (data_dir() / "models").glob("*.yaml"))
        raise DataError(f"no model configuration data/models/{name}.yaml; known: {known}")
    cfg = load_yaml(path.read_text())
    for key in ("name", "source", "architecture"):
        if key not in cfg:
            raise DataError(f"data/models/{name}.yaml lacks the key '{key}'")
    if cfg["source"] not in sources():
        raise DataError(f"data/models/{name}.yaml: source {cfg['source']!r} is not in data/sources.yaml")
    return cfg
